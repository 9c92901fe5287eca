/** Sending events to Flare (`POST /trigger`). */

import { eventBody } from "./execute.js";
import type { Duration } from "./job.js";

/** How to reach Flare. */
export interface ClientOptions {
  /** Flare's address (default `process.env.FLARE_URL`, else `http://127.0.0.1:3000`). */
  baseUrl?: string;
  /** The API key when Flare has one (default `process.env.FLARE_API_KEY`). */
  apiKey?: string;
  /** A `fetch` to use (default the global one). */
  fetch?: typeof fetch;
}

/** Options of one event. */
export interface SendOptions {
  /** Idempotency id: the same id never starts anything twice. */
  id?: string;
  /** Deliver later: `"90s"`, `"1h30m"`, or milliseconds. */
  delay?: Duration;
  /** Deliver at this time. */
  deliverAt?: Date | string;
  /** Any JSON carried along with the event. */
  context?: unknown;
}

/** The stored event, as Flare answers. */
export interface SentEvent {
  id: string;
  name: string;
  runIds?: string[];
  [field: string]: unknown;
}

/** What sending answered. */
export interface SendResult {
  /** The stored event. */
  event: SentEvent;
  /** The id was sent before: nothing new started. */
  duplicate: boolean;
}

/** A Flare client. */
export class Flare {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env ?? {};
    this.baseUrl = (options.baseUrl ?? env.FLARE_URL ?? "http://127.0.0.1:3000").replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? env.FLARE_API_KEY;
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** Sends the event `name` with `payload`; resolves once it and its runs are stored. */
  async send<P = unknown>(name: string, payload?: P, options: SendOptions = {}): Promise<SendResult> {
    const e = eventBody({ name, payload, ...options });
    const body: Record<string, unknown> = { event: e.name, payload: e.payload };
    for (const k of ["delay", "deliverAt", "context"]) if (e[k] !== undefined) body[k] = e[k];
    if (options.id !== undefined) body.id = options.id;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    const res = await this.fetch(`${this.baseUrl}/trigger`, { method: "POST", headers, body: JSON.stringify(body) });
    const text = await res.text();
    let answer: { result?: SentEvent; duplicate?: boolean; error?: string | { message?: string } } = {};
    try {
      answer = JSON.parse(text);
    } catch {
      /* reported below */
    }
    if (!res.ok || answer.result === undefined) {
      const why = typeof answer.error === "string" ? answer.error : answer.error?.message;
      throw new Error(`Flare answered HTTP ${res.status}${why ? `: ${why}` : ""}`);
    }
    return { event: answer.result, duplicate: answer.duplicate === true };
  }
}

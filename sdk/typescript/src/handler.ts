/**
 * The endpoint: verifies each request, answers `index` with the jobs (protocol version 2) and
 * `run` with what the job reached. Framework-free: the adapters in `serve.ts` feed it raw bodies.
 */

import { execute, flareUrl, type RunRequest } from "./execute.js";
import { indexEntry, type Job } from "./job.js";
import { SignatureError, verify, type SignedHeaders } from "./signature.js";

/** The protocol version this SDK speaks. */
export const PROTOCOL_VERSION = 2;

/** Largest request body read, in bytes. */
export const MAX_BODY_BYTES = 4 * 1024 * 1024;

/** How to serve jobs. */
export interface ServeOptions {
  /** The jobs this endpoint serves. */
  jobs: Job<any, any>[];
  /**
   * The endpoint's secret (`whsec_…`), or several while rotating. Default:
   * `process.env.FLARE_ENDPOINT_SECRET`.
   */
  secret?: string | string[];
  /**
   * Flare's address as the callers of `step.callback`'s URLs reach it (default
   * `process.env.FLARE_URL`, else `http://127.0.0.1:3000`).
   */
  baseUrl?: string;
}

/** An HTTP answer, before any framework. */
export interface HandlerResponse {
  status: number;
  body: string;
  headers: Record<string, string>;
}

/** Handles one raw request: `(body, header lookup) → response`. */
export type Handler = (body: string | Uint8Array, header: (name: string) => string | null | undefined) => Promise<HandlerResponse>;

function json(status: number, value: unknown): HandlerResponse {
  return { status, body: JSON.stringify(value), headers: { "content-type": "application/json" } };
}

function secretsOf(options: ServeOptions): string[] {
  const s = options.secret ?? (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.FLARE_ENDPOINT_SECRET;
  const list = Array.isArray(s) ? s : s ? [s] : [];
  if (list.length === 0) throw new Error("no secret: pass `secret` or set FLARE_ENDPOINT_SECRET to the endpoint's secret (whsec_…)");
  return list;
}

/** The framework-free handler of `options`' jobs. */
export function createHandler(options: ServeOptions): Handler {
  const secrets = secretsOf(options);
  const jobs = new Map<string, Job<any, any>>();
  for (const job of options.jobs) {
    if (jobs.has(job.options.id)) throw new Error(`job id ${job.options.id} is used twice`);
    jobs.set(job.options.id, job);
  }
  const index = { protocol: PROTOCOL_VERSION, jobs: options.jobs.map(indexEntry) };
  const baseUrl = flareUrl(options.baseUrl);
  return async (body, header) => {
    const headers: SignedHeaders = {
      "webhook-id": header("webhook-id"),
      "webhook-timestamp": header("webhook-timestamp"),
      "webhook-signature": header("webhook-signature"),
    };
    try {
      await verify(secrets, headers, body);
    } catch (e) {
      if (e instanceof SignatureError) return json(401, { error: e.message });
      throw e;
    }
    let request: { action?: string } & Omit<Partial<RunRequest>, "action">;
    try {
      request = JSON.parse(typeof body === "string" ? body : new TextDecoder().decode(body));
    } catch {
      return json(400, { error: "the body is not JSON" });
    }
    if (request.action === "index") return json(200, index);
    if (request.action !== "run") return json(400, { error: `unknown action ${JSON.stringify(request.action)}` });
    const job = jobs.get(request.job?.id ?? "");
    if (job === undefined) return json(200, { error: `this endpoint serves no job ${JSON.stringify(request.job?.id)}`, retry: false });
    return json(200, await execute(job, request as RunRequest, { baseUrl }));
  };
}

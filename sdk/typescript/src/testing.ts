/**
 * Testing a job without Flare: {@link runJob} runs it as Flare would (calling it again after each
 * step, sleeps over at once, events recorded, not sent), with chosen step results (mocks).
 */

import { execute, type ReportedStep, type RunAnswer, type StoredStep } from "./execute.js";
import type { Job } from "./job.js";

/** How to run the job. */
export interface RunJobOptions<P> {
  /** The event: its payload, and optionally its name and id. */
  event: { payload: P; name?: string; id?: string };
  /** Step results by key: these steps are not run, they return this (as if stored). */
  steps?: Record<string, unknown>;
  /** Step errors by key: these steps fail with this message. */
  failSteps?: Record<string, string>;
  /** The attempt (default 1) and attempts allowed (default 3). */
  attempt?: number;
  maxAttempts?: number;
}

/** What the run did. */
export interface RunJobResult<R> {
  /** The output, when the job returned. */
  output?: R;
  /** The error, when it failed; `retry: false` when no retry would fix it. */
  error?: string;
  retry?: boolean;
  /** The steps it ran (mocked ones not included), in order. */
  steps: ReportedStep[];
  /** Every step's result by key, mocked ones included. */
  results: Record<string, unknown>;
  /** The events its `sendEvent` steps sent. */
  events: Record<string, unknown>[];
  /**
   * The waits for events it reached. One not given in `steps` times out at once (returns
   * `null`); give its key in `steps` to resume it with an event instead.
   */
  waits: { key: string; event: string; match?: string; if?: string; timeoutMs: number }[];
  /** The sleeps it took, in ms or until a time. */
  sleeps: { key: string; durationMs?: number; until?: string }[];
  /** Its log lines. */
  logs: NonNullable<RunAnswer["logs"]>;
}

/** Runs `job` to its end for `options.event`, as Flare would, without Flare. */
export async function runJob<P, R>(job: Job<P, R>, options: RunJobOptions<P>): Promise<RunJobResult<R>> {
  const stored: Record<string, StoredStep> = {};
  for (const [k, v] of Object.entries(options.steps ?? {})) stored[k] = { output: v === undefined ? null : v };
  const mocked = new Set(Object.keys(stored));
  const result: RunJobResult<R> = { steps: [], results: {}, events: [], waits: [], sleeps: [], logs: [] };
  const runId = "run_test";
  for (let call = 0; call < 1000; call++) {
    const answer = await execute(job, {
      action: "run",
      protocol: 2,
      run: { id: runId, attempt: options.attempt ?? 1, maxAttempts: options.maxAttempts ?? 3 },
      job: { id: job.options.id, version: job.options.version ?? "1.0.0" },
      event: { id: options.event.id ?? "evt_test", name: options.event.name ?? "test", payload: options.event.payload },
      steps: stored,
    }, mocked);
    result.logs.push(...(answer.logs ?? []));
    for (const s of answer.steps ?? []) {
      if (s.op === "run" && "error" in s) {
        result.steps.push(s);
        continue;
      }
      if (mocked.has(s.key)) continue;
      result.steps.push(s);
      let output: unknown = null;
      if (s.op === "run" && "output" in s) output = s.output;
      if (s.op === "sleep") result.sleeps.push("until" in s ? { key: s.key, until: s.until } : { key: s.key, durationMs: s.durationMs });
      if (s.op === "waitForEvent") {
        const { key, event, timeoutMs } = s;
        result.waits.push({ key, event, ...(s.match !== undefined ? { match: s.match } : {}), ...(s.if !== undefined ? { if: s.if } : {}), timeoutMs });
      }
      if (s.op === "sendEvent") {
        result.events.push(...s.events);
        output = { ids: s.events.map((e, i) => `${runId}-${s.key}-${(e.key as string | undefined) ?? i}`) };
      }
      stored[s.key] = { output };
    }
    if ("output" in answer || "error" in answer) {
      for (const [k, v] of Object.entries(stored)) if ("output" in v) result.results[k] = v.output;
      if ("output" in answer) result.output = answer.output as R;
      if (answer.error !== undefined) {
        result.error = answer.error;
        result.retry = answer.retry !== false;
      }
      return result;
    }
  }
  throw new Error("the job never finished (1000 calls)");
}

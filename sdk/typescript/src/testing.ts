/**
 * Testing a job without Flare: {@link runJob} runs it as Flare would (calling it again after each
 * step, sleeps over at once, events recorded, not sent), with chosen step results (mocks).
 */

import { execute, flareUrl, type ReportedStep, type RunAnswer, type StoredStep } from "./execute.js";
import type { Job } from "./job.js";

/** How to run the job. */
export interface RunJobOptions<P> {
  /** The event: its payload, and optionally its name and id. */
  event: { payload: P; name?: string; id?: string };
  /**
   * Step results by key: these steps are not run, they return this (as if stored). For
   * `step.invoke` the child's output, for `step.waitForCallback` the body posted, for
   * `step.waitForEvent` the event.
   */
  steps?: Record<string, unknown>;
  /**
   * Step errors by key: these steps fail with this message (a `run` step's function is not
   * called; a `step.invoke` throws a `StepError`, as when the child failed).
   */
  failSteps?: Record<string, string>;
  /** Jobs that `step.invoke` runs (with `runJob`) when its step is not mocked. */
  jobs?: Job<any, any>[];
  /** Flare's address, the start of callbacks' URLs (as `serve`'s `baseUrl`). */
  baseUrl?: string;
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
  /**
   * The jobs it invoked (not mocked ones). A job given in `jobs` runs (its output, or its error
   * as a `StepError`); any other fails the step: mock its result in `steps`.
   */
  invokes: { key: string; job: string; payload: unknown; timeoutMs: number }[];
  /**
   * The callbacks it made (not mocked ones), with their URLs (token `cb_test_<key>`). A wait for
   * one not given in `steps` times out at once (returns `null`); give its key in `steps` to
   * resume it with a body instead.
   */
  callbacks: { key: string; url: string; timeoutMs: number }[];
  /** Its log lines. */
  logs: NonNullable<RunAnswer["logs"]>;
}

/** The callback `key` as Flare would tell it in a test. */
function testCallback(key: string, deadline: string) {
  const token = `cb_test_${key}`;
  return { token, path: `/callbacks/${token}`, deadline };
}

/** Runs `job` to its end for `options.event`, as Flare would, without Flare. */
export async function runJob<P, R>(job: Job<P, R>, options: RunJobOptions<P>): Promise<RunJobResult<R>> {
  const mocks = options.steps ?? {};
  const stored: Record<string, StoredStep> = {};
  // A mocked callback has a URL too.
  for (const [k, v] of Object.entries(mocks)) stored[k] = { output: v === undefined ? null : v, callback: testCallback(k, "") };
  const mocked = new Set(Object.keys(stored));
  const failures = options.failSteps ?? {};
  const result: RunJobResult<R> = { steps: [], results: {}, events: [], waits: [], sleeps: [], invokes: [], callbacks: [], logs: [] };
  const runId = "run_test";
  for (let call = 0; call < 1000; call++) {
    const request = {
      action: "run" as const,
      protocol: 2,
      run: { id: runId, attempt: options.attempt ?? 1, maxAttempts: options.maxAttempts ?? 3 },
      job: { id: job.options.id, version: job.options.version ?? "1.0.0" },
      event: { id: options.event.id ?? "evt_test", name: options.event.name ?? "test", payload: options.event.payload },
      steps: stored,
    };
    const answer = await execute(job, request, { mocked, failures, ...(options.baseUrl !== undefined ? { baseUrl: options.baseUrl } : {}) });
    result.logs.push(...(answer.logs ?? []));
    for (const s of answer.steps ?? []) {
      if (s.op === "run" && "error" in s) {
        result.steps.push(s);
        continue;
      }
      if (mocked.has(s.key)) continue;
      result.steps.push(s);
      let told: StoredStep = { output: null };
      if (s.op === "run" && "output" in s) told = { output: s.output };
      if (s.op === "sleep") result.sleeps.push("until" in s ? { key: s.key, until: s.until } : { key: s.key, durationMs: s.durationMs });
      if (s.op === "waitForEvent") {
        const { key, event, timeoutMs } = s;
        result.waits.push({ key, event, ...(s.match !== undefined ? { match: s.match } : {}), ...(s.if !== undefined ? { if: s.if } : {}), timeoutMs });
      }
      if (s.op === "sendEvent") {
        result.events.push(...s.events);
        told = { output: { ids: s.events.map((e, i) => `${runId}-${s.key}-${(e.key as string | undefined) ?? i}`) } };
      }
      if (s.op === "invoke") {
        const { key, job: id, payload, timeoutMs } = s;
        result.invokes.push({ key, job: id, payload, timeoutMs });
        told = await invoked(key, id, payload, options);
      }
      if (s.op === "callback") {
        const made = testCallback(s.key, new Date(Date.now() + s.timeoutMs).toISOString());
        result.callbacks.push({ key: s.key, url: `${flareUrl(options.baseUrl)}${made.path}`, timeoutMs: s.timeoutMs });
        told = { callback: made };
      }
      if (s.op === "waitForCallback") told = { ...stored[s.key], output: null };
      stored[s.key] = told;
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

/** An invoked job's outcome in a test: the job given in `options.jobs` runs. */
async function invoked(key: string, id: string, payload: unknown, options: RunJobOptions<any>): Promise<StoredStep> {
  const child = options.jobs?.find((j) => j.options.id === id);
  if (child === undefined) {
    return { error: `invoke ${JSON.stringify(key)}: job ${JSON.stringify(id)} is neither mocked nor given to runJob: give the step's result in \`steps\`, or the job in \`jobs\`` };
  }
  const r = await runJob(child, { event: { payload, name: "flare/job.invoked" }, jobs: options.jobs ?? [], ...(options.baseUrl !== undefined ? { baseUrl: options.baseUrl } : {}) });
  if (r.error !== undefined) return { error: `invoke ${JSON.stringify(key)}: run run_test failed: ${r.error}` };
  return { output: r.output === undefined ? null : r.output };
}

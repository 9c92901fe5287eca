/**
 * One call of a job under protocol version 2 (docs/endpoints.md, "Protocol version 2"): the job
 * runs from the top; stored steps return their results; new `run` steps run and are reported; a
 * sleep, a wait, a send, a child run or a callback stops the job there; the answer says what was
 * reached.
 */

import { toMs } from "./duration.js";
import { NonRetriableError, StepError } from "./job.js";
import type { Callback, EventToSend, InvokeOptions, Job, JobContext, Logger, SentEvents, Step, WaitedEvent } from "./job.js";

/** A callback as Flare tells it: `token` and `path` are absent once it timed out. */
export interface StoredCallback {
  token?: string;
  path?: string;
  deadline: string;
}

/**
 * A stored step as the run request carries it: `output` once it completed; `error` for a `run`
 * step whose last try failed (run it again) or an invoked run that did not succeed (throw it);
 * `callback` for a callback made.
 */
export interface StoredStep {
  output?: unknown;
  error?: string;
  callback?: StoredCallback;
}

/** The body of a version-2 `run` request. */
export interface RunRequest {
  action: "run";
  protocol?: number;
  run: { id: string; attempt: number; maxAttempts: number };
  job: { id: string; version: string };
  event: { id: string; name: string; payload: unknown };
  steps?: Record<string, StoredStep>;
}

/** One step reported in an answer. */
export type ReportedStep =
  | { key: string; op: "run"; output: unknown }
  | { key: string; op: "run"; error: string }
  | { key: string; op: "sleep"; durationMs: number }
  | { key: string; op: "sleep"; until: string }
  | { key: string; op: "sendEvent"; events: Record<string, unknown>[] }
  | { key: string; op: "waitForEvent"; event: string; match?: string; if?: string; timeoutMs: number }
  | { key: string; op: "invoke"; job: string; payload: unknown; timeoutMs: number }
  | { key: string; op: "callback"; timeoutMs: number }
  | { key: string; op: "waitForCallback" };

/** A log line of an answer. */
export interface LogLine {
  level: "debug" | "info" | "warn" | "error";
  message: string;
  fields?: Record<string, unknown>;
}

/** A version-2 `run` answer. */
export interface RunAnswer {
  steps?: ReportedStep[];
  output?: unknown;
  error?: string;
  retry?: boolean;
  logs?: LogLine[];
}

/** Most steps one answer reports (Flare's bound): past it the answer goes, and Flare calls again. */
export const MAX_STEPS_PER_ANSWER = 100;

/** Reported outputs past this size (bytes of JSON) end the answer before the next new step,
 * well inside Flare's 1 MiB bound on an answer. */
export const ANSWER_SOFT_LIMIT_BYTES = 512 * 1024;

/** How to run one call (`serve`'s options; the testing helpers' mocks). */
export interface ExecuteOptions {
  /** Flare's address, the start of a callback's URL (default `FLARE_URL`, else `http://127.0.0.1:3000`). */
  baseUrl?: string;
  /** Testing: stored steps that no earlier call reached (log lines before them are not replayed ones). */
  mocked?: ReadonlySet<string>;
  /** Testing: steps that fail with this message (a `run` step's function is not called). */
  failures?: Readonly<Record<string, string>>;
}

/** Flare's address as the SDK defaults it. */
export function flareUrl(baseUrl?: string): string {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env ?? {};
  return (baseUrl ?? env.FLARE_URL ?? "http://127.0.0.1:3000").replace(/\/+$/, "");
}

/** Thrown through the job's code to stop it at a step Flare carries out (sleep, wait, send). */
class Suspend extends Error {
  constructor() {
    super("the run suspends here (Flare carries out this step); do not catch this error");
    this.name = "FlareSuspend";
  }
}

/** Thrown when the job's code no longer matches the run's stored steps. */
class Nondeterminism extends Error {}

function message(e: unknown): string {
  if (e instanceof Error) return e.message || e.name;
  const text = typeof e === "string" ? e : JSON.stringify(e);
  return text && text.length > 0 ? text : "the job threw a value with no message";
}

/** Events as the protocol has them. */
export function eventBody(e: EventToSend): Record<string, unknown> {
  const body: Record<string, unknown> = { name: e.name, payload: e.payload ?? null };
  if (e.key !== undefined) body.key = e.key;
  if (e.delay !== undefined) body.delay = typeof e.delay === "number" ? `${Math.round(e.delay / 1000)}s` : e.delay;
  if (e.deliverAt !== undefined) body.deliverAt = e.deliverAt instanceof Date ? e.deliverAt.toISOString() : e.deliverAt;
  if (e.context !== undefined) body.context = e.context;
  return body;
}

/** Runs `job` once for `request` and returns the answer. Never throws. */
export async function execute(job: Job<any, any>, request: RunRequest, options: ExecuteOptions = {}): Promise<RunAnswer> {
  const stored = request.steps ?? {};
  const mocked = options.mocked ?? new Set<string>();
  const failures = options.failures ?? {};
  const baseUrl = flareUrl(options.baseUrl);
  // Steps reached in an earlier call: completed ones, and callbacks made.
  const done = new Set(Object.keys(stored).filter((k) => "output" in (stored[k] as object) || (stored[k] as StoredStep).callback !== undefined));
  const reported: ReportedStep[] = [];
  const used = new Set<string>();
  // Callbacks made (`step.callback`) and waited for in this call.
  const callbacks = new Set<string>();
  const waited = new Set<string>();
  const logs: LogLine[] = [];
  let suspended = false;
  let broken: string | undefined;
  let reportedBytes = 0;

  const replaying = () => [...done].some((k) => !used.has(k) && !mocked.has(k));
  const take = (key: string) => {
    if (suspended) throw new Suspend();
    if (broken !== undefined) throw new Nondeterminism(broken);
    if (typeof key !== "string" || key.length === 0 || new TextEncoder().encode(key).length > 200) {
      broken = `invalid step key ${JSON.stringify(key)}: use 1-200 bytes`;
      throw new Nondeterminism(broken);
    }
    if (used.has(key)) {
      broken = `step key ${JSON.stringify(key)} is used twice in this run: step keys must be unique within a run`;
      throw new Nondeterminism(broken);
    }
    used.add(key);
    const s = stored[key];
    if (s === undefined) {
      // A new step: every completed one must have been reached before it.
      checkAllReached();
    }
    if (s === undefined || !("output" in s)) full();
    return s;
  };
  const full = () => {
    if (reported.length >= MAX_STEPS_PER_ANSWER || reportedBytes > ANSWER_SOFT_LIMIT_BYTES) {
      // This answer is full: Flare stores what it has and calls again, and this step runs then.
      suspended = true;
      throw new Suspend();
    }
  };
  const fail = (why: string): never => {
    broken = why;
    throw new Nondeterminism(broken);
  };
  const handle = (key: string, c: StoredCallback | undefined): Callback => ({
    key,
    token: c?.token ?? "",
    path: c?.path ?? "",
    url: c?.path ? `${baseUrl}${c.path}` : "",
    deadline: c?.deadline ?? "",
  });
  const checkAllReached = () => {
    // Mocked steps (testing) may be mocked ahead of steps that run.
    const missed = [...done].filter((k) => !used.has(k) && !mocked.has(k));
    if (missed.length > 0) {
      broken = `the job's code changed while the run was in progress: step ${JSON.stringify(missed[0])} is stored but was not reached (step keys must come in the same order on every call)`;
      throw new Nondeterminism(broken);
    }
  };
  const suspend = (step: ReportedStep): never => {
    reported.push(step);
    suspended = true;
    throw new Suspend();
  };

  const step: Step = {
    async run<T>(key: string, fn: () => T | Promise<T>): Promise<Awaited<T>> {
      const s = take(key);
      const failure = failures[key];
      if (failure !== undefined) {
        reported.push({ key, op: "run", error: failure });
        throw new Error(failure);
      }
      if (s !== undefined && "output" in s) return s.output as Awaited<T>;
      let value: Awaited<T>;
      try {
        value = await fn();
      } catch (e) {
        if (e instanceof Suspend || e instanceof Nondeterminism) throw e;
        reported.push({ key, op: "run", error: message(e) });
        throw e;
      }
      const text = value === undefined ? "null" : JSON.stringify(value);
      const output = text === undefined ? null : JSON.parse(text);
      reportedBytes += text === undefined ? 4 : text.length;
      reported.push({ key, op: "run", output });
      return output as Awaited<T>;
    },
    async sleep(key, duration) {
      const s = take(key);
      if (s !== undefined && "output" in s) return;
      suspend({ key, op: "sleep", durationMs: toMs(duration) });
    },
    async sleepUntil(key, at) {
      const s = take(key);
      if (s !== undefined && "output" in s) return;
      const when = at instanceof Date ? at : new Date(at);
      if (Number.isNaN(when.getTime())) throw new Error(`step ${key}: invalid time ${String(at)}`);
      suspend({ key, op: "sleep", until: when.toISOString() });
    },
    async waitForEvent<P>(key: string, options: Parameters<Step["waitForEvent"]>[1]): Promise<WaitedEvent<P> | null> {
      const s = take(key);
      if (s !== undefined && "output" in s) return s.output as WaitedEvent<P> | null;
      if (typeof options?.event !== "string" || options.event.length === 0) {
        throw new Error(`step ${key}: waitForEvent needs the name of the event waited for (options.event)`);
      }
      const wait: Extract<ReportedStep, { op: "waitForEvent" }> = { key, op: "waitForEvent", event: options.event, timeoutMs: toMs(options.timeout) };
      if (options.match !== undefined) wait.match = options.match;
      if (options.if !== undefined) wait.if = options.if;
      return suspend(wait);
    },
    async sendEvent(key, events): Promise<SentEvents> {
      const s = take(key);
      if (s !== undefined && "output" in s) return s.output as SentEvents;
      const list = Array.isArray(events) ? events : [events];
      return suspend({ key, op: "sendEvent", events: list.map(eventBody) });
    },
    async invoke<R>(key: string, options: InvokeOptions<unknown, R>): Promise<R> {
      const s = take(key);
      const failure = failures[key];
      if (failure !== undefined) throw new StepError(key, failure);
      if (s !== undefined && "output" in s) return s.output as R;
      if (s?.error !== undefined) throw new StepError(key, s.error);
      const id = typeof options?.job === "string" ? options.job : options?.job?.options?.id;
      if (typeof id !== "string" || id.length === 0) throw new Error(`step ${key}: invoke needs the job to run (options.job)`);
      return suspend({ key, op: "invoke", job: id, payload: options.payload === undefined ? null : options.payload, timeoutMs: toMs(options.timeout) });
    },
    async callback(key, options): Promise<Callback> {
      const s = take(key);
      callbacks.add(key);
      if (s !== undefined && (s.callback !== undefined || "output" in s)) return handle(key, s.callback);
      return suspend({ key, op: "callback", timeoutMs: toMs(options.timeout) });
    },
    async waitForCallback<T>(callback: Callback): Promise<T | null> {
      if (suspended) throw new Suspend();
      if (broken !== undefined) throw new Nondeterminism(broken);
      const key = callback?.key;
      if (!callbacks.has(key)) fail(`step.waitForCallback(${JSON.stringify(key)}): wait for what step.callback returned earlier in this run`);
      if (waited.has(key)) fail(`step.waitForCallback(${JSON.stringify(key)}): this callback is waited for twice`);
      waited.add(key);
      const s = stored[key];
      if (s !== undefined && "output" in s) return s.output as T | null;
      full();
      return suspend({ key, op: "waitForCallback" });
    },
  } as Step;

  const log =
    (level: LogLine["level"]) =>
    (msg: string, fields?: Record<string, unknown>): void => {
      // Lines of the part replayed from stored steps were sent by an earlier call.
      if (replaying() || suspended) return;
      logs.push(fields === undefined ? { level, message: String(msg) } : { level, message: String(msg), fields });
    };
  const logger: Logger = { debug: log("debug"), info: log("info"), warn: log("warn"), error: log("error") };

  const ctx: JobContext<unknown> = {
    event: { id: request.event.id, name: request.event.name, payload: request.event.payload },
    step,
    logger,
    run: { id: request.run.id, attempt: request.run.attempt, maxAttempts: request.run.maxAttempts },
  };
  const answer = (a: RunAnswer): RunAnswer => {
    if (reported.length > 0) a.steps = reported;
    if (logs.length > 0) a.logs = logs;
    return a;
  };
  try {
    const output = await job.fn(ctx);
    if (broken !== undefined) return answer({ error: broken, retry: false });
    if (suspended) return answer({});
    checkAllReached();
    return answer({ output: output === undefined ? null : output });
  } catch (e) {
    if (broken !== undefined) return { error: broken, retry: false, ...(logs.length > 0 ? { logs } : {}) };
    if (suspended) return answer({});
    if (e instanceof NonRetriableError) return answer({ error: message(e), retry: false });
    return answer({ error: message(e) });
  }
}

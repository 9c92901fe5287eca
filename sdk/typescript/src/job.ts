/** Jobs: their definition (what Flare indexes) and the function that runs them. */

/** The event that started a run. */
export interface FlareEvent<P = unknown> {
  /** The event's id. */
  id: string;
  /** The event's name, such as `user.created`. */
  name: string;
  /** Its payload. */
  payload: P;
}

/** The run being executed. */
export interface RunInfo {
  /** The run's id: the same for every attempt. Use it as the idempotency key of side effects. */
  id: string;
  /** This attempt's number, from 1. */
  attempt: number;
  /** The attempts allowed. */
  maxAttempts: number;
}

/** A duration: milliseconds, or text such as `"30s"`, `"15m"`, `"2h"`, `"3d"`, `"1h30m"`. */
export type Duration = number | string;

/** An event to send (from a job's `step.sendEvent`, or the client). */
export interface EventToSend<P = unknown> {
  /** Event name (`a-z 0-9 _ -` segments separated by `.` or `/`). */
  name: string;
  /** Any JSON. */
  payload?: P;
  /** Deliver later (`"90s"`, `"1h30m"`, or milliseconds). */
  delay?: Duration;
  /** Deliver at this time. */
  deliverAt?: Date | string;
  /** Any JSON carried along with the event. */
  context?: unknown;
  /** Within a `step.sendEvent`: names this event within the step (its position by default). */
  key?: string;
}

/** What `step.sendEvent` returns: the ids of the events sent. */
export interface SentEvents {
  ids: string[];
}

/** What `step.waitForEvent` waits for. */
export interface WaitForEventOptions {
  /** The name of the event waited for, such as `invoice.paid`. */
  event: string;
  /**
   * A payload field, `"payload.<field>"` (such as `"payload.invoiceId"`): only an event whose
   * field equals this run's event's (a string, number or boolean).
   */
  match?: string;
  /**
   * A CEL condition: only an event for which it is true, with `event` this run's event and
   * `async` the incoming one, each `{id, name, payload}`
   * (`"async.payload.amount >= event.payload.amount"`).
   */
  if?: string;
  /** Wait at most this long (`"3d"`, or ms); then the step returns `null`. */
  timeout: Duration;
}

/** The event a `step.waitForEvent` resumed with. */
export interface WaitedEvent<P = unknown> {
  /** The event's id. */
  id: string;
  /** Its name. */
  name: string;
  /** Its payload. */
  payload: P;
  /** When it was sent (RFC 3339). */
  timestamp: string;
}

/** What `step.invoke` runs: a job (its id, or the job itself to type its payload and output). */
export interface InvokeOptions<P = unknown, R = unknown> {
  /** The job to run: its id, or its definition (`defineJob`'s result) for typed payload and output. */
  job: string | Job<P, R>;
  /** The payload of its run (default `null`). */
  payload?: P;
  /** Wait at most this long (`"1h"`, or ms) for it to end; past it the step throws a {@link StepError}. */
  timeout: Duration;
}

/** What `step.callback` makes: a URL that a `POST` of JSON answers, once, until its deadline. */
export interface Callback {
  /** The step's key (`step.waitForCallback` waits under it). */
  key: string;
  /** The unguessable token (empty once the callback timed out). */
  token: string;
  /** `/callbacks/<token>`: Flare's path for the post (empty once the callback timed out). */
  path: string;
  /** The URL to hand on: Flare's address (`baseUrl`, `FLARE_URL`) and `path`. */
  url: string;
  /** When Flare stops accepting the post (RFC 3339). */
  deadline: string;
}

/** Durable steps: each result is stored by Flare and returned, not run again, on later calls. */
export interface Step {
  /**
   * Runs `fn` as the step `key` (unique within the run) and returns its result, stored by Flare
   * as soon as it is known. When the run is called again (the next step, a retry, after a sleep)
   * the stored result is returned and `fn` is not called. The result must be JSON
   * (`undefined` becomes `null`).
   */
  run<T>(key: string, fn: () => T | Promise<T>): Promise<Awaited<T>>;
  /** Sleeps `duration` durably: the run holds no slot meanwhile, across Flare restarts. */
  sleep(key: string, duration: Duration): Promise<void>;
  /** Sleeps until `at` durably. */
  sleepUntil(key: string, at: Date | string): Promise<void>;
  /**
   * Waits durably for the first event matching `options` sent after the run reached this step,
   * at most `options.timeout`: returns the event, or `null` when the timeout passed. The run
   * holds no slot meanwhile, across Flare restarts.
   */
  waitForEvent<P = unknown>(key: string, options: WaitForEventOptions): Promise<WaitedEvent<P> | null>;
  /** Sends events chained to this run, once however often the run is called. */
  sendEvent(key: string, events: EventToSend | EventToSend[]): Promise<SentEvents>;
  /**
   * Runs job `options.job` with `options.payload` (a run of that job alone, whose event's parent
   * is this run) and returns its output once it succeeded. The run holds no slot meanwhile. Its
   * failure, its cancellation or its not ending within `options.timeout` throws a
   * {@link StepError}: caught, the job goes on; not caught, the attempt fails and the job's retry
   * policy applies (the child is not run again: its outcome is this step's). An unknown job fails
   * the run.
   */
  invoke<P, R>(key: string, options: InvokeOptions<P, R> & { job: Job<P, R> }): Promise<Awaited<R>>;
  invoke<R = unknown>(key: string, options: InvokeOptions<unknown, R>): Promise<R>;
  /**
   * Makes the callback `key`: a URL (`callback.url`) that a `POST` of JSON to Flare answers, once,
   * until `options.timeout` from now. Hand the URL on (in a `step.run`), then
   * `step.waitForCallback(callback)`. A post that comes before the wait is kept.
   */
  callback(key: string, options: { timeout: Duration }): Promise<Callback>;
  /**
   * Waits durably (the run holds no slot) for the post to `callback`: returns its JSON body, or
   * `null` once the callback's deadline passed.
   */
  waitForCallback<T = unknown>(callback: Callback): Promise<T | null>;
}

/** Log lines stored with the run's attempt (shown on Flare's dashboard). */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** What a job's function receives. */
export interface JobContext<P = unknown> {
  event: FlareEvent<P>;
  step: Step;
  logger: Logger;
  run: RunInfo;
}

/** A payload filter: keys of the payload, each with conditions (see docs/endpoints.md). */
export type Filter = Record<string, unknown>;

/** What starts a job: an event (with an optional payload filter) or a schedule. */
export type Trigger =
  | { event: string; filter?: Filter }
  | { schedule: { cron: string; timezone?: string } | { intervalSeconds: number } };

/** A job's retry policy (each field optional; Flare's defaults otherwise). */
export interface Retry {
  /** Attempts in all, the first included (default 3). */
  maxAttempts?: number;
  /** Delay before the second attempt, ms (default 1000). */
  minDelayMs?: number;
  /** Longest delay, ms (default one hour). */
  maxDelayMs?: number;
  /** Growth of the delay per attempt (default 2). */
  factor?: number;
}

/** A job's definition. */
export interface JobOptions {
  /** 1-100 characters of `a-z 0-9 - _`, unique in the endpoint. */
  id: string;
  /** Shown on the dashboard (default: the id). */
  name?: string;
  /** Semver; bump it when the job's behaviour changes (default `1.0.0`). */
  version?: string;
  trigger: Trigger;
  retry?: Retry;
  /** How long one attempt may take, ms (default five minutes). */
  timeoutMs?: number;
  /**
   * Runs of this job executing at once across every Flare process: a number, a limit per value
   * of a CEL key or shared by a group, or a list of two (docs/flow-control.md).
   */
  concurrency?: number | ConcurrencyLimit | ConcurrencyLimit[];
  /** At most `limit` run starts per `periodMs` per key, `burst` at once; the others wait queued. */
  throttle?: { limit: number; periodMs: number; key?: string; burst?: number };
  /** At most `limit` runs created per `periodMs` per key; events beyond it start no run. */
  rateLimit?: { limit: number; periodMs: number; key?: string };
  /** A run not started this long (ms) after it became due is cancelled. */
  startTimeoutMs?: number;
  /**
   * A burst of events per key becomes one run, started `periodMs` after the last of them (with
   * its payload), never later than `timeoutMs` after the first.
   */
  debounce?: { periodMs: number; key?: string; timeoutMs?: number };
  /** `{ run: "<CEL giving seconds, -600..600>" }`: a due run is taken as if due that much earlier. */
  priority?: { run: string };
  /** Events that cancel this job's runs they match (a payload field, or a CEL `if`). */
  cancelOn?: CancelOn[];
}

/** `{ event: "order.cancelled", match: "payload.orderId" }`: such an event cancels a matching run. */
export interface CancelOn {
  event: string;
  /** A payload path equal in the run's event and the cancelling one. */
  match?: string;
  /** A CEL condition over `event` (the run's) and `async` (the cancelling one). */
  if?: string;
  /** How long after the run was created the cancel stays armed, ms. */
  timeoutMs?: number;
}

/** A concurrency limit: `{ limit: 1, key: "event.payload.customerId" }` or `{ limit: 10, group: "openai" }`. */
export interface ConcurrencyLimit {
  limit: number;
  /** A CEL key over `event`: one limit per value. */
  key?: string;
  /** A name shared by the jobs that take their slots from one pool. */
  group?: string;
}

/** A job: its definition and its function. */
export interface Job<P = unknown, R = unknown> {
  readonly options: Readonly<JobOptions>;
  readonly fn: (ctx: JobContext<P>) => R | Promise<R>;
}

/**
 * A step that failed as Flare reports it: an invoked job's run that failed, was cancelled or did
 * not end in time. Not caught, it fails the attempt (the job's retry policy applies).
 */
export class StepError extends Error {
  /** The step's key. */
  readonly key: string;
  constructor(key: string, message: string) {
    super(message);
    this.name = "StepError";
    this.key = key;
  }
}

/** An error that no retry can fix: the run fails at once, without the attempts left. */
export class NonRetriableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NonRetriableError";
  }
}

/**
 * Defines a job. `P` is the type of its event's payload.
 *
 * ```ts
 * const welcome = defineJob<{ email: string }>(
 *   { id: "welcome", trigger: { event: "user.created" } },
 *   async ({ event, step }) => {
 *     await step.run("send", () => mail(event.payload.email));
 *   },
 * );
 * ```
 */
export function defineJob<P = unknown, R = unknown>(
  options: JobOptions,
  fn: (ctx: JobContext<P>) => R | Promise<R>,
): Job<P, R> {
  if (!/^[a-z0-9_-]{1,100}$/.test(options.id)) {
    throw new Error(`invalid job id ${JSON.stringify(options.id)}: use 1-100 characters of a-z 0-9 - _`);
  }
  if (options.version !== undefined && !/^\d+\.\d+\.\d+$/.test(options.version)) {
    throw new Error(`job ${options.id}: version ${JSON.stringify(options.version)} is not semver MAJOR.MINOR.PATCH`);
  }
  return { options: Object.freeze({ ...options }), fn };
}

/** A job's entry in the index answer. */
export function indexEntry(job: Job<any, any>): Record<string, unknown> {
  const o = job.options;
  const entry: Record<string, unknown> = {
    id: o.id,
    name: o.name ?? o.id,
    version: o.version ?? "1.0.0",
    trigger: o.trigger,
  };
  if (o.retry !== undefined) entry.retry = o.retry;
  if (o.timeoutMs !== undefined) entry.timeoutMs = o.timeoutMs;
  for (const k of [
    "concurrency",
    "throttle",
    "rateLimit",
    "startTimeoutMs",
    "debounce",
    "priority",
    "cancelOn",
  ] as const) {
    if (o[k] !== undefined) entry[k] = o[k];
  }
  return entry;
}

/**
 * Flare's TypeScript SDK: jobs with durable steps over HTTP (protocol version 2 of
 * docs/endpoints.md). Define jobs with {@link defineJob}, serve them with {@link serve} (node:http,
 * Express) or {@link serveFetch} (Fetch API), send events with {@link Flare}. Testing helpers are
 * in `@flare/sdk/testing`.
 */

export { Flare } from "./client.js";
export type { ClientOptions, SendOptions, SendResult, SentEvent } from "./client.js";
export { toMs } from "./duration.js";
export { execute } from "./execute.js";
export type { ExecuteOptions, LogLine, ReportedStep, RunAnswer, RunRequest, StoredCallback, StoredStep } from "./execute.js";
export { createHandler, MAX_BODY_BYTES, PROTOCOL_VERSION } from "./handler.js";
export type { Handler, HandlerResponse, ServeOptions } from "./handler.js";
export { defineJob, indexEntry, NonRetriableError, StepError } from "./job.js";
export type {
  Callback,
  CancelOn,
  ConcurrencyLimit,
  Duration,
  EventToSend,
  Filter,
  FlareEvent,
  InvokeOptions,
  Job,
  JobContext,
  JobOptions,
  Logger,
  Retry,
  RunInfo,
  SentEvents,
  Step,
  Trigger,
  WaitedEvent,
  WaitForEventOptions,
} from "./job.js";
export { serve, serveFetch } from "./serve.js";
export type { NodeRequest } from "./serve.js";
export { sign, SignatureError, TOLERANCE_SECONDS, verify } from "./signature.js";
export type { SignedHeaders } from "./signature.js";

/** This package's version: its major is the protocol version it speaks. */
export const VERSION = "2.0.0";

// @ts-check
// A Flare job endpoint on plain Node, no dependencies: Flare POSTs signed JSON to one URL, and
// this server answers which jobs it has (`index`) and runs them (`run`). The protocol is in
// docs/endpoints.md; run it with
//
//   FLARE_ENDPOINT_SECRET=whsec_... node server.mjs
//
// Types are JSDoc, so editors and `tsc --checkJs` check this file as TypeScript while Node runs
// it as it is.

import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const PORT = Number(process.env.PORT ?? 4000);
const HOST = process.env.HOST ?? "127.0.0.1";
const PATH = "/flare";
/** Requests signed further than this from our clock are refused (replays, badly set clocks). */
const TOLERANCE_SECS = 300;
/** Flare's payloads are at most FLARE_MAX_BODY_BYTES (1 MiB by default): room enough. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

// ---- Jobs -------------------------------------------------------------------------------------

/** @typedef {"debug" | "info" | "warn" | "error"} Level */
/** @typedef {{ level: Level, message: string, fields?: Record<string, unknown> }} LogLine */
/**
 * An event for Flare to send when the run succeeds. `key` makes its id `<run id>-<key>`, so a
 * retried run does not send it twice.
 * @typedef {object} OutgoingEvent
 * @property {string} name
 * @property {unknown} payload
 * @property {string} [key]
 * @property {string | { seconds?: number, minutes?: number, hours?: number, days?: number }} [delay]
 * @property {string} [deliverAt] RFC 3339
 * @property {unknown} [context]
 */
/**
 * What a job's `run` gets besides its payload.
 * @typedef {object} RunContext
 * @property {{ id: string, attempt: number, maxAttempts: number }} run
 * @property {{ id: string, name: string }} event
 * @property {(level: Level, message: string, fields?: Record<string, unknown>) => void} log
 * @property {(event: OutgoingEvent) => void} send
 */
/**
 * A job as the `index` action describes it, plus the function that runs it.
 * @typedef {object} JobDefinition
 * @property {string} id
 * @property {string} name
 * @property {string} version
 * @property {{ event: string, filter?: Record<string, unknown> }} trigger
 * @property {{ maxAttempts?: number, minDelayMs?: number, maxDelayMs?: number, factor?: number }} [retry]
 * @property {number} [timeoutMs]
 * @property {number} [concurrency]
 * @property {(payload: any, ctx: RunContext) => Promise<unknown>} run
 */

/** Thrown by a job to fail its run at once: retrying the same payload cannot help. */
class FatalError extends Error {}

/** @type {JobDefinition[]} */
const jobs = [
  {
    id: "upload-process",
    name: "Process an uploaded file",
    version: "1.0.0",
    trigger: { event: "file.uploaded" },
    retry: { maxAttempts: 5, minDelayMs: 2000 },
    timeoutMs: 60_000,
    async run(payload, ctx) {
      const { fileId, filename } = payload ?? {};
      if (typeof fileId !== "string" || typeof filename !== "string") {
        throw new FatalError("the payload needs the strings fileId and filename");
      }
      ctx.log("info", `processing ${filename}`, { fileId, attempt: ctx.run.attempt });
      const thumbnail = `thumbnails/${fileId}.png`; // the real work (resize, scan, …) goes here
      ctx.send({ name: "file.processed", key: "processed", payload: { fileId, filename, thumbnail } });
      return { fileId, thumbnail };
    },
  },
  {
    id: "upload-notify",
    name: "Tell the uploader the file is ready",
    version: "1.0.0",
    trigger: { event: "file.processed" },
    async run(payload, ctx) {
      ctx.log("info", `${payload.filename} is ready`, { thumbnail: payload.thumbnail });
      return { notified: true, fileId: payload.fileId };
    },
  },
];

// ---- The protocol -----------------------------------------------------------------------------

/** The `index` answer: every job without its function. */
function index() {
  return { jobs: jobs.map(({ run, ...definition }) => definition) };
}

/**
 * The `run` answer: `{output, logs, events}` on success, `{error, logs}` (with `retry: false`
 * for a FatalError) on failure.
 * @param {{ run: RunContext["run"], job: { id: string }, event: RunContext["event"] & { payload: unknown } }} request
 */
async function runJob({ run, job: { id }, event }) {
  const job = jobs.find((j) => j.id === id);
  if (!job) return { error: `this endpoint has no job ${JSON.stringify(id)}`, retry: false };
  /** @type {LogLine[]} */
  const logs = [];
  /** @type {OutgoingEvent[]} */
  const events = [];
  /** @type {RunContext} */
  const ctx = {
    run,
    event,
    log: (level, message, fields) => logs.push(fields ? { level, message, fields } : { level, message }),
    send: (e) => events.push(e),
  };
  try {
    const output = await job.run(event.payload, ctx);
    return { output: output ?? null, logs, events };
  } catch (err) {
    const error = err instanceof Error ? err.message : String(err);
    return err instanceof FatalError ? { error, retry: false, logs } : { error, logs };
  }
}

/**
 * Checks the Standard Webhooks signature Flare puts on every request: HMAC-SHA256 with the
 * endpoint's secret over `{webhook-id}.{webhook-timestamp}.{raw body}`, in base64.
 * @param {import("node:http").IncomingHttpHeaders} headers
 * @param {Buffer} body the raw bytes, before any JSON parsing
 * @param {Buffer} key the secret without `whsec_`, base64-decoded
 * @returns {string | null} why the request is refused, or null when Flare signed it
 */
function verify(headers, body, key, nowSecs = Math.floor(Date.now() / 1000)) {
  const id = headers["webhook-id"];
  const timestamp = headers["webhook-timestamp"];
  const signatures = headers["webhook-signature"];
  if (typeof id !== "string" || typeof timestamp !== "string" || typeof signatures !== "string") {
    return "missing webhook-id, webhook-timestamp or webhook-signature";
  }
  if (!/^[0-9]+$/.test(timestamp) || Math.abs(nowSecs - Number(timestamp)) > TOLERANCE_SECS) {
    return "webhook-timestamp is not within 5 minutes of now";
  }
  const mac = createHmac("sha256", key).update(`${id}.${timestamp}.`).update(body).digest("base64");
  const expected = Buffer.from(mac);
  // Several space-separated `v1,<base64>` entries while the secret is rotated: any may match.
  const matched = signatures.split(" ").some((entry) => {
    const [version, signature = ""] = entry.split(",", 2);
    const given = Buffer.from(signature);
    return version === "v1" && given.length === expected.length && timingSafeEqual(given, expected);
  });
  return matched ? null : "no webhook-signature entry matches";
}

// ---- HTTP -------------------------------------------------------------------------------------

class HttpError extends Error {
  /** @param {number} status @param {string} message */
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** @param {import("node:http").IncomingMessage} req */
async function readBody(req) {
  /** @type {Buffer[]} */
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, "request body too large");
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/**
 * @param {import("node:http").IncomingMessage} req
 * @param {Buffer} key
 * @returns {Promise<unknown>} the JSON answer (status 200)
 */
async function handle(req, key) {
  if (new URL(req.url ?? "/", "http://localhost").pathname !== PATH) {
    throw new HttpError(404, `not found: Flare calls POST ${PATH}`);
  }
  if (req.method !== "POST") throw new HttpError(405, `use POST ${PATH}`);
  const body = await readBody(req);
  const refused = verify(req.headers, body, key);
  if (refused) throw new HttpError(401, refused);
  let request;
  try {
    request = JSON.parse(body.toString("utf8"));
  } catch {
    throw new HttpError(400, "the body is not JSON");
  }
  switch (request?.action) {
    case "index":
      return index();
    case "run":
      if (typeof request.job?.id !== "string" || typeof request.event !== "object") {
        throw new HttpError(400, "a run request needs job.id and event");
      }
      return runJob(request);
    default:
      throw new HttpError(400, `unknown action ${JSON.stringify(request?.action)}`);
  }
}

const secret = process.env.FLARE_ENDPOINT_SECRET ?? "";
const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
if (key.length === 0) {
  console.error("set FLARE_ENDPOINT_SECRET to the endpoint's secret (whsec_<base64>)");
  process.exit(1);
}

createServer(async (req, res) => {
  let status = 200;
  let answer;
  try {
    answer = await handle(req, key);
  } catch (err) {
    status = err instanceof HttpError ? err.status : 500;
    if (status === 500) console.error(err);
    answer = { error: err instanceof HttpError ? err.message : "internal error" };
  }
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(answer));
}).listen(PORT, HOST, () => {
  console.log(`Flare endpoint on http://${HOST}:${PORT}${PATH} with jobs ${jobs.map((j) => j.id).join(", ")}`);
});

/**
 * Adapters: the endpoint as a `node:http` / Express handler ({@link serve}) and as a Fetch API
 * handler ({@link serveFetch}: Next.js route handlers, Hono, Bun, Deno).
 */

import type { IncomingMessage, ServerResponse } from "node:http";

import { createHandler, MAX_BODY_BYTES, type ServeOptions } from "./handler.js";

/** A request as `node:http` and Express give it (Express may have read the body already). */
export type NodeRequest = IncomingMessage & { body?: unknown; rawBody?: unknown };

async function rawBody(req: NodeRequest): Promise<Uint8Array | string> {
  // Express with express.raw() / express.text(), or a framework that kept the raw bytes.
  if (req.rawBody instanceof Uint8Array || typeof req.rawBody === "string") return req.rawBody;
  if (req.body instanceof Uint8Array || typeof req.body === "string") return req.body;
  if (req.body !== undefined && req.readableEnded) {
    throw new Error(
      "the body was parsed before the Flare handler (express.json()?): mount the handler before it, or with express.raw({ type: 'application/json' })",
    );
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new Error("the body is too large");
    chunks.push(chunk as Buffer);
  }
  return new Uint8Array(Buffer.concat(chunks));
}

/**
 * The endpoint as a `(req, res)` handler for `node:http`, Express (`app.post("/flare",
 * serve({ jobs }))`) and any framework built on them.
 */
export function serve(options: ServeOptions): (req: NodeRequest, res: ServerResponse) => void {
  const handle = createHandler(options);
  return (req, res) => {
    const reply = (status: number, body: string) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(body);
    };
    if (req.method !== "POST") return reply(405, JSON.stringify({ error: "Flare calls with POST" }));
    rawBody(req)
      .then((body) =>
        handle(body, (name) => {
          const v = req.headers[name];
          return Array.isArray(v) ? v[0] : v;
        }),
      )
      .then((r) => reply(r.status, r.body))
      .catch((e: unknown) => reply(500, JSON.stringify({ error: e instanceof Error ? e.message : String(e) })));
  };
}

/** The endpoint as a Fetch API handler: `Request` → `Response`. */
export function serveFetch(options: ServeOptions): (request: Request) => Promise<Response> {
  const handle = createHandler(options);
  return async (request) => {
    if (request.method !== "POST") {
      return new Response(JSON.stringify({ error: "Flare calls with POST" }), { status: 405, headers: { "content-type": "application/json" } });
    }
    const body = new Uint8Array(await request.arrayBuffer());
    const r = await handle(body, (name) => request.headers.get(name));
    return new Response(r.body, { status: r.status, headers: r.headers });
  };
}

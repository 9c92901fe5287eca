/**
 * Flare's request signature (Standard Webhooks; docs/endpoints.md, "Verifying the signature"):
 * HMAC-SHA256 with the base64-decoded secret (after `whsec_`) over `{id}.{timestamp}.{body}`.
 * Web Crypto only, so it runs on Node, Bun, Deno and edge runtimes alike.
 */

/** How far `webhook-timestamp` may be from now, in seconds. */
export const TOLERANCE_SECONDS = 300;

/** Why a request was refused. */
export class SignatureError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SignatureError";
  }
}

function decodeSecret(secret: string): Uint8Array<ArrayBuffer> {
  const b64 = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const bin = atob(b64);
  const key = new Uint8Array(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) key[i] = bin.charCodeAt(i);
  if (key.length === 0) throw new SignatureError("the secret is empty");
  return key;
}

function toBytes(body: string | Uint8Array): Uint8Array {
  return typeof body === "string" ? new TextEncoder().encode(body) : body;
}

function base64(bytes: ArrayBuffer): string {
  let bin = "";
  for (const b of new Uint8Array(bytes)) bin += String.fromCharCode(b);
  return btoa(bin);
}

/** The `v1,<base64>` signature of `body` sent as `id` at `timestamp` (unix seconds). */
export async function sign(secret: string, id: string, timestamp: number | string, body: string | Uint8Array): Promise<string> {
  const key = await crypto.subtle.importKey("raw", decodeSecret(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const prefix = new TextEncoder().encode(`${id}.${timestamp}.`);
  const data = toBytes(body);
  const signed = new Uint8Array(prefix.length + data.length);
  signed.set(prefix, 0);
  signed.set(data, prefix.length);
  return `v1,${base64(await crypto.subtle.sign("HMAC", key, signed))}`;
}

function equal(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** The headers Flare signs with. */
export interface SignedHeaders {
  "webhook-id"?: string | null;
  "webhook-timestamp"?: string | null;
  "webhook-signature"?: string | null;
}

/**
 * Checks a request from Flare: throws a {@link SignatureError} saying why it is refused. `secrets`
 * may hold several (while rotating); `body` is the raw body, before any JSON parsing.
 */
export async function verify(
  secrets: string | string[],
  headers: SignedHeaders,
  body: string | Uint8Array,
  nowSeconds: number = Math.floor(Date.now() / 1000),
): Promise<void> {
  const id = headers["webhook-id"];
  const ts = headers["webhook-timestamp"];
  const sig = headers["webhook-signature"];
  if (!id || !ts || !sig) throw new SignatureError("missing webhook-id, webhook-timestamp or webhook-signature");
  if (!/^\d+$/.test(ts) || Math.abs(nowSeconds - Number(ts)) > TOLERANCE_SECONDS) {
    throw new SignatureError("webhook-timestamp is not within 5 minutes of now");
  }
  const offered = sig
    .split(" ")
    .map((e) => e.split(","))
    .filter(([v, s]) => v === "v1" && s !== undefined)
    .map(([, s]) => `v1,${s}`);
  for (const secret of Array.isArray(secrets) ? secrets : [secrets]) {
    const expected = await sign(secret, id, ts, body);
    if (offered.some((o) => equal(o, expected))) return;
  }
  throw new SignatureError("no webhook-signature entry matches");
}

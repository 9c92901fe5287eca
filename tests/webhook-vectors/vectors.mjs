// Signs bundled fixtures with each provider's own library and checks the library accepts its
// signature; writes ../../fixtures/signatures/source_vectors.json (merged with slack.py's part).
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { createHmac } from "node:crypto";
import { sign as githubSign, verify as githubVerify } from "@octokit/webhooks-methods";
import { Webhook } from "standardwebhooks";
import { Paddle } from "@paddle/paddle-node-sdk";

const root = new URL("../../fixtures/", import.meta.url);
const read = (p) => readFileSync(new URL(p, root), "utf8");
const out = new URL("signatures/source_vectors.json", root);
const vectors = existsSync(out) ? JSON.parse(readFileSync(out, "utf8")).filter((v) => v.preset === "slack") : [];
const now = Math.floor(Date.now() / 1000);

// GitHub: @octokit/webhooks-methods sign() and verify().
{
  const secret = "It's a Secret to Everybody";
  for (const [file, event] of [["github/issues.opened.json", "issues"], ["github/push.json", "push"], ["github/ping.json", "ping"]]) {
    const body = read(file);
    const signature = await githubSign(secret, body);
    if (!(await githubVerify(secret, body, signature))) throw new Error("octokit refused its own signature");
    vectors.push({ preset: "github", library: "@octokit/webhooks-methods@6.0.0", secret, file, now,
      headers: { "X-Hub-Signature-256": signature, "X-GitHub-Event": event, "X-GitHub-Delivery": `72d3162e-cc78-11e3-81ab-4c9367dc0958-${event}` } });
  }
}

// Standard Webhooks: the library's sign().
{
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const body = read("standard-webhooks/email.sent.json");
  const id = "msg_2LJ8aA5QKg3pbDEmMKsqxyFwTf5";
  const wh = new Webhook(secret);
  const signature = wh.sign(id, new Date(now * 1000), body);
  wh.verify(body, { "webhook-id": id, "webhook-timestamp": String(now), "webhook-signature": signature });
  vectors.push({ preset: "standard-webhooks", library: "standardwebhooks@1.1.1", secret, file: "standard-webhooks/email.sent.json", now,
    headers: { "webhook-id": id, "webhook-timestamp": String(now), "webhook-signature": signature } });
}

// Paddle: the signature as Paddle documents it (ts:body, HMAC-SHA256, hex), accepted by the
// SDK's webhooks.isSignatureValid (which checks it and the 5-second window).
{
  const secret = "pdl_ntfset_01hv8x2r3kzwq6d1wxvjdd5n6y_Jk2zEExl9kp4TjYu5eV1HTLk3mK4g0zQ";
  const body = read("paddle/transaction.completed.json");
  const h1 = createHmac("sha256", secret).update(`${now}:${body}`).digest("hex");
  const signature = `ts=${now};h1=${h1}`;
  const paddle = new Paddle("pdl_sdbx_apikey_01hv8x2r3kzwq6d1wxvjdd5n6y_000000000000000000000_AAA");
  if (!(await paddle.webhooks.isSignatureValid(body, secret, signature))) throw new Error("Paddle SDK refused the signature");
  if (await paddle.webhooks.isSignatureValid(body, secret, `ts=${now};h1=${"0".repeat(64)}`)) throw new Error("Paddle SDK took a forged one");
  vectors.push({ preset: "paddle", library: "@paddle/paddle-node-sdk@3.10.0 (verified)", secret, file: "paddle/transaction.completed.json", now,
    headers: { "Paddle-Signature": signature } });
}

// Shopify: base64 HMAC-SHA256 of the raw body, as Shopify's docs compute it (no SDK needed).
{
  const secret = "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";
  const body = read("shopify/orders.create.json");
  const signature = createHmac("sha256", secret).update(body, "utf8").digest("base64");
  vectors.push({ preset: "shopify", library: "node:crypto, per Shopify's docs", secret, file: "shopify/orders.create.json", now,
    headers: { "X-Shopify-Hmac-Sha256": signature, "X-Shopify-Topic": "orders/create", "X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043" } });
}

writeFileSync(out, JSON.stringify(vectors, null, 2) + "\n");
console.log(`${vectors.length} vectors`);

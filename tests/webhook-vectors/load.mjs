// Delivers signed webhooks to a running Flare as fast as N concurrent senders can, and prints
// deliveries/s and latency percentiles (BENCHMARKS.md, "Webhook sources").
//   node load.mjs <url> <source> <preset> <secret> [seconds=10] [concurrency=32]
// preset: github (X-Hub-Signature-256 over a new X-GitHub-Delivery each time) or stripe (a new
// event id in the body each time, Stripe-Signature).
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";

const [url, source, preset, secret, seconds = "10", concurrency = "32"] = process.argv.slice(2);
const root = new URL("../../fixtures/", import.meta.url);
const github = readFileSync(new URL("github/issues.opened.json", root));
const stripe = JSON.parse(readFileSync(new URL("stripe/payment_intent.succeeded.json", root), "utf8"));
const end = Date.now() + Number(seconds) * 1000;
const latencies = [];
let n = 0, failed = 0;

function request(i) {
  if (preset === "github") {
    const sig = "sha256=" + createHmac("sha256", secret).update(github).digest("hex");
    return { body: github, headers: { "content-type": "application/json", "x-hub-signature-256": sig,
      "x-github-event": "issues", "x-github-delivery": `load-${process.pid}-${i}` } };
  }
  const body = JSON.stringify({ ...stripe, id: `evt_load_${process.pid}_${i}` });
  const t = Math.floor(Date.now() / 1000);
  const sig = createHmac("sha256", secret).update(`${t}.${body}`).digest("hex");
  return { body, headers: { "content-type": "application/json", "stripe-signature": `t=${t},v1=${sig}` } };
}

async function sender() {
  while (Date.now() < end) {
    const { body, headers } = request(n++);
    const started = performance.now();
    const res = await fetch(`${url}/webhooks/${source}`, { method: "POST", body, headers });
    await res.arrayBuffer();
    if (res.status !== 200) failed++;
    latencies.push(performance.now() - started);
  }
}

const t0 = performance.now();
await Promise.all(Array.from({ length: Number(concurrency) }, sender));
const elapsed = (performance.now() - t0) / 1000;
latencies.sort((a, b) => a - b);
const p = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))].toFixed(1);
console.log(JSON.stringify({ source, preset, deliveries: latencies.length, failed,
  perSecond: Math.round(latencies.length / elapsed), p50ms: p(0.5), p99ms: p(0.99) }));

// A no-op HTTP job endpoint on plain Node, for `flare bench endpoint --endpoint-cmd`:
// checks every request's Standard Webhooks signature (as an application must) and answers the
// benchmark job `bench-noop` on `bench.noop`. Prints `listening HOST:PORT` once it listens.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const key = Buffer.from(process.env.FLARE_ENDPOINT_SECRET.replace(/^whsec_/, ""), "base64");

function verified(req, body) {
  const id = req.headers["webhook-id"], ts = req.headers["webhook-timestamp"];
  const sigs = String(req.headers["webhook-signature"] ?? "").split(" ");
  if (!id || !ts || Math.abs(Date.now() / 1000 - Number(ts)) > 300) return false;
  const expected = createHmac("sha256", key).update(`${id}.${ts}.`).update(body).digest();
  return sigs.some((s) => {
    const [v, sig] = s.split(",");
    const got = Buffer.from(sig ?? "", "base64");
    return v === "v1" && got.length === expected.length && timingSafeEqual(got, expected);
  });
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    if (!verified(req, body)) { res.writeHead(401).end(); return; }
    const msg = JSON.parse(body);
    let answer;
    if (msg.action === "index") {
      answer = { jobs: [{ id: "bench-noop", name: "Benchmark no-op", version: "1.0.0", trigger: { event: "bench.noop" } }] };
    } else {
      const sent = msg.event.payload?.sentAtUs;
      answer = { output: sent ? { latencyUs: Date.now() * 1000 - sent } : null };
    }
    const out = JSON.stringify(answer);
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(out) }).end(out);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  const { address, port } = server.address();
  console.log(`listening ${address}:${port}`);
});

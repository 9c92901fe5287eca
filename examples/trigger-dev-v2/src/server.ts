// Serves the jobs with the SDK's `handleRequest` on plain Node `http`: Flare calls this URL with
// the x-trigger-* headers (PING, INDEX_ENDPOINT, EXECUTE_JOB).
import http from "node:http";
import { client } from "./client";
import "./jobs";

if (process.env.STATE_DIR) {
  await import("./test-jobs");
}

// Not 3000: that is where `flare serve` listens by default.
const port = Number(process.env.PORT ?? 3100);

const server = http.createServer(async (req, res) => {
  try {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (typeof value === "string") headers.set(name, value);
      else if (Array.isArray(value)) headers.set(name, value.join(", "));
    }
    const hasBody = req.method !== "GET" && req.method !== "HEAD";
    const request = new Request(`http://127.0.0.1:${port}${req.url ?? "/"}`, {
      method: req.method,
      headers,
      body: hasBody ? Buffer.concat(chunks) : undefined,
    });
    const response = await client.handleRequest(request);
    res.writeHead(response.status, {
      "content-type": "application/json",
      ...(response.headers ?? {}),
    });
    res.end(JSON.stringify(response.body));
  } catch (error) {
    console.error("request failed", error);
    res.writeHead(500, { "content-type": "application/json" });
    res.end(JSON.stringify({ message: String(error) }));
  }
});

server.listen(port, "127.0.0.1", async () => {
  const url = `http://127.0.0.1:${port}/api/trigger`;
  console.log(`Trigger.dev v2 jobs listening on ${url}`);
  if (process.env.FLARE_REGISTER !== "false") await register(url);
});

// Registers this endpoint with Flare as the v2 CLI does at each start (`POST /api/v1/endpoints`
// with the client id as name; registering again takes the new key and index), retrying while
// Flare is not up yet. FLARE_REGISTER=false leaves it to you.
async function register(url: string) {
  const apiUrl = process.env.FLARE_URL ?? "http://127.0.0.1:3000";
  const apiKey = process.env.TRIGGER_API_KEY ?? "tr_dev_flareExampleKey1";
  const name = process.env.TRIGGER_CLIENT_ID ?? "flare-example";
  for (let attempt = 1; attempt <= 30; attempt++) {
    try {
      const answer = await fetch(`${apiUrl}/api/v1/endpoints`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({ url, name }),
      });
      const body = await answer.json().catch(() => ({}));
      if (answer.ok) {
        console.log(`registered with Flare at ${apiUrl}: jobs ${JSON.stringify(body.jobs ?? [])}`);
        return;
      }
      console.error(`Flare refused the registration (${answer.status}): ${JSON.stringify(body)}`);
      return;
    } catch {
      if (attempt === 1) console.log(`waiting for Flare at ${apiUrl} …`);
      await new Promise((done) => setTimeout(done, 1000));
    }
  }
  console.error(`could not reach Flare at ${apiUrl}: is \`flare serve\` running?`);
}

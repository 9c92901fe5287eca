// Serves the jobs with the SDK's `handleRequest` on plain Node `http`: Flare calls this URL with
// the x-trigger-* headers (PING, INDEX_ENDPOINT, EXECUTE_JOB).
import http from "node:http";
import { client } from "./client";
import "./jobs";

if (process.env.STATE_DIR) {
  await import("./test-jobs");
}

const port = Number(process.env.PORT ?? 3000);

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

server.listen(port, "127.0.0.1", () => {
  console.log(`Trigger.dev v2 jobs listening on http://127.0.0.1:${port}/api/trigger`);
});

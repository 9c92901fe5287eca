// A three-step job through the TypeScript SDK (sdk/typescript, built with `npm ci` there), for
// `flare bench endpoint --endpoint-cmd "node benchmarks/endpoint-sdk-3steps.mjs"`: the benchmark
// job `bench-noop` on `bench.noop`, speaking protocol version 2, with three `step.run` steps
// that each return a small value. The SDK reports the three in one answer with the output, so
// Flare stores three steps and completes the run from one request. Prints `listening HOST:PORT`.
import { createServer } from "node:http";

import { defineJob, serve } from "../sdk/typescript/dist/index.js";

const job = defineJob({ id: "bench-noop", name: "Benchmark three steps", trigger: { event: "bench.noop" } }, async ({ event, step }) => {
  const a = await step.run("one", () => 1);
  const b = await step.run("two", () => a + 1);
  const c = await step.run("three", () => b + 1);
  const sent = event.payload?.sentAtUs;
  return sent ? { latencyUs: Date.now() * 1000 - sent, steps: c } : { steps: c };
});

const server = createServer(serve({ jobs: [job] }));
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  const { address, port } = server.address();
  console.log(`listening ${address}:${port}`);
});

// A job of the TypeScript SDK, run under a real `flare serve` by tests/sdk_e2e.rs: a step, a
// sleep (across a Flare restart), a wait for a matching event, a child job invoked (its output
// used), a callback resumed by a POST to its URL, a step that fails on the first attempt (a
// retry), an event.
import http from "node:http";

import { defineJob, serve } from "../../sdk/typescript/dist/index.js";

const child = defineJob({ id: "e2e-ts-child", name: "SDK end to end, the child (TypeScript)", trigger: { event: "e2e.never" } }, async ({ event, step }) => {
  const doubled = await step.run("double", () => event.payload.n * 2);
  return { doubled };
});

let firstRuns = 0;
const job = defineJob(
  { id: "e2e-ts", name: "SDK end to end (TypeScript)", trigger: { event: "e2e.ts" }, retry: { maxAttempts: 3, minDelayMs: 100, maxDelayMs: 200 } },
  async ({ event, step, run, logger }) => {
    const first = await step.run("first", () => {
      firstRuns += 1;
      return { n: event.payload.n };
    });
    await step.sleep("nap", event.payload.sleepMs);
    logger.info("woke up");
    const paid = await step.waitForEvent("paid", { event: "e2e.paid", match: "payload.n", timeout: "1h" });
    const { doubled } = await step.invoke("child", { job: child, payload: { n: first.n }, timeout: "1h" });
    const approval = await step.callback("approval", { timeout: "1h" });
    await step.run("ask", () => approval.url); // the URL a person or a system would be given
    const approved = await step.waitForCallback(approval);
    const flaky = await step.run("flaky", () => {
      if (run.attempt === 1) throw new Error("flaky failure on attempt 1");
      return `ok on attempt ${run.attempt}`;
    });
    const sent = await step.sendEvent("notify", { name: "e2e.done", payload: { n: first.n } });
    return { first, flaky, sent: sent.ids, firstRuns, paid: paid && { id: paid.id, payload: paid.payload }, doubled, approved };
  },
);

const port = Number(process.env.PORT ?? 4000);
http.createServer(serve({ jobs: [job, child] })).listen(port, "127.0.0.1", () => console.log(`listening on ${port}`));

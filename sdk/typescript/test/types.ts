// Compile-only: the public types as a user writes them (checked by `tsc --noEmit`).
import express from "express";
import { defineJob, serve, serveFetch, Flare, type JobContext } from "../src/index.js";
import { runJob } from "../src/testing.js";

interface Signup {
  email: string;
  plan: "free" | "pro";
}

export const welcome = defineJob<Signup, { sent: boolean }>(
  { id: "welcome", name: "Welcome", version: "1.2.0", trigger: { event: "user.created", filter: { plan: ["pro"] } }, retry: { maxAttempts: 5 }, timeoutMs: 10_000 },
  async ({ event, step, logger }: JobContext<Signup>) => {
    const id: string = await step.run("save", async () => event.payload.email.toUpperCase());
    await step.sleep("wait", "3d");
    await step.sleepUntil("later", new Date());
    const paid = await step.waitForEvent<{ amount: number }>("paid", { event: "invoice.paid", match: "payload.email", if: "async.payload.amount > 0", timeout: "3d" });
    const amount: number | undefined = paid?.payload.amount;
    const at: string | undefined = paid?.timestamp;
    logger.info("paid", { amount, at });
    const { ids } = await step.sendEvent("notify", [{ name: "user.welcomed", payload: { id } }]);
    logger.info("sent", { ids });
    return { sent: ids.length > 0 };
  },
);
export const daily = defineJob({ id: "daily", trigger: { schedule: { cron: "0 9 * * 1-5", timezone: "Europe/Paris" } } }, () => null);

const app = express();
app.post("/flare", serve({ jobs: [welcome, daily] }));
export const GET: (r: Request) => Promise<Response> = serveFetch({ jobs: [welcome] });
export const sent = new Flare().send("user.created", { email: "a@b.c", plan: "pro" }, { id: "u1", delay: 60_000 });
export const tested: Promise<{ sent: boolean } | undefined> = runJob(welcome, { event: { payload: { email: "x", plan: "free" } }, steps: { save: "X" } }).then((r) => r.output);
export const waits: Promise<number> = runJob(welcome, { event: { payload: { email: "x", plan: "free" } } }).then((r) => r.waits[0]?.timeoutMs ?? 0);
// @ts-expect-error a wait needs its timeout
export const noTimeout = (s: JobContext["step"]) => s.waitForEvent("w", { event: "a.b" });

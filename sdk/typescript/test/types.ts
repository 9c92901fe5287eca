// Compile-only: the public types as a user writes them (checked by `tsc --noEmit`).
import express from "express";
import { defineJob, serve, serveFetch, Flare, StepError, type Callback, type JobContext } from "../src/index.js";
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

export const child = defineJob<{ n: number }, { doubled: number }>({ id: "child", trigger: { event: "never.sent" } }, ({ event }) => ({
  doubled: event.payload.n * 2,
}));
export const parent = defineJob(
  { id: "parent", trigger: { event: "a.b" }, concurrency: { limit: 1, key: "event.payload.id" }, throttle: { limit: 1, periodMs: 1000 } },
  async ({ step }) => {
    // A job given as itself types the payload and the output.
    const { doubled }: { doubled: number } = await step.invoke("typed", { job: child, payload: { n: 1 }, timeout: "1h" });
    const loose = await step.invoke<{ ok: boolean }>("by-id", { job: "child", payload: { n: 2 }, timeout: 60_000 });
    const ok: boolean = loose.ok;
    const cb: Callback = await step.callback("approve", { timeout: "1d" });
    const url: string = cb.url;
    await step.run("mail", () => url);
    const body = await step.waitForCallback<{ approved: boolean }>(cb);
    const approved: boolean | undefined = body?.approved;
    try {
      await step.invoke("again", { job: "child", timeout: 1 });
    } catch (e) {
      if (e instanceof StepError) return { key: e.key };
    }
    return { doubled, ok, approved };
  },
);
// @ts-expect-error the payload of a typed job is checked
export const badPayload = (s: JobContext["step"]) => s.invoke("k", { job: child, payload: { n: "one" }, timeout: 1 });
// @ts-expect-error a callback needs its timeout
export const noCallbackTimeout = (s: JobContext["step"]) => s.callback("k", {});
export const invokesListed: Promise<number> = runJob(parent, { event: { payload: null }, jobs: [child], failSteps: { again: "x" } }).then((r) => r.invokes.length + r.callbacks.length);

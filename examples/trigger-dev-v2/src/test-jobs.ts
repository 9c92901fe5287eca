// Jobs that only the CI test (tests/trigger_dev_v2) uses: each records its side effects in
// files under STATE_DIR, which the test reads. Loaded only when STATE_DIR is set.
import { eventTrigger, invokeTrigger, isTriggerError } from "@trigger.dev/sdk";
import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { client } from "./client";

const state = (name: string) => join(process.env.STATE_DIR ?? ".", name);

// Completes a task (a charge, counted in a file), then fails its first attempt: the retry must
// not charge again.
client.defineJob({
  id: "charge-then-fail-once",
  name: "Charge, then fail once",
  version: "1.0.0",
  trigger: eventTrigger({ name: "test.retry" }),
  run: async (payload: { orderId: string }, io) => {
    const charge = await io.runTask("charge", async () => {
      appendFileSync(state("charges"), `${payload.orderId}\n`);
      return { chargeId: `ch_${payload.orderId}` };
    });
    if (!existsSync(state("failed-once"))) {
      writeFileSync(state("failed-once"), "yes");
      throw new Error("the shipping service is down");
    }
    await io.logger.info(`shipped ${payload.orderId} after ${charge.chargeId}`);
    return { shipped: true, chargeId: charge.chargeId };
  },
});

// Waits, then does a task once.
client.defineJob({
  id: "wait-then-finish",
  name: "Wait, then finish",
  version: "1.0.0",
  trigger: eventTrigger({ name: "test.wait" }),
  run: async (payload: { seconds: number }, io) => {
    await io.logger.info("before the wait");
    await io.wait("pause", payload.seconds);
    await io.runTask("after-wait", async () => {
      appendFileSync(state("after-wait"), "done\n");
      return { done: true };
    });
    await io.logger.info("after the wait");
    return { waited: payload.seconds };
  },
});

// Always fails.
client.defineJob({
  id: "always-fails",
  name: "Always fails",
  version: "1.0.0",
  trigger: eventTrigger({ name: "test.fail" }),
  run: async () => {
    throw new Error("card declined");
  },
});

// One task and one log line: what `flare bench` style measurements run.
client.defineJob({
  id: "bench-task",
  name: "Bench: one task, one log line",
  version: "1.0.0",
  trigger: eventTrigger({ name: "bench.task" }),
  run: async (payload: { n: number }, io) => {
    const out = await io.runTask("step", async () => ({ doubled: payload.n * 2 }));
    await io.logger.info(`doubled ${payload.n}`);
    return out;
  },
});


// Waits up to `timeoutSeconds` for the payment of its invoice (`io.waitForEvent` with a payload
// filter); without one it sends a reminder instead. The SDK throws from the wait when its
// deadline passes: the job catches that (and lets the SDK's own control flow through).
client.defineJob({
  id: "wait-for-payment",
  name: "Wait for the invoice's payment",
  version: "1.0.0",
  trigger: eventTrigger({ name: "test.invoice" }),
  run: async (payload: { invoiceId: string; timeoutSeconds: number }, io) => {
    try {
      const paid = await io.waitForEvent(
        "payment",
        { name: "invoice.paid", filter: { invoiceId: [payload.invoiceId] } },
        { timeoutInSeconds: payload.timeoutSeconds },
      );
      await io.logger.info(`invoice ${payload.invoiceId} paid`);
      return { paid: true, amount: paid.payload.amount, eventId: paid.id };
    } catch (error) {
      if (isTriggerError(error)) throw error;
      await io.logger.info(`no payment for ${payload.invoiceId}, reminder sent: ${String(error)}`);
      return { paid: false };
    }
  },
});

// Waits for a person: the callback URL goes to STATE_DIR/approval-<request> (as an email would
// carry it), and a POST of JSON there resumes the run with that body (`io.waitForRequest`).
client.defineJob({
  id: "wait-for-approval",
  name: "Wait for an approval",
  version: "1.0.0",
  trigger: eventTrigger({ name: "test.approval" }),
  run: async (payload: { request: string }, io) => {
    const answer = await io.waitForRequest<{ approved: boolean; by: string }>(
      "approval",
      async (url) => {
        writeFileSync(state(`approval-${payload.request}`), url);
      },
      { timeoutInSeconds: 600 },
    );
    return { request: payload.request, approved: answer.approved, by: answer.by };
  },
});

// Runs only when invoked (`invokeTrigger`).
export const sendTips = client.defineJob({
  id: "send-tips",
  name: "Send tips to a team",
  version: "1.0.0",
  trigger: invokeTrigger(),
  run: async (payload: { team: string }, io) => {
    await io.logger.info(`tips sent to ${payload.team}`);
    appendFileSync(state("tips"), `${payload.team}\n`);
    if (payload.team === "broken") throw new Error("no such team");
    return { team: payload.team, tips: 3 };
  },
});

// Invokes `send-tips` for each team and waits for each run's result
// (`invokeAndWaitForCompletion`), then for two more teams at once
// (`batchInvokeAndWaitForCompletion`), then starts one more without waiting (`job.invoke`).
client.defineJob({
  id: "onboard-teams",
  name: "Onboard teams",
  version: "1.0.0",
  trigger: eventTrigger({ name: "test.onboard" }),
  run: async (payload: { teams: string[] }, io) => {
    const results = [];
    for (const team of payload.teams) {
      const run = await sendTips.invokeAndWaitForCompletion(`tips-${team}`, { team });
      results.push(run.ok ? run.output : { team, failed: run.status, error: run.error?.message });
    }
    const batch = await sendTips.batchInvokeAndWaitForCompletion(
      "batch",
      ["c", "d"].map((team) => ({ payload: { team } })),
    );
    const extra = await sendTips.invoke("extra-tips", { team: "extra" });
    await io.logger.info(`${results.length + batch.length} teams onboarded`);
    return { results, batch: batch.map((run) => (run.ok ? run.output : run.status)), extraRunId: extra.id };
  },
});

// Jobs that only the CI test (tests/trigger_dev_v2.rs) uses: each records its side effects in
// files under STATE_DIR, which the test reads. Loaded only when STATE_DIR is set.
import { eventTrigger } from "@trigger.dev/sdk";
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


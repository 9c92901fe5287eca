// What the CI test (tests/trigger_dev_v2) does with the SDK's client outside a run, one
// command per call, printing the answer as JSON:
//   invoke <jobId> <payload JSON> [idempotencyKey]   client.invokeJob
//   cancel <jobId>                                    client.cancelRunsForJob
import { client } from "./client";

const [command, jobId, ...rest] = process.argv.slice(2);
let answer: unknown;
if (command === "invoke") {
  const [payload, idempotencyKey] = rest;
  answer = await client.invokeJob(jobId, JSON.parse(payload ?? "{}"), idempotencyKey ? { idempotencyKey } : {});
} else if (command === "cancel") {
  answer = await client.cancelRunsForJob(jobId);
} else {
  throw new Error(`unknown command ${command}: invoke or cancel`);
}
console.log(JSON.stringify(answer));

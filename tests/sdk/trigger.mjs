// Drives Flare's Trigger.dev v2 routes with the real @trigger.dev/sdk.
// Env: FLARE_URL (http://127.0.0.1:PORT), FLARE_KEY (the server's API key, tr_dev_…).
// Prints one JSON object with what the SDK returned; tests/sdk_compat.rs checks it.
import { TriggerClient } from "@trigger.dev/sdk";

const client = new TriggerClient({
  id: "flare-sdk-compat",
  apiKey: process.env.FLARE_KEY,
  apiUrl: process.env.FLARE_URL,
});

const sent = await client.sendEvent({
  name: "user.created",
  payload: { userId: "u-trigger", email: "trigger@example.com", name: "Trig" },
  context: { via: "trigger.dev sdk" },
});
const scheduled = await client.sendEvent(
  { id: "td-scheduled-1", name: "reminder.send", payload: { userId: "u-trigger", message: "later" } },
  { deliverAfter: 3600 },
);
const at = await client.sendEvent(
  { name: "reminder.send", payload: { userId: "u-trigger", message: "at" } },
  { deliverAt: new Date(Date.now() + 86_400_000) },
);
const cancelled = await client.cancelEvent(scheduled.id);
const bulk = await client.sendEvents([
  { name: "audit.one", payload: { n: 1 } },
  { name: "audit.two", payload: { n: 2 } },
]);
const fetched = await client.getEvent(sent.id);

// (No refused-event case here: this SDK retries even 4xx answers 8 times with backoff, ~10 s;
// Flare's 400s for these routes are tested over plain HTTP in tests/ingest/compat.rs.)

const iso = (d) => (d instanceof Date ? d.toISOString() : d ?? null);
console.log(
  JSON.stringify({
    sent: { ...sent, timestamp: iso(sent.timestamp), deliveredAt: iso(sent.deliveredAt) },
    scheduled: { id: scheduled.id, deliverAt: iso(scheduled.deliverAt) },
    at: { id: at.id, deliverAt: iso(at.deliverAt) },
    cancelled: { id: cancelled.id, cancelledAt: iso(cancelled.cancelledAt) },
    bulk: bulk.map((e) => e.id),
    fetched: { id: fetched.id, name: fetched.name, runs: fetched.runs.map((r) => r.status) },
  }),
);

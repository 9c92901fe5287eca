// Drives Flare's Inngest route with the real `inngest` SDK.
// Env: FLARE_URL (http://127.0.0.1:PORT), FLARE_KEY (the event key: Flare's API key).
// Prints one JSON object with what the SDK returned; tests/sdk_compat.rs checks it.
import { Inngest } from "inngest";

const inngest = new Inngest({
  id: "flare-sdk-compat",
  eventKey: process.env.FLARE_KEY,
  baseUrl: process.env.FLARE_URL,
});

const one = await inngest.send({
  name: "user.created",
  data: { userId: "u-inngest", email: "inngest@example.com", name: "Inn" },
});
const many = await inngest.send([
  { name: "audit.one", data: { n: 1 }, id: "inngest-fixed-id" },
  { name: "reminder.send", data: { userId: "u-inngest", message: "later" }, ts: Date.now() + 3_600_000 },
]);

// The way Inngest apps name their events: <app>/<entity>.<action>.
const app = await inngest.send({ name: "app/user.created", data: { userId: "u-app" } });

console.log(JSON.stringify({ one: one.ids, many: many.ids, app: app.ids }));

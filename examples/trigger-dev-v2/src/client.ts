// The Trigger.dev v2 client, pointed at Flare: only `apiUrl` changes from a Trigger.dev project.
import { TriggerClient } from "@trigger.dev/sdk";

export const client = new TriggerClient({
  id: process.env.TRIGGER_CLIENT_ID ?? "flare-example",
  // Trigger.dev's shape (tr_<env>_...): the SDK refuses other keys. Flare sends it back to this
  // endpoint as x-trigger-api-key, and the SDK sends it to Flare as its Bearer key.
  apiKey: process.env.TRIGGER_API_KEY ?? "tr_dev_flareExampleKey1",
  apiUrl: process.env.FLARE_URL ?? "http://127.0.0.1:3000", // `flare serve`'s default
});

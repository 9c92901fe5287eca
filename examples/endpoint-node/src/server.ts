// Flare jobs written with the TypeScript SDK (@flare/sdk), served by Express. Flare calls
// POST /flare (signed; the SDK verifies it), asks which jobs this app serves and runs them with
// durable steps. Build and run it with
//
//   npm ci && FLARE_ENDPOINT_SECRET=whsec_... npm start
//
// then `flare serve --endpoint http://127.0.0.1:4000/flare` (see README.md).

import express from "express";
import { defineJob, NonRetriableError, serve } from "@flare/sdk";

/** The payload of `file.uploaded`. */
interface Upload {
  fileId: string;
  filename: string;
}

/** The payload of `file.processed`. */
interface Processed extends Upload {
  thumbnail: string;
}

export const uploadProcess = defineJob<Upload>(
  {
    id: "upload-process",
    name: "Process an uploaded file",
    version: "1.0.0",
    trigger: { event: "file.uploaded" },
    retry: { maxAttempts: 5, minDelayMs: 2000 },
    timeoutMs: 60_000,
  },
  async ({ event, step, logger, run }) => {
    const { fileId, filename } = event.payload ?? {};
    if (typeof fileId !== "string" || typeof filename !== "string") {
      // No retry can fix the payload: the run fails at once.
      throw new NonRetriableError("the payload needs the strings fileId and filename");
    }
    logger.info(`processing ${filename}`, { fileId, attempt: run.attempt });
    // A durable step: its result is stored by Flare, not run again on a retry.
    const thumbnail = await step.run("thumbnail", () => `thumbnails/${fileId}.png`); // the real work goes here
    // Sent once, with the id <run id>-processed-0, however often the run is called.
    await step.sendEvent("processed", { name: "file.processed", payload: { fileId, filename, thumbnail } satisfies Processed });
    return { fileId, thumbnail };
  },
);

export const uploadNotify = defineJob<Processed>(
  { id: "upload-notify", name: "Tell the uploader the file is ready", version: "1.0.0", trigger: { event: "file.processed" } },
  async ({ event, logger }) => {
    logger.info(`${event.payload.filename} is ready`, { thumbnail: event.payload.thumbnail });
    return { notified: true, fileId: event.payload.fileId };
  },
);

const jobs = [uploadProcess, uploadNotify];
const port = Number(process.env.PORT ?? 4000);
const host = process.env.HOST ?? "127.0.0.1";

const app = express();
// Before any body parser: the SDK verifies the signature over the raw body.
app.post("/flare", serve({ jobs })); // secret: FLARE_ENDPOINT_SECRET
app.listen(port, host, () => {
  console.log(`Flare endpoint on http://${host}:${port}/flare with jobs ${jobs.map((j) => j.options.id).join(", ")}`);
});

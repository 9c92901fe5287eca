// The seed's jobs, written as the seed writes them: `client.defineJob` with `eventTrigger`.
import { eventTrigger } from "@trigger.dev/sdk";
import { client } from "./client";
import type {
  FileProcessedPayload,
  FileUploadedPayload,
  PaymentProcessedPayload,
  ReminderPayload,
  UserCreatedPayload,
} from "./events";

// Broadcasting: two jobs on `user.created`.
client.defineJob({
  id: "send-welcome-email",
  name: "Send welcome email",
  version: "1.0.0",
  trigger: eventTrigger({ name: "user.created" }),
  run: async (payload: UserCreatedPayload, io) => {
    await io.logger.info(`sending welcome email to ${payload.email} (hello ${payload.name ?? "there"})`);
    return { sent: true, to: payload.email };
  },
});

client.defineJob({
  id: "track-signup",
  name: "Track signup",
  version: "1.0.0",
  trigger: eventTrigger({ name: "user.created" }),
  run: async (payload: UserCreatedPayload, io) => {
    await io.logger.info(`tracked signup of user ${payload.userId}`);
    return { tracked: true, userId: payload.userId };
  },
});

// Chaining: `process-upload` sends `file.processed`, which starts `notify-file-processed`.
client.defineJob({
  id: "process-upload",
  name: "Process upload",
  version: "1.0.0",
  trigger: eventTrigger({ name: "file.uploaded" }),
  run: async (payload: FileUploadedPayload, io) => {
    await io.logger.info(`processing ${payload.filename} (${payload.fileId})`);
    const result = await io.runTask("process-file", async () => {
      return { processingResult: `processed ${payload.filename}` };
    });
    const sent = await io.sendEvent("file-processed", {
      name: "file.processed",
      payload: { fileId: payload.fileId, processingResult: result.processingResult },
    });
    return { fileId: payload.fileId, sentEventId: sent.id };
  },
});

client.defineJob({
  id: "notify-file-processed",
  name: "Notify file processed",
  version: "1.0.0",
  trigger: eventTrigger({ name: "file.processed" }),
  run: async (payload: FileProcessedPayload, io) => {
    await io.logger.info(`file ${payload.fileId} processed: ${payload.processingResult}`);
    return { notified: true };
  },
});

// Payment bookkeeping.
client.defineJob({
  id: "record-payment",
  name: "Record payment",
  version: "1.0.0",
  trigger: eventTrigger({ name: "payment.processed" }),
  run: async (payload: PaymentProcessedPayload, io) => {
    await io.logger.info(`recorded ${payload.amount} ${payload.currency} from ${payload.customerId}`);
    return { recorded: true };
  },
});

// The reminder.
client.defineJob({
  id: "send-reminder",
  name: "Send reminder",
  version: "1.0.0",
  trigger: eventTrigger({ name: "reminder.send" }),
  run: async (payload: ReminderPayload, io) => {
    await io.logger.info(`reminding ${payload.userId}: ${payload.message}`);
    return { reminded: payload.userId };
  },
});

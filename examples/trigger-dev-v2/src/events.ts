// The seed's payload interfaces and its `sendEvent` helper, unchanged.
import { client } from "./client";

export interface UserCreatedPayload {
  email: string;
  name?: string;
  userId: string;
}

export interface PaymentProcessedPayload {
  amount: number;
  currency: string;
  customerId: string;
}

export interface FileUploadedPayload {
  filename: string;
  fileId: string;
}

export interface FileProcessedPayload {
  fileId: string;
  processingResult: string;
}

export interface ReminderPayload {
  userId: string;
  message: string;
}

export async function sendEvent<PayloadType>(name: string, payload: PayloadType) {
  try {
    return await client.sendEvent({ name, payload });
  } catch (error) {
    console.error(`Failed to send event ${name}:`, error);
    throw error;
  }
}

// A stand-in for Express's types (no dependency): an app whose routes take (req, res) handlers.
import type { IncomingMessage, ServerResponse } from "node:http";

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
export default function express(): { post(path: string, handler: Handler): void } {
  return { post: () => undefined };
}

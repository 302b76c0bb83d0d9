/**
 * A `/prompt` body as the turnstile reads it before it takes the GPU (issue 18): the prompt_id
 * must be one it can follow, so it is checked or chosen here, never learnt from ComfyUI's answer.
 *
 * - A client-chosen `prompt_id` must be a canonical lowercase UUID, as today's ComfyUI requires
 *   (api-facts C1, S3). Anything else is refused with ComfyUI's own 400 (`invalid_prompt_id`),
 *   whatever the ComfyUI version: an older one accepts any string, and ids that are empty, huge, or
 *   unencodable made the turnstile lose track of the job.
 * - Without one, a fresh uuid4 is written into the body, so the job is followed by that id.
 *
 * Pure: bytes in, verdict out. Parsing is strict JSON: Python's json also takes NaN and Infinity,
 * which JSON.parse refuses; such a body gets a 400 instead of reaching ComfyUI (fail closed).
 */
import type { ErrorReply } from "../http/dialect.ts";

export const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export interface PromptBody {
  /** The bytes to send: the client's own, or with the minted prompt_id written in. */
  bytes: Uint8Array;
  promptId: string;
  /** The turnstile chose the id (the client sent none). */
  minted: boolean;
  /** The body's `client_id` (ComfyUI's websocket session), when it is a string. */
  clientId?: string;
}

const refuse = (type: string, message: string): ErrorReply => ({ status: 400, type, message });

export function readPromptBody(bytes: Uint8Array, mint: () => string = () => crypto.randomUUID()): PromptBody | ErrorReply {
  let text: string;
  let data: unknown;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    data = JSON.parse(text);
  } catch {
    return refuse("invalid_json", "gpu-turnstile: the /prompt body is not valid JSON");
  }
  // A list or a scalar queues nothing at ComfyUI either (400 no_prompt, or a 500).
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    return refuse("invalid_json", "gpu-turnstile: the /prompt body must be a JSON object");
  }
  const obj = data as Record<string, unknown>;
  const clientId = typeof obj.client_id === "string" ? obj.client_id : undefined;
  if ("prompt_id" in obj) {
    const id = obj.prompt_id;
    if (typeof id !== "string" || !CANONICAL_UUID.test(id)) {
      const shown = typeof id === "string" ? JSON.stringify(id.slice(0, 80)) + (id.length > 80 ? "…" : "") : typeof id;
      return refuse("invalid_prompt_id", `prompt_id must be a canonical lowercase UUID (got ${shown})`);
    }
    return { bytes, promptId: id, minted: false, clientId };
  }
  const promptId = mint();
  return { bytes: withPromptId(text, promptId), promptId, minted: true, clientId };
}

/**
 * The object's text with `"prompt_id"` written first. Textual, not re-serialised: the client's
 * numbers (`8.0` stays a float for ComfyUI) and key order reach ComfyUI as sent.
 */
function withPromptId(text: string, id: string): Uint8Array {
  const open = text.indexOf("{");
  const rest = text.slice(open + 1);
  const empty = rest.trimStart().startsWith("}");
  return new TextEncoder().encode(`${text.slice(0, open + 1)}"prompt_id": "${id}"${empty ? "" : ", "}${rest}`);
}

/**
 * What a `/prompt` must pass before it may take the GPU (issue 18), in order:
 *
 *   1. ComfyUI's own cross-site rule (comfy/origin-rule.ts) → ComfyUI's 403; not when ComfyUI
 *      runs with `--enable-cors-header` (seen in its /system_stats argv), which drops that rule.
 *   2. A body ComfyUI can parse, not compressed, and read whole up to 100 MiB (counted while it
 *      is read) → 415 / 413. That is ComfyUI's own default limit (`--max-upload-size 100`, its
 *      aiohttp `client_max_size`), above which ComfyUI answers 413 as well.
 *   3. A canonical-UUID prompt_id, or none (one is minted) → 400 invalid_prompt_id.
 *   4. An id nobody has: not one this turnstile follows or followed recently, not one ComfyUI knows
 *      (jobs API, or queue and history) → 400 duplicate_prompt_id. When ComfyUI cannot say within
 *      PROBE_TIMEOUT (down, restarting, broken) the request goes on like any other (forward.ts
 *      waits for a ComfyUI that is down), and its job is followed as not `fresh`: an end ComfyUI
 *      reports counts only once its queue no longer holds the id (follow.ts), so an old entry
 *      under the same id cannot hand the card on while the new job works.
 *
 * Nothing here touches the GPU: a refused prompt never unloads Ollama.
 */
import type { ComfyClient } from "../comfy/client.ts";
import { comfyRefusesOrigin } from "../comfy/origin-rule.ts";
import type { ErrorReply } from "../http/dialect.ts";
import { readCapped } from "../http/read-capped.ts";
import { readPromptBody, type PromptBody } from "./prompt-body.ts";
import { comfyKnows, type PromptIds } from "./prompt-ids.ts";

/** ComfyUI's default `--max-upload-size` (100 MB, in MiB as it computes it). */
export const PROMPT_BODY_LIMIT = 100 * 1024 * 1024;

export interface AdmissionDeps {
  comfy: ComfyClient;
  ids: PromptIds;
  /** For tests; PROMPT_BODY_LIMIT otherwise. */
  bodyLimit?: number;
}

/** `fresh`: ComfyUI was seen not to know the id (or the turnstile minted it). */
export type Admission = { ok: true; request: Request; body: PromptBody; fresh: boolean } | { ok: false; reply: ErrorReply };

const no = (status: number, type: string, message: string): Admission => ({ ok: false, reply: { status, type, message } });

export async function admitPrompt(req: Request, deps: AdmissionDeps): Promise<Admission> {
  if (!deps.comfy.corsEnabled && comfyRefusesOrigin(req.headers, deps.comfy.base)) {
    return no(403, "cross_site", "gpu-turnstile: ComfyUI refuses a cross-site /prompt (its Origin names another host)");
  }
  const encoding = req.headers.get("content-encoding");
  if (encoding && encoding.toLowerCase() !== "identity") {
    return no(415, "unsupported_encoding", `gpu-turnstile: a /prompt body must not be compressed (Content-Encoding: ${encoding.slice(0, 40)})`);
  }
  const limit = deps.bodyLimit ?? PROMPT_BODY_LIMIT;
  // A client that hangs up mid-body rejects here, and the proxy answers 499 as for any request.
  const bytes = await readCapped(req, limit);
  if (bytes === undefined) return no(413, "body_too_large", `gpu-turnstile: the /prompt body is larger than ComfyUI's default upload limit (${limit} bytes)`);
  const body = readPromptBody(bytes);
  if ("status" in body) return { ok: false, reply: body };

  const { promptId } = body;
  if (!deps.ids.claim(promptId)) return duplicate(promptId);
  const known = body.minted ? "unknown" : await comfyKnows(deps.comfy, promptId);
  if (known === "known") return duplicate(promptId);
  const headers = new Headers(req.headers);
  headers.set("content-length", String(body.bytes.length));
  headers.delete("transfer-encoding");
  const request = new Request(req.url, { method: req.method, headers, body: body.bytes as Uint8Array<ArrayBuffer>, signal: req.signal });
  return { ok: true, request, body, fresh: known === "unknown" };
}

function duplicate(id: string): Admission {
  return no(400, "duplicate_prompt_id", `gpu-turnstile: prompt_id ${id} is already in use or was used recently; send a new one or none`);
}

/**
 * `Content-Encoding: zstd` request bodies (Codex CLI sends them to /v1/responses; Ollama inflates
 * them before it reads the model, api-facts S1). The turnstile inflates a copy to read the model
 * and forwards the original bytes. The copy is bounded: a few kilobytes of zstd can claim
 * gigabytes, and a bomb must cost a 413, not the process.
 */
import { zstdDecompressSync } from "node:zlib";

/** Ollama's own cap on an inflated body (cloud_proxy.go maxDecompressedBodySize): it refuses anything larger. */
export const MAX_INFLATED_BYTES = 20 << 20;

export type Inflated = { ok: true; body: Uint8Array } | { ok: false; status: 400 | 413; message: string };

/**
 * Bun.zstdDecompressSync has no output limit; node:zlib's stops at `maxOutputLength` without
 * inflating the rest (measured: a 200 MB bomb is refused in ~9 ms, memory flat).
 */
export function inflateZstd(bytes: Uint8Array, limit = MAX_INFLATED_BYTES): Inflated {
  try {
    return { ok: true, body: zstdDecompressSync(bytes, { maxOutputLength: limit }) };
  } catch (err) {
    if ((err as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE") {
      return { ok: false, status: 413, message: `the zstd request body inflates to more than ${limit >> 20} MiB` };
    }
    return { ok: false, status: 400, message: `the zstd request body could not be decompressed (${err instanceof Error ? err.message : String(err)})` };
  }
}

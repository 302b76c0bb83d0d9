/**
 * Which requests touch the GPU. One table per listener; everything not listed passes
 * through without the lock. Kept in one place so the rules can be read (and tested) at a glance.
 *
 * The table is matched against the path the upstream routes on (`routedPath`), never the raw
 * one: a request classified differently from how its upstream handles it would bypass the lock.
 */
import type { Listener } from "../http/dialect.ts";
import { COMFY_IMAGE_PATHS } from "../tenants/comfyui.ts";
import { OLLAMA_LLM_PATHS } from "../tenants/ollama.ts";

export type { Listener };

/** "ws": websocket upgrades, which listener.ts relays before classification (they never lock). */
export type RequestClass = "llm" | "image" | "pass" | "ws";

/** The default kinds' tables live with their drivers (tenants/ollama.ts, tenants/comfyui.ts). */
const LLM_PATHS = OLLAMA_LLM_PATHS;
const IMAGE_PATHS = COMFY_IMAGE_PATHS;

/**
 * The path as the upstream routes it, from the path as received (which is what is forwarded).
 * Ollama (Go's net/http, then gin) and ComfyUI (aiohttp) match routes on the percent-decoded
 * path, `%2F` included: `/api/%63hat` is `/api/chat` and `/v1/chat%2Fcompletions` is
 * `/v1/chat/completions`. Dot segments that decoding reveals (`%2e%2e`, `x%2F..`) are resolved as
 * well: an upstream that resolves them would route there, one that does not answers 404, so
 * taking the lock for them is never wrong. Decoded bytes above 0x7F stay single characters:
 * they match no route in the tables, whatever their UTF-8 meaning.
 *
 * undefined for an encoding no upstream accepts as a path: `%` without two hex digits (Go's
 * server answers 400) or an encoded NUL.
 */
export function routedPath(raw: string): string | undefined {
  let at = raw.indexOf("%");
  if (at < 0) return raw;
  let out = "";
  let from = 0;
  for (; at >= 0; at = raw.indexOf("%", from)) {
    const byte = (hexDigit(raw.charCodeAt(at + 1)) << 4) | hexDigit(raw.charCodeAt(at + 2));
    if (byte <= 0) return undefined;
    out += raw.slice(from, at) + String.fromCharCode(byte);
    from = at + 3;
  }
  out += raw.slice(from);
  return out.includes("/.") ? removeDotSegments(out) : out;
}

/** 0-15, or a negative number (which poisons the byte) for anything but a hex digit or NaN. */
function hexDigit(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  const lower = c | 0x20;
  if (lower >= 97 && lower <= 102) return lower - 87;
  return -256;
}

/** RFC 3986 §5.2.4 on an absolute path: `.` segments go, `..` removes the one before. */
function removeDotSegments(path: string): string {
  const segs = path.split("/");
  const out: string[] = [];
  for (let i = 1; i < segs.length; i++) {
    const s = segs[i]!;
    if (s === "." || s === "..") {
      if (s === "..") out.pop();
      if (i === segs.length - 1) out.push("");
    } else out.push(s);
  }
  return `/${out.join("/")}`;
}

/**
 * `path` is `routedPath()`'s answer. A trailing slash is routed to the same handler by neither
 * upstream, so we match exact paths only.
 */
export function classify(listener: Listener, method: string, path: string): RequestClass {
  // The picked drivers classify in production (app.ts's `classify`); this is the default kinds' answer.
  if (method !== "POST") return "pass";
  if (listener !== "comfy") return LLM_PATHS.has(path) ? "llm" : "pass";
  return IMAGE_PATHS.has(path) ? "image" : "pass";
}

export const CLASSIFICATION = { llm: [...LLM_PATHS], image: [...IMAGE_PATHS] } as const;

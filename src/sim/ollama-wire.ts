/**
 * Ollama's wire conventions (gin + Go encoding/json): response helpers, request body binding
 * with Go's error messages, keep_alive parsing, and streaming bodies that stop when the client
 * goes away.
 */
import { FOREVER_MS } from "./clock.ts";
import { goJson, goJsonSyntaxError } from "./gojson.ts";

export const JSON_CT = "application/json; charset=utf-8";

/** gin's `c.JSON`. */
export function jsonRes(status: number, body: unknown): Response {
  return new Response(goJson(body), { status, headers: { "Content-Type": JSON_CT } });
}

/** gin's default 404/405 bodies. */
export function textRes(status: number, text: string, contentType = "text/plain"): Response {
  return new Response(text, { status, headers: { "Content-Type": contentType } });
}

export type Bound = { ok: true; value: Record<string, unknown> } | { ok: false; status: number; error: string };

/** `c.ShouldBindJSON(&req)`: an empty body is io.EOF, which handlers report as "missing request body". */
export function bindJson(body: Uint8Array, goType: string): Bound {
  const text = new TextDecoder().decode(body);
  if (text.trim() === "") return { ok: false, status: 400, error: "EOF" };
  const syntax = goJsonSyntaxError(text);
  if (syntax !== undefined) return { ok: false, status: 400, error: syntax };
  const v: unknown = JSON.parse(text);
  if (v === null) return { ok: true, value: {} };
  if (typeof v !== "object" || Array.isArray(v)) {
    const kind = Array.isArray(v) ? "array" : typeof v === "string" ? "string" : typeof v === "number" ? "number" : "bool";
    return { ok: false, status: 400, error: `json: cannot unmarshal ${kind} into Go value of type ${goType}` };
  }
  return { ok: true, value: v as Record<string, unknown> };
}

export function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

export type KeepAlive = { ok: true; ms: number | undefined } | { ok: false; error: string };

/**
 * api.Duration.UnmarshalJSON: a number is whole seconds (truncated), a string is a Go duration,
 * anything negative means forever; absent or null leaves the runner's current value.
 */
export function parseKeepAlive(v: unknown): KeepAlive {
  if (v === undefined || v === null) return { ok: true, ms: undefined };
  if (typeof v === "number") return { ok: true, ms: v < 0 ? FOREVER_MS : Math.trunc(v) * 1000 };
  if (typeof v === "string") {
    const ms = parseGoDuration(v);
    if (ms === undefined) {
      const unitless = /^[-+]?[0-9.]+$/.test(v);
      return { ok: false, error: `time: ${unitless ? "missing unit in" : "invalid"} duration ${JSON.stringify(v)}` };
    }
    return { ok: true, ms: ms < 0 ? FOREVER_MS : ms };
  }
  const t = typeof v === "boolean" ? "bool" : Array.isArray(v) ? "[]interface {}" : "map[string]interface {}";
  return { ok: false, error: `Unsupported type: '${t}'` };
}

const UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, "μs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** time.ParseDuration → ms; undefined when Go would reject it. */
export function parseGoDuration(s: string): number | undefined {
  if (s === "0" || s === "+0" || s === "-0") return 0;
  const m = /^([-+]?)((?:[0-9]*\.?[0-9]+(?:ns|us|µs|μs|ms|s|m|h))+)$/.exec(s);
  if (!m) return undefined;
  let total = 0;
  for (const part of (m[2] as string).matchAll(/([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)/g)) {
    total += Number(part[1]) * (UNITS[part[2] as string] as number);
  }
  return m[1] === "-" ? -total : total;
}

/**
 * A streamed body. `run` writes chunks and must end when `signal` aborts (the client went away
 * or the server stops); it owns its cleanup (release the model) in a finally block.
 */
export function streamRes(
  contentType: string,
  requestSignal: AbortSignal,
  run: (write: (chunk: string) => void, signal: AbortSignal) => Promise<void>,
): Response {
  const ac = new AbortController();
  const onAbort = (): void => ac.abort();
  if (requestSignal.aborted) ac.abort(); // the client left while the model was loading
  else requestSignal.addEventListener("abort", onAbort, { once: true });
  const enc = new TextEncoder();
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      const write = (chunk: string): void => {
        if (!ac.signal.aborted) controller.enqueue(enc.encode(chunk));
      };
      const finish = (): void => {
        requestSignal.removeEventListener("abort", onAbort);
        try {
          controller.close();
        } catch {
          // already cancelled by the client
        }
      };
      run(write, ac.signal).then(finish, finish);
    },
    cancel() {
      ac.abort();
    },
  });
  return new Response(stream, { status: 200, headers: { "Content-Type": contentType } });
}

/**
 * Per-request lines at info level:
 *
 *   --> POST /api/chat                       (cyan)
 *   <-- 200 POST /api/chat 5.01s 12.3KiB     (green 1xx–3xx, yellow 4xx, red 5xx)
 *
 * The `<--` line is written when the response body has ended: its duration and byte count are
 * the whole answer's.
 *
 * Colours by status class: 1xx–3xx green (the upstream did what was asked, a redirect or 304
 * included), 4xx yellow (the client's problem, or a 429 busy), 5xx red (a 503 busy as well);
 * a missing status (the client left before an answer) prints `-` in yellow. Colour only when the
 * logger allows it (text format, colour on, not a file).
 */
import type { Logger } from "./log.ts";
import type { Listener, RequestClass } from "./turnstile-metrics.ts";
import { formatBytes, formatDuration } from "./units.ts";

export type RequestDir = "-->" | "<--";

export interface RequestLineInfo {
  method: string;
  path: string;
  /** Absent on `-->`; absent on `<--` when no response was sent. */
  status?: number;
  durationMs?: number;
  /** Response body bytes sent; absent on `-->`. */
  bytes?: number;
  listener: Listener;
  class: RequestClass;
  /** The peer's address. */
  client?: string;
  /** An LLM request's model, once its body was read (absent on `-->`). */
  model?: string;
  /** An LLM request that passed without the lock: it uses no local GPU. */
  noGpu?: "cloud" | "unload";
  /** Served during an image job on the nested listener. */
  nested?: boolean;
}

const CYAN = "\x1b[36m";
const GREEN = "\x1b[32m";
const YELLOW = "\x1b[33m";
const RED = "\x1b[31m";
const RESET = "\x1b[0m";

export { formatBytes, formatDuration } from "./units.ts";

export type StatusColor = "green" | "yellow" | "red";

export function statusColor(status: number | undefined): StatusColor {
  if (status === undefined || (status >= 400 && status < 500)) return "yellow";
  if (status >= 500) return "red";
  return "green";
}

const ANSI_OF: Record<StatusColor, string> = { green: GREEN, yellow: YELLOW, red: RED };

export function formatRequestLine(dir: RequestDir, info: RequestLineInfo, color = false): string {
  let text: string;
  let ansi: string;
  if (dir === "-->") {
    text = `--> ${info.method} ${info.path}`;
    ansi = CYAN;
  } else {
    const status = info.status === undefined ? "–" : String(info.status);
    const dur = info.durationMs === undefined ? "" : ` ${formatDuration(info.durationMs)}`;
    const size = info.bytes === undefined ? "" : ` ${formatBytes(info.bytes)}`;
    text = `<-- ${status} ${info.method} ${info.path}${dur}${size}`;
    ansi = ANSI_OF[statusColor(info.status)];
  }
  return color ? `${ansi}${text}${RESET}` : text;
}

/**
 * Logs one request line at info. Text: the line plus `client=… model=… listener=… class=…`;
 * JSON: the line as `msg` (never coloured) plus every part as its own field, for machines.
 */
export function logRequest(logger: Logger, dir: RequestDir, info: RequestLineInfo): void {
  if (!logger.enabled("info")) return;
  const msg = formatRequestLine(dir, info, logger.color);
  if (logger.format === "json") {
    logger.info(msg, {
      client: info.client,
      model: info.model,
      no_gpu: info.noGpu,
      nested: info.nested,
      listener: info.listener,
      class: info.class,
      method: info.method,
      path: info.path,
      status: info.status,
      duration_ms: info.durationMs === undefined ? undefined : Math.round(info.durationMs * 1000) / 1000,
      bytes: info.bytes,
    });
  } else {
    logger.info(msg, { client: info.client, model: info.model, no_gpu: info.noGpu, nested: info.nested, listener: info.listener, class: info.class });
  }
}

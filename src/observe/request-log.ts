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
}

const CYAN = "\x1b[36m";
const GREEN = "\x1b[32m";
const YELLOW = "\x1b[33m";
const RED = "\x1b[31m";
const RESET = "\x1b[0m";

/** `0.4ms`, `12.3ms`, `1.25s`, `2m03s`, `1h02m` — short, and sortable by eye within a unit. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "-";
  if (ms < 1000) return `${ms.toFixed(1)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(2)}s`;
  const totalS = Math.floor(ms / 1000);
  if (totalS < 3600) return `${Math.floor(totalS / 60)}m${String(totalS % 60).padStart(2, "0")}s`;
  const totalM = Math.floor(totalS / 60);
  return `${Math.floor(totalM / 60)}h${String(totalM % 60).padStart(2, "0")}m`;
}

/** `0B`, `512B`, `12.3KiB`, `4.6MiB`, `1.2GiB`: one decimal, the unit switched before it would read 1024.0. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n}B`;
  let v = n / 1024;
  for (const unit of ["KiB", "MiB"]) {
    if (v < 1023.95) return `${v.toFixed(1)}${unit}`;
    v /= 1024;
  }
  return `${v.toFixed(1)}GiB`;
}

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
    const status = info.status === undefined ? "-" : String(info.status);
    const dur = info.durationMs === undefined ? "" : ` ${formatDuration(info.durationMs)}`;
    const size = info.bytes === undefined ? "" : ` ${formatBytes(info.bytes)}`;
    text = `<-- ${status} ${info.method} ${info.path}${dur}${size}`;
    ansi = ANSI_OF[statusColor(info.status)];
  }
  return color ? `${ansi}${text}${RESET}` : text;
}

/**
 * Logs one request line at info. Text: the line plus `listener=… class=…`; JSON: the line as
 * `msg` (never coloured) plus every part as its own field, for machines.
 */
export function logRequest(logger: Logger, dir: RequestDir, info: RequestLineInfo): void {
  if (!logger.enabled("info")) return;
  const msg = formatRequestLine(dir, info, logger.color);
  if (logger.format === "json") {
    logger.info(msg, {
      listener: info.listener,
      class: info.class,
      method: info.method,
      path: info.path,
      status: info.status,
      duration_ms: info.durationMs === undefined ? undefined : Math.round(info.durationMs * 1000) / 1000,
      bytes: info.bytes,
    });
  } else {
    logger.info(msg, { listener: info.listener, class: info.class });
  }
}

import { describe, expect, test } from "bun:test";
import { createLogger, type LoggerOptions } from "../../src/observe/log.ts";
import { formatBytes, formatDuration, formatRequestLine, logRequest, statusColor, type RequestLineInfo } from "../../src/observe/request-log.ts";

const CHAT: RequestLineInfo = { method: "POST", path: "/api/chat", listener: "ollama", class: "llm" };
const T = new Date("2026-12-02T16:01:29.123Z");

function capture(opts: Partial<LoggerOptions> = {}) {
  const lines: string[] = [];
  const logger = createLogger({ level: "info", format: "text", now: () => T, stream: { write: (s: string) => lines.push(s) }, ...opts });
  return { logger, lines };
}

describe("formatRequestLine", () => {
  test("plain lines", () => {
    expect(formatRequestLine("-->", CHAT)).toBe("--> POST /api/chat");
    expect(formatRequestLine("<--", { ...CHAT, status: 200, durationMs: 12.34 })).toBe("<-- 200 POST /api/chat 12.3ms");
    expect(formatRequestLine("<--", { ...CHAT, durationMs: 5 })).toBe("<-- – POST /api/chat 5.0ms");
    expect(formatRequestLine("<--", { ...CHAT, status: 200, durationMs: 5012, bytes: 12_600 })).toBe("<-- 200 POST /api/chat 5.01s 12.3KiB");
  });

  test("colours: cyan incoming; green 1xx-3xx, yellow 4xx and no status, red 5xx", () => {
    expect(formatRequestLine("-->", CHAT, true)).toBe("\x1b[36m--> POST /api/chat\x1b[0m");
    const col = (status?: number) => formatRequestLine("<--", { ...CHAT, status, durationMs: 1 }, true).slice(0, 6);
    expect(col(200)).toBe("\x1b[32m<");
    expect(col(304)).toBe("\x1b[32m<");
    expect(col(404)).toBe("\x1b[33m<");
    expect(col(429)).toBe("\x1b[33m<");
    expect(col(undefined)).toBe("\x1b[33m<");
    expect(col(500)).toBe("\x1b[31m<");
    expect(col(503)).toBe("\x1b[31m<");
    expect([101, 204, 399, 400, 499, 500, 599].map(statusColor)).toEqual(["green", "green", "green", "yellow", "yellow", "red", "red"]);
  });
});

describe("formatBytes", () => {
  test("units switch at 1 KiB, 1 MiB and 1 GiB", () => {
    expect([0, 1023, 1024, 12_600, 1024 ** 2 - 1, 1024 ** 2, 8 * 1024 ** 2 + 5000, 1024 ** 3 * 1.5].map(formatBytes)).toEqual([
      "0B",
      "1023B",
      "1.0KiB",
      "12.3KiB",
      "1.0MiB",
      "1.0MiB",
      "8.0MiB",
      "1.5GiB",
    ]);
  });
});

describe("formatDuration", () => {
  test("units switch at 1 s, 1 min and 1 h", () => {
    expect([0.4, 12.34, 999.9, 1000, 1234, 59_990, 60_000, 123_000, 3_599_000, 3_720_000].map(formatDuration)).toEqual([
      "0.4ms",
      "12.3ms",
      "999.9ms",
      "1.00s",
      "1.23s",
      "59.99s",
      "1m00s",
      "2m03s",
      "59m59s",
      "1h02m",
    ]);
    expect(formatDuration(-1)).toBe("–");
    expect(formatDuration(NaN)).toBe("–");
  });
});

describe("logRequest", () => {
  test("text: arrow line plus listener and class, coloured only when the logger allows", () => {
    const plain = capture({ color: false });
    logRequest(plain.logger, "-->", CHAT);
    logRequest(plain.logger, "<--", { ...CHAT, status: 503, durationMs: 2.5 });
    expect(plain.lines).toEqual([
      "2026-12-02T16:01:29.123Z INFO  --> POST /api/chat listener=ollama class=llm\n",
      "2026-12-02T16:01:29.123Z INFO  <-- 503 POST /api/chat 2.5ms listener=ollama class=llm\n",
    ]);
    const coloured = capture({ color: true });
    logRequest(coloured.logger, "<--", { ...CHAT, status: 503, durationMs: 2.5 });
    expect(coloured.lines[0]).toContain("\x1b[31m<-- 503 POST /api/chat 2.5ms\x1b[0m");
  });

  test("json: no colour even when asked, every part as a field", () => {
    const { logger, lines } = capture({ format: "json", color: true });
    logRequest(logger, "<--", { method: "POST", path: "/prompt", status: 200, durationMs: 12.3456, bytes: 80, listener: "comfy", class: "image" });
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain("\x1b");
    expect(JSON.parse(lines[0] as string)).toEqual({
      time: "2026-12-02T16:01:29.123Z",
      level: "info",
      msg: "<-- 200 POST /prompt 12.3ms 80B",
      listener: "comfy",
      class: "image",
      method: "POST",
      path: "/prompt",
      status: 200,
      duration_ms: 12.346,
      bytes: 80,
    });
  });

  test("nothing at the default warn level", () => {
    const { logger, lines } = capture({ level: "warn" });
    logRequest(logger, "-->", CHAT);
    logRequest(logger, "<--", { ...CHAT, status: 200, durationMs: 1 });
    expect(lines).toEqual([]);
  });
});

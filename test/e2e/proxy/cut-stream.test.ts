/**
 * Issue 26, point 12: a stream the turnstile cuts (LLM_IDLE_TIMEOUT, a force-release) ends at the
 * client at once. The slot came back and the upstream was cut at once already, but the client's
 * connection was left to Bun's request timeout, which fires on a 4 s timer tick: the client saw
 * neither the end nor an error for 3–4 s. Measured with a raw client that notes when it sees the
 * close; on the real entry point with LOG_FORMAT=json, stderr stays JSON (no Bun stack dump).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Socket } from "bun";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startOllamaSim } from "../../../src/sim/index.ts";
import { freePort } from "../../support/dead-port.ts";
import { nonJsonLines, startMain } from "../../support/main-process.ts";
import { type Stack, startImageJob, startStack, until } from "./helpers.ts";

/** How soon after the cut the client must see its connection end (far below Bun's 4 s tick). */
const AT_ONCE_MS = 1000;

/** A raw client: what it received, and when it saw the connection end. */
async function rawChat(port: number) {
  const got: Uint8Array[] = [];
  let endedAt: number | undefined;
  const sock: Socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data: (_s, d) => void got.push(new Uint8Array(d)),
      close: () => void (endedAt ??= performance.now()),
      end: () => void (endedAt ??= performance.now()),
    },
  });
  const body = JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
  sock.write(`POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  await until(() => got.length > 0, "the answer started");
  return { sock, text: () => Buffer.concat(got).toString("latin1"), endedAt: () => endedAt };
}

/** One NDJSON piece, then nothing: an Ollama whose stream stalls (and that never ends it). */
const stalled = () => {
  const piece = `${JSON.stringify({ model: "llama3.2", message: { role: "assistant", content: "x" }, done: false })}\n`;
  return new Response(new ReadableStream<string>({ start: (c) => c.enqueue(piece) }), { headers: { "content-type": "application/x-ndjson" } });
};

let s: Stack;
beforeAll(async () => {
  s = await startStack({ LLM_IDLE_TIMEOUT: "1s" });
});
afterAll(async () => {
  await s.stop();
});

test("LLM_IDLE_TIMEOUT cuts a stalled stream: the client's connection ends with the slot, not a 4 s timer tick later", async () => {
  const off = s.pair.ollama.override("POST", "/api/chat", stalled);
  try {
    const c = await rawChat(Number(new URL(s.t.ollamaUrl).port));
    await until(() => s.t.lock.snapshot().llmInflight === 0, "the slot released by LLM_IDLE_TIMEOUT", 4000);
    const cutAt = performance.now();
    await until(() => c.endedAt() !== undefined, "the client's connection ended", 6000);
    expect(c.endedAt()! - cutAt).toBeLessThan(AT_ONCE_MS);
    // Cut, not a short answer that looks complete: no last chunk.
    expect(c.text()).toStartWith("HTTP/1.1 200");
    expect(c.text().endsWith("0\r\n\r\n")).toBe(false);
    expect(s.t.logLines.some((l) => l.includes("reason=upstream_stalled"))).toBe(true);
  } finally {
    off();
  }
  // The card goes on: an image job runs, and the ledger shows the tenants never overlapped.
  await startImageJob(s.t, 50);
  await s.t.settled();
  expect(s.pair.gpu.overlaps()).toEqual([]);
});

test("a force-release cuts a stream: on the real entry point the client sees the end at once, and stderr stays JSON", async () => {
  const ollama = await startOllamaSim({ loadMs: 5, tokenDelayMs: 2 });
  ollama.override("POST", "/api/chat", stalled);
  const cwd = mkdtempSync(join(tmpdir(), "turnstile-cut-"));
  const main = await startMain(cwd, { STATE_DIR: cwd, OLLAMA_URL: ollama.url, COMFY_URL: "", LISTEN_OLLAMA: `127.0.0.1:${freePort()}`, LOG_FORMAT: "json", LOGLEVEL: "info" });
  const port = Number(new URL(main.url("ollama")).port);
  try {
    const c = await rawChat(port);
    const released = await fetch(`http://127.0.0.1:${port}/turnstile/release`, { method: "POST" });
    expect(released.status).toBe(200);
    const cutAt = performance.now();
    await until(() => c.endedAt() !== undefined, "the client's connection ended", 6000);
    expect(c.endedAt()! - cutAt).toBeLessThan(AT_ONCE_MS);
    expect(c.text().endsWith("0\r\n\r\n")).toBe(false);
    await until(() => main.stderr().includes("force-release"), "the force-release logged", 5000);
  } finally {
    await main.kill("SIGTERM");
    await ollama.stop();
    rmSync(cwd, { recursive: true, force: true });
  }
  expect(nonJsonLines(main.stderr())).toEqual([]);
}, 30_000);

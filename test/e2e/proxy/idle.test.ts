/**
 * LLM_IDLE_TIMEOUT through real sockets: an LLM exchange in which no byte moves for the timeout
 * gives its GPU slot back — a client that stops reading, a request body that stops arriving, an
 * Ollama that accepts the request and never answers — and the image job behind it runs, the two
 * tenants never on the card together.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { formatBytes } from "../../../src/observe/request-log.ts";
import { sampleValue } from "../../support/prom-parse.ts";
import { health, postJson, scrape, type Stack, startImageJob, startStack, until } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  s = await startStack({ LLM_IDLE_TIMEOUT: "1s" });
});
afterAll(async () => {
  await s.stop();
});
let offs: (() => void)[] = [];
beforeEach(() => {
  for (const off of offs) off();
  offs = [];
});

/** Ollama holds a model on the card, as it does after any chat (keep_alive), so the ledger has two tenants to keep apart. */
async function loadModel(): Promise<void> {
  const res = await postJson(`${s.t.ollamaUrl}/api/generate`, { model: "llama3.2", prompt: "hi", stream: false });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
}

/** The slot is given back within a few seconds of the timeout. */
async function slotReleased(): Promise<void> {
  await until(() => s.t.lock.snapshot().llmInflight === 0, "the LLM slot released", 4000);
}

/** An image job gets the GPU and runs to its end, Ollama unloaded first: the ledger shows no overlap. */
async function imageJobRuns(): Promise<void> {
  const completed = () => s.t.logLines.filter((l) => l.includes("completed; GPU released")).length;
  const before = completed();
  await startImageJob(s.t, 50);
  await s.t.settled();
  expect(completed()).toBe(before + 1);
  expect(s.pair.gpu.overlaps()).toEqual([]);
}

async function aborted(reason: string): Promise<number | undefined> {
  return sampleValue(await scrape(s.t.ollamaUrl), "gpu_turnstile_llm_aborted_total", { reason });
}

function warned(reason: string): string[] {
  return s.t.logLines.filter((l) => /\bWARN\b/.test(l) && l.includes(`reason=${reason}`) && l.includes("LLM_IDLE_TIMEOUT (1s)"));
}

/** A raw client connection: what it received, and whether the turnstile closed it. */
async function rawClient(port: number) {
  const got: Uint8Array[] = [];
  let closed = false;
  const sock: Socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data: (_s, d) => void got.push(new Uint8Array(d)),
      close: () => void (closed = true),
      end: () => void (closed = true),
    },
  });
  return {
    sock,
    text: () => Buffer.concat(got).toString("latin1"),
    bytes: () => got.reduce((n, b) => n + b.length, 0),
    closed: () => closed,
  };
}

describe("LLM_IDLE_TIMEOUT=1s", () => {
  test("a client that stops reading a stream: slot released, its connection cut, and an image job runs", async () => {
    await loadModel();
    // An answer far larger than any socket buffer: the client's stop must reach the upstream.
    const piece = new TextEncoder().encode(`${JSON.stringify({ model: "llama3.2", message: { role: "assistant", content: "x".repeat(1000) }, done: false })}\n`);
    let produced = 0;
    offs.push(
      s.pair.ollama.override("POST", "/api/chat", () => {
        const body = new ReadableStream<Uint8Array>({
          pull(c) {
            produced += piece.length;
            c.enqueue(piece);
          },
        });
        return new Response(body, { headers: { "content-type": "application/x-ndjson" } });
      }),
    );
    const port = Number(new URL(s.t.ollamaUrl).port);
    const c = await rawClient(port);
    const body = JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
    c.sock.write(`POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await until(() => c.bytes() > 0, "the answer started");
    c.sock.pause();
    expect(s.t.lock.snapshot().llmInflight).toBe(1);

    await slotReleased();
    expect(await aborted("client_not_reading")).toBe(1);
    expect(warned("client_not_reading")).toHaveLength(1);
    expect(warned("client_not_reading")[0]).toContain('request="POST /api/chat"');
    // The upstream stopped being read long before its endless answer could end.
    const stoppedAt = produced;
    await imageJobRuns();

    // The client's connection was cut: it ends without the chunked body's last chunk.
    c.sock.resume();
    await until(() => c.closed(), "the client's connection closed");
    expect(c.text()).toStartWith("HTTP/1.1 200");
    expect(c.text().endsWith("0\r\n\r\n")).toBe(false);
    expect(produced - stoppedAt).toBeLessThan(8 * 1024 * 1024);
  });

  test("a chunked request body that stops arriving: 408 in Ollama's dialect, slot released, and an image job runs", async () => {
    await loadModel();
    const port = Number(new URL(s.t.ollamaUrl).port);
    const c = await rawClient(port);
    const start = '{"model":"llama3.2","messages":[';
    c.sock.write(`POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${start.length.toString(16)}\r\n${start}\r\n`);
    await until(() => s.t.lock.snapshot().llmInflight === 1, "the request holding a slot");
    await until(() => c.text().includes("\r\n\r\n{"), "an answer", 4000);
    expect(c.text()).toStartWith("HTTP/1.1 408");
    const json = JSON.parse(c.text().slice(c.text().indexOf("\r\n\r\n") + 4)) as { error: string };
    expect(json.error).toContain("request body stopped arriving for LLM_IDLE_TIMEOUT (1s)");
    await slotReleased();
    expect(await aborted("request_body")).toBe(1);
    expect(warned("request_body")).toHaveLength(1);
    await imageJobRuns();
    // RFC 9110 §15.5.9: the rest of that body will never be read, so the connection is closed.
    await until(() => c.closed(), "the client's connection closed");
  });

  test("an upstream that accepts the request and never answers: 504 in the dialect, slot released, and an image job runs", async () => {
    await loadModel();
    offs.push(s.pair.ollama.override("POST", "/v1/chat/completions", () => new Promise<Response>(() => {})));
    const t0 = performance.now();
    const res = await postJson(`${s.t.ollamaUrl}/v1/chat/completions`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
    expect(performance.now() - t0).toBeLessThan(4000);
    expect(res.status).toBe(504);
    const json = (await res.json()) as { error: { type: string; message: string } };
    expect(json.error.type).toBe("upstream_timeout");
    expect(json.error.message).toContain("Ollama sent no answer for LLM_IDLE_TIMEOUT (1s)");
    // The request log has the answer the turnstile made, with its size.
    const size = Buffer.byteLength(JSON.stringify(json));
    await until(() => s.t.logLines.some((l) => l.includes(`<-- 504 POST /v1/chat/completions`)), "the <-- line");
    expect(s.t.logLines.find((l) => l.includes("<-- 504 POST /v1/chat/completions"))).toContain(` ${formatBytes(size)} `);
    await slotReleased();
    expect(await aborted("no_answer")).toBe(1);
    expect(warned("no_answer")).toHaveLength(1);
    await imageJobRuns();
  });

  test("a stream that keeps moving outlives the timeout: a piece every 300 ms for 2.1 s ends normally", async () => {
    offs.push(
      s.pair.ollama.override("POST", "/api/chat", () => {
        let n = 0;
        const body = new ReadableStream<Uint8Array>({
          async pull(c) {
            await Bun.sleep(300);
            c.enqueue(new TextEncoder().encode(`${JSON.stringify({ n, done: n === 6 })}\n`));
            if (++n === 7) c.close();
          },
        });
        return new Response(body, { headers: { "content-type": "application/x-ndjson" } });
      }),
    );
    const idleLines = () => s.t.logLines.filter((l) => l.includes("LLM_IDLE_TIMEOUT")).length;
    const before = idleLines();
    const res = await postJson(`${s.t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
    expect(res.status).toBe(200);
    const lines = (await res.text()).trim().split("\n");
    expect(lines).toHaveLength(7);
    expect(lines.at(-1)).toContain('"done":true');
    expect(await health(s.t.ollamaUrl)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
    expect(idleLines()).toBe(before);
  });
});

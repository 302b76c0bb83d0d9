/**
 * CLIENT_IDLE_TIMEOUT (issue 26): a client connection kept alive with nothing in flight is closed,
 * so idle sockets cannot pile up until descriptors run out; a request waiting for the GPU, a
 * stream being read and a /ws relay are never cut by it. Raw sockets, since fetch hides its
 * connections.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { connect, type Socket } from "node:net";
import { postJson, readTimed, type Stack, startImageJob, startStack, until } from "./helpers.ts";

const IDLE_MS = 300;
let s: Stack;
beforeAll(async () => {
  s = await startStack({ CLIENT_IDLE_TIMEOUT: `${IDLE_MS}ms` }, { ollama: { tokenDelayMs: 100 } });
  await s.t.probed;
});
afterAll(() => s.stop());

/** A raw connection: what it received, and whether the turnstile closed it. */
function rawSocket(base: string): Promise<{ sock: Socket; got: () => string; closed: () => boolean }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve) => {
    let got = "";
    let closed = false;
    const sock = connect(Number(port), hostname, () => resolve({ sock, got: () => got, closed: () => closed }));
    sock.on("data", (d) => (got += d.toString()));
    sock.on("close", () => (closed = true));
    sock.on("error", () => {});
  });
}

test("a connection kept alive after its answer, then silent, is closed; the log says so", async () => {
  const c = await rawSocket(s.t.ollamaUrl);
  c.sock.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  await until(() => c.got().includes("\r\n\r\n{"), "the /healthz answer");
  expect(c.got()).not.toContain("connection: close");
  await until(c.closed, "the idle connection closed", 5000);
  await until(() => s.t.logLines.some((l) => l.includes("idle for up to CLIENT_IDLE_TIMEOUT (300ms)")), "the close logged");
});

test("a request waiting for the GPU, and a stream read slowly, both longer than several sweeps, are never cut", async () => {
  await startImageJob(s.t, IDLE_MS * 4);
  const waited = postJson(`${s.t.ollamaUrl}/api/generate`, { model: "llama3.2", prompt: "hi", stream: false });
  await until(() => s.t.lock.snapshot().llmWaiting === 1, "the chat waiting for the image job");
  const res = await waited;
  expect(res.status).toBe(200);
  await res.arrayBuffer();
  // 20 tokens 100 ms apart: a 2 s stream, nearly seven sweeps.
  const stream = await postJson(`${s.t.ollamaUrl}/api/generate`, { model: "llama3.2", prompt: "hi", options: { num_predict: 20 } });
  const chunks = await readTimed(stream);
  expect(chunks.map((c) => c.text).join("")).toContain('"done":true');
  expect(chunks.at(-1)!.at - chunks[0]!.at).toBeGreaterThan(IDLE_MS * 2);
  expect(s.pair.gpu.overlaps()).toEqual([]);
});

test("a /ws relay that carries nothing for several sweeps stays open", async () => {
  const ws = new WebSocket(`${s.t.comfyUrl.replace("http", "ws")}/ws?clientId=quiet`);
  let closed = false;
  ws.onclose = () => (closed = true);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  // Two plain idle connections beside it, one after the other, are closed meanwhile: two sweeps ran.
  for (const n of [1, 2]) {
    const idle = await rawSocket(s.t.comfyUrl);
    idle.sock.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await until(idle.closed, `plain idle connection ${n} closed`, 5000);
  }
  expect({ closed, state: ws.readyState }).toEqual({ closed: false, state: WebSocket.OPEN });
  ws.close();
});

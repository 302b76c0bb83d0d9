import { afterEach, expect, test } from "bun:test";
import { connect } from "node:net";
import { GpuLock } from "../../src/lock/index.ts";
import { EventHub } from "../../src/status/events.ts";
import { StatusModel } from "../../src/status/model.ts";

let server: ReturnType<typeof Bun.serve> | undefined;
afterEach(() => {
  server?.stop(true);
  server = undefined;
});

function serveHub(maxQueuedBytes: number, trusted = true) {
  const lock = new GpuLock();
  const model = new StatusModel({ version: "v1", upstreams: [] });
  lock.onEvent((e) => model.onLock(e));
  const drops: number[] = [];
  const hub = new EventHub({ model, maxQueuedBytes, onDrop: (b) => drops.push(b) });
  server = Bun.serve({ port: 0, hostname: "127.0.0.1", idleTimeout: 0, fetch: (req) => hub.connect(trusted, req.signal) });
  return { lock, model, hub, drops, url: `http://127.0.0.1:${server.port}/` };
}

/** One LLM request in and out: two transitions, two `state` events. */
function churn(lock: GpuLock, n: number) {
  for (let i = 0; i < n; i++) lock.tryAcquireLLM()!.release();
}

async function until(cond: () => boolean, what: string, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

test("a reader that keeps up gets every event, the snapshot first", async () => {
  const { lock, hub, url } = serveHub(64 * 1024);
  const ctrl = new AbortController();
  const res = await fetch(url, { signal: ctrl.signal });
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  await until(() => hub.size === 1, "connected");
  churn(lock, 50);
  while ((text.match(/^event: state$/gm)?.length ?? 0) < 100) text += (await reader.read()).value;
  expect(text.startsWith("event: status\ndata: {")).toBe(true);
  expect(text.match(/^event: state$/gm)).toHaveLength(100);
  ctrl.abort();
  await until(() => hub.size === 0, "reader gone");
});

test("a reader that stops reading is dropped and closed; the lock never waits for it", async () => {
  const { lock, hub, drops, url } = serveHub(64 * 1024);
  const sock = connect({ host: "127.0.0.1", port: Number(new URL(url).port) });
  await new Promise((r) => sock.once("connect", r));
  sock.write("GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  let ended = false;
  sock.once("data", () => sock.pause()); // read the head, then nothing
  sock.on("close", () => (ended = true));
  await until(() => hub.size === 1, "connected");
  // Enough events to fill the kernel's socket buffers many times over.
  for (let round = 0; round < 400 && hub.size > 0; round++) {
    const t0 = performance.now();
    churn(lock, 1000);
    expect(performance.now() - t0).toBeLessThan(1000);
    await new Promise((r) => setImmediate(r));
  }
  expect(hub.size).toBe(0);
  expect(drops).toHaveLength(1);
  expect(drops[0]!).toBeGreaterThan(64 * 1024);
  sock.resume();
  await until(() => ended, "the dropped reader's connection closed");
}, 20_000);

test("a reader who may not see client addresses gets lease events without them (who took it, who revoked it)", async () => {
  const { model, hub, url } = serveHub(64 * 1024, false);
  const res = await fetch(url);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  await until(() => hub.size === 1, "connected");
  const lease = { id: "0b5e", holder: "train", by: "10.0.0.7", since: 1, expires_at: 2 };
  model.onLease({ event: "grant", lease });
  model.onLease({ event: "end", lease, reason: "revoked", by: "10.0.0.8" });
  let text = "";
  while ((text.match(/^event: lease$/gm)?.length ?? 0) < 2) text += (await reader.read()).value;
  expect(text).toContain('"holder":"train"');
  expect(text).toContain('"reason":"revoked"');
  expect(text).not.toContain("10.0.0.");
  await reader.cancel();
});

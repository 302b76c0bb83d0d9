/**
 * Issue 18, steering: a DNS-rebinding page reaches the turnstile from loopback under its own name.
 * Without the token, steering and client addresses need a Host that names this machine; steering
 * bodies are cut at 4 KiB while read; the holders list stays bounded with exact counts.
 */
import { expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import { EventHub } from "../../src/status/events.ts";
import { MAX_LISTED, StatusModel, type StatusDoc } from "../../src/status/model.ts";
import { statusRoutes } from "../../src/status/routes.ts";
import { bareSteering } from "./helpers.ts";

const TOKEN = "admin-token-0123456789";

function setup(machineHost?: (host: string) => boolean) {
  const lock = new GpuLock();
  const model = new StatusModel({ version: "v1", upstreams: [] });
  model.start("/api/chat", "10.0.0.7");
  const steering = bareSteering(lock, model);
  return { model, steering, routes: statusRoutes({ model, hub: new EventHub({ model }), adminToken: TOKEN, steering, machineHost }) };
}

const req = (path: string, host: string, init: RequestInit = {}, headers: Record<string, string> = {}) =>
  new Request(`http://t${path}`, { ...init, headers: { host, ...headers } });

test("from loopback under a rebound name: steering refused, no addresses, no steering on the page", async () => {
  const { routes, steering } = setup();
  for (const path of ["/turnstile/release", "/turnstile/lease"]) {
    const res = await routes(req(path, "evil.example:11434", { method: "POST" }), "127.0.0.1");
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: string }).error).toContain("does not name this machine");
  }
  const doc = (await (await routes(req("/turnstile/status", "evil.example:11434"), "127.0.0.1")).json()) as StatusDoc & { can_steer: boolean };
  expect(doc.llm.requests.map((r) => r.client)).toEqual([undefined]);
  expect(doc.can_steer).toBe(false);
  // The token still works under any name.
  const withToken = await routes(req("/turnstile/release", "evil.example:11434", { method: "POST" }, { authorization: `Bearer ${TOKEN}` }), "127.0.0.1");
  expect(withToken.status).toBe(200);
  steering.stop();
});

test("localhost, IP literals and the machine's own names steer from loopback without a token", async () => {
  const { routes, steering } = setup((h) => h.startsWith("gpu-box") || h.startsWith("localhost") || /^[\d.]+(:\d+)?$/.test(h) || h.startsWith("["));
  for (const host of ["localhost:11434", "127.0.0.1:11434", "[::1]:11434", "gpu-box:8189"]) {
    const res = await routes(req("/turnstile/release", host, { method: "POST" }), "127.0.0.1");
    expect({ host, status: res.status }).toEqual({ host, status: 200 });
    const doc = (await (await routes(req("/turnstile/status", host), "127.0.0.1")).json()) as StatusDoc & { can_steer: boolean };
    expect(doc.can_steer).toBe(true);
    expect(doc.llm.requests[0]!.client).toBe("10.0.0.7");
  }
  steering.stop();
});

test("a lease body without Content-Length is cut at 4 KiB while it is read, not after", async () => {
  const { routes, steering } = setup();
  let pulled = 0;
  const chunk = new Uint8Array(64 * 1024).fill(0x20);
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      pulled += chunk.length;
      if (pulled > 64 * 1024 * 1024) return c.close();
      c.enqueue(chunk);
    },
  });
  const res = await routes(new Request("http://t/turnstile/lease", { method: "POST", body, headers: { host: "localhost" } }), "127.0.0.1");
  expect(res.status).toBe(413);
  expect(pulled).toBeLessThan(1024 * 1024);
  steering.stop();
});

test("2,600 waiting requests and session jobs: the holders list is capped, with the exact counts beside it, and a reader is not dropped", async () => {
  const lock = new GpuLock();
  const model = new StatusModel({ version: "v1", upstreams: [] });
  const held = model.start("/api/chat", "10.0.0.1");
  model.admitted(held);
  for (let i = 0; i < 2600; i++) model.start(`/api/chat`, `10.0.${i >> 8}.${i & 255}`);
  // And an image session that a script filled with 2,600 prompts.
  for (let i = 1; i <= 2600; i++) model.onJob({ phase: "acquired", jobId: i, waitedMs: 0, joined: true });
  const h = model.holders(true, Date.now());
  expect(h.image.session!.jobs).toHaveLength(MAX_LISTED);
  expect(h.image.session!.jobs_omitted).toBe(2600 - MAX_LISTED);
  expect(h.llm.requests).toHaveLength(MAX_LISTED);
  expect(h.llm.requests_omitted).toBe(2601 - MAX_LISTED);
  expect(h.llm.waiting).toBe(2600);
  expect(h.llm.requests[0]!.waiting).toBe(false); // the holder is listed first
  let dropped = 0;
  const hub = new EventHub({ model, onDrop: () => dropped++ });
  const ac = new AbortController();
  const res = hub.connect(true, ac.signal);
  const reader = res.body!.getReader();
  const first = new TextDecoder().decode((await reader.read()).value);
  expect(first.startsWith("event: status")).toBe(true);
  expect(first.length).toBeLessThan(64 * 1024);
  expect(dropped).toBe(0);
  ac.abort();
  await reader.cancel();
  hub.closeAll();
});

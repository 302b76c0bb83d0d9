/**
 * Issue 28 point 7: the card section is live. A model a chat loads, and its unload when its
 * keep-alive ends, reach a reader of /turnstile/events as `card` events within 2 s — with the
 * health probes an hour apart, so only the reads made for a watching page can have seen them.
 * Waiters' reasons and estimates move with the card too (`holders`, each tick it changed).
 */
import { afterEach, expect, test } from "bun:test";
import type { GpuEvent } from "../../src/sim/index.ts";
import { CardRefresh, EXPIRY_WATCH_MS } from "../../src/status/card-refresh.ts";
import type { LockEvent } from "../../src/lock/index.ts";
import { EventHub } from "../../src/status/events.ts";
import { StatusModel, type CardView } from "../../src/status/model.ts";
import { readSse } from "../../src/status/sse-read.ts";
import { now } from "../../src/sim/clock.ts";
import { postJson, startStack, until, type Stack } from "../e2e/jobs/helpers.ts";

let stack: Stack | undefined;
const stop = new AbortController();
afterEach(async () => {
  stop.abort();
  await stack?.stop();
  stack = undefined;
});

test("a chat's model shows as loaded, and as gone when its keep-alive ends, each within 2 s", async () => {
  stack = await startStack({ ollama: { loadMs: 300, unloadMs: 200, tokenDelayMs: 100, tokens: 40 }, comfy: false, env: { HEALTH_INTERVAL: "1h" } });
  const { t, gpu } = stack;
  const marks: GpuEvent[] = [];
  gpu.on((e) => (e.kind === "loaded" || e.kind === "unloaded") && marks.push(e));
  const cards: { at: number; card: CardView }[] = [];
  const res = await fetch(`${t.ollamaUrl}/turnstile/events`, { signal: stop.signal });
  void (async () => {
    for await (const e of readSse(res.body!)) if (e.event === "card") cards.push({ at: now(), card: e.data as CardView });
  })().catch(() => {});
  const names = (c: CardView) => (c.models ?? []).map((m) => m.name);
  const firstAfter = (at: number, want: (c: CardView) => boolean) => cards.find((c) => c.at >= at && want(c.card));

  // A 4 s stream: the model must show while it runs, not when it ends (nor at the next probe).
  const chat = postJson(`${t.ollamaUrl}/api/chat`, { model: "llama3.2", keep_alive: "3s", messages: [{ role: "user", content: "hi" }] });
  await until(() => marks.some((m) => m.kind === "loaded"), "the model loaded", 10_000);
  const loadedAt = marks.find((m) => m.kind === "loaded")!.at;
  await until(() => firstAfter(loadedAt, (c) => names(c).includes("llama3.2:latest")) !== undefined, "the load shown", 5000);
  expect(firstAfter(loadedAt, (c) => names(c).includes("llama3.2:latest"))!.at - loadedAt).toBeLessThan(2000);
  const shown = firstAfter(loadedAt, (c) => names(c).includes("llama3.2:latest"))!.card.models![0]!;
  expect(shown.size_vram).toBeGreaterThan(0); // the GPU/CPU split rides along
  await (await chat).text();

  // Idle now; Ollama unloads the model when its 3 s keep-alive ends.
  await until(() => marks.some((m) => m.kind === "unloaded"), "the keep-alive ended", 15_000);
  const unloadedAt = marks.find((m) => m.kind === "unloaded")!.at;
  await until(() => firstAfter(unloadedAt, (c) => names(c).length === 0) !== undefined, "the unload shown", 5000);
  expect(firstAfter(unloadedAt, (c) => names(c).length === 0)!.at - unloadedAt).toBeLessThan(2000);
}, 30_000);

/** The refresher with a hand-driven clock and a count of reads. */
function refresher(opts: { busy?: boolean; expiry?: number | null } = {}) {
  let clock = 1_000_000;
  let reads = 0;
  let finish: (() => void) | undefined;
  const r = new CardRefresh({
    read: () => (reads++, new Promise<void>((done) => (finish = done))),
    busy: () => opts.busy ?? false,
    nextExpiry: () => opts.expiry ?? null,
    now: () => clock,
  });
  return {
    r,
    reads: () => reads,
    advance: (ms: number) => (clock += ms),
    async finish() {
      finish?.();
      await Promise.resolve();
      await Promise.resolve();
    },
  };
}

test("while a page watches, an idle card nobody touches costs no reads beyond the probes", async () => {
  const f = refresher();
  for (let i = 0; i < 100; i++) f.r.tick(false);
  expect(f.reads()).toBe(0);
});

test("a change, a busy card or a keep-alive just ended reads the card; a read on its way is never doubled", async () => {
  const changed = refresher();
  changed.r.tick(true);
  changed.r.tick(true);
  expect(changed.reads()).toBe(1);
  await changed.finish();
  changed.r.tick(true);
  expect(changed.reads()).toBe(2);

  const busy = refresher({ busy: true });
  busy.r.tick(false);
  expect(busy.reads()).toBe(1);

  const expiring = refresher({ expiry: 1_000_000 + 5000 });
  expiring.r.tick(false);
  expect(expiring.reads()).toBe(0); // not yet
  expiring.advance(5000);
  expiring.r.tick(false);
  expect(expiring.reads()).toBe(1);
  await expiring.finish();
  expiring.advance(EXPIRY_WATCH_MS + 1);
  expiring.r.tick(false);
  expect(expiring.reads()).toBe(1); // a model Ollama keeps listing long past its end is left to the probes
});

test("a waiter's reason and estimate reach a watching reader as they change, not only when it connects", async () => {
  let estimate = 30;
  const model = new StatusModel({ version: "v1", upstreams: [], retryAfterS: () => estimate });
  const hub = new EventHub({ model, tickMs: 20 });
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", idleTimeout: 0, fetch: (req) => hub.connect(false, req.signal) });
  const ctrl = new AbortController();
  try {
    const waiting: { reason: string; retry_after_s: number }[][] = [];
    const res = await fetch(`http://127.0.0.1:${server.port}/`, { signal: ctrl.signal });
    void (async () => {
      for await (const e of readSse(res.body!)) if (e.event === "status" || e.event === "holders") waiting.push((e.data as { waiting: { reason: string; retry_after_s: number }[] }).waiting);
    })().catch(() => {});
    const chat = model.start("/api/chat", undefined);
    await until(() => waiting.some((w) => w[0]?.retry_after_s === 30), "the waiter with its first estimate", 5000);
    estimate = 12;
    await until(() => waiting.some((w) => w[0]?.retry_after_s === 12), "the estimate moved", 5000);
    model.onLock({ type: "transition", from: "idle", to: "image", snapshot: {} } as unknown as LockEvent);
    await until(() => waiting.some((w) => w[0]?.reason === "an image session holds the card"), "the reason moved with the card", 5000);
    model.end(chat);
  } finally {
    ctrl.abort();
    server.stop(true);
  }
});

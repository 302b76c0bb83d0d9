import { expect, test } from "bun:test";
import { identify, parseClients } from "../../src/fair/identity.ts";
import { GpuLock } from "../../src/lock/index.ts";
import { EventHub } from "../../src/status/events.ts";
import { placeInLine } from "../../src/status/line.ts";
import { StatusModel } from "../../src/status/model.ts";
import { statusRoutes } from "../../src/status/routes.ts";

const entries = [
  { kind: "image" as const, client: "alice", cls: "batch", tag: 11 },
  { kind: "image" as const, client: "bob", cls: "interactive", tag: 20 },
  { kind: "lease" as const, client: undefined, cls: "", tag: undefined },
  { kind: "image" as const, client: "alice", cls: "batch", tag: 12 },
];

test("grouped by client in the lock's order, each with its position and the estimate for the jobs ahead", () => {
  expect(placeInLine({ image: entries, llm: [] }, (ahead) => 10 * (ahead + 1))).toEqual([
    { client: "alice", class: "batch", jobs: [{ job: 11, position: 1, estimate_s: 10 }, { job: 12, position: 4, estimate_s: 40 }], requests: [] },
    { client: "bob", class: "interactive", jobs: [{ job: 20, position: 2, estimate_s: 20 }], requests: [] },
  ]);
});

test("waiting chats: each at its LLM turn after the image jobs ahead, grouped with its client's jobs, the group at its first place", () => {
  const llm = [
    { client: "bob", cls: "interactive", tag: 5, ahead: 1 },
    { client: "carol", cls: "normal", tag: 6, ahead: 4 },
    { client: "anon", cls: "normal", tag: undefined, ahead: 4 },
    { client: undefined, cls: "normal", tag: 9, ahead: 4 },
  ];
  const estimate = (ahead: number) => 10 * (ahead + 1);
  expect(placeInLine({ image: entries, llm }, estimate)).toEqual([
    { client: "alice", class: "batch", jobs: [{ job: 11, position: 1, estimate_s: 10 }, { job: 12, position: 4, estimate_s: 40 }], requests: [] },
    // Bob's chat goes when the card turns to llm after alice's first job: position 2, as his own image job.
    { client: "bob", class: "interactive", jobs: [{ job: 20, position: 2, estimate_s: 20 }], requests: [{ request: 5, position: 2, estimate_s: 20 }] },
    { client: "carol", class: "normal", jobs: [], requests: [{ request: 6, position: 5, estimate_s: 50 }] },
  ]);
  expect(placeInLine({ image: entries, llm }, estimate, "carol")).toEqual([{ client: "carol", class: "normal", jobs: [], requests: [{ request: 6, position: 5, estimate_s: 50 }] }]);
});

test("a viewer who may not steer sees its own entries only, with their places among everyone's", () => {
  expect(placeInLine({ image: entries, llm: [] }, (ahead) => ahead, "bob")).toEqual([{ client: "bob", class: "interactive", jobs: [{ job: 20, position: 2, estimate_s: 1 }], requests: [] }]);
  expect(placeInLine({ image: entries, llm: [] }, (ahead) => ahead, "carol")).toEqual([]);
});

test("/turnstile/status: loopback sees every client's place; another client sees only its own, told by ?client_id=", async () => {
  const parsed = parseClients("alice batch client_id=alice-\nbob interactive client_id=bob-\n", ["interactive", "normal", "batch"]);
  if (!parsed.ok) throw new Error(parsed.message);
  const lock = new GpuLock({ turnClasses: [{ name: "interactive", weight: 4 }, { name: "normal", weight: 2 }, { name: "batch", weight: 1 }] });
  const chat = lock.tryAcquireLLM()!;
  void lock.acquireImage(undefined, { client: "alice", cls: "batch", tag: 1 });
  void lock.acquireImage(undefined, { client: "alice", cls: "batch", tag: 2 });
  void lock.acquireImage(undefined, { client: "bob", cls: "interactive", tag: 3 });
  const model = new StatusModel({ version: "v1", upstreams: ["comfy"] });
  const r = statusRoutes({
    model,
    hub: new EventHub({ model }),
    adminToken: "",
    line: (seen) => placeInLine({ image: lock.imageLine(), llm: lock.llmLine() }, (ahead) => 5 * (ahead + 1), seen && identify(seen, parsed.rules).client),
  });
  const line = async (url: string, ip: string) => ((await (await r(new Request(url), ip)).json()) as { line: unknown }).line;
  // Bob's interactive job goes first: weight 4 against alice's 1.
  expect(await line("http://t/turnstile/status", "127.0.0.1")).toEqual([
    { client: "bob", class: "interactive", jobs: [{ job: 3, position: 1, estimate_s: 5 }], requests: [] },
    { client: "alice", class: "batch", jobs: [{ job: 1, position: 2, estimate_s: 10 }, { job: 2, position: 3, estimate_s: 15 }], requests: [] },
  ]);
  const bob = await line("http://t/turnstile/status?client_id=bob-tab-2", "192.168.1.5");
  expect(bob).toEqual([{ client: "bob", class: "interactive", jobs: [{ job: 3, position: 1, estimate_s: 5 }], requests: [] }]);
  expect(JSON.stringify(bob)).not.toContain("alice");
  expect(await line("http://t/turnstile/status", "192.168.1.5")).toEqual([]);
  chat.release();
});

test("/turnstile/events: each reader's line is its own, in the first status and in `line` events at the tick, and its estimate ages", async () => {
  const parsed = parseClients("alice batch client_id=alice-\nbob interactive client_id=bob-\n", ["interactive", "normal", "batch"]);
  if (!parsed.ok) throw new Error(parsed.message);
  const lock = new GpuLock({ turnClasses: [{ name: "interactive", weight: 4 }, { name: "normal", weight: 2 }, { name: "batch", weight: 1 }] });
  const chat = lock.tryAcquireLLM()!;
  void lock.acquireImage(undefined, { client: "alice", cls: "batch", tag: 1 });
  void lock.acquireImage(undefined, { client: "bob", cls: "interactive", tag: 3 });
  const model = new StatusModel({ version: "v1", upstreams: ["comfy"] });
  const hub = new EventHub({ model, tickMs: 20 });
  // What the running job has left: the estimator's figure shrinks as it runs.
  let left = 30;
  const r = statusRoutes({ model, hub, adminToken: "", line: (seen) => placeInLine({ image: lock.imageLine(), llm: lock.llmLine() }, (ahead) => left + 10 * ahead, seen && identify(seen, parsed.rules).client) });
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", idleTimeout: 0, fetch: (req) => r(req, req.headers.get("x-peer") ?? "127.0.0.1") });
  const ctrl = new AbortController();
  try {
    const open = async (path: string, peer?: string) => {
      const res = await fetch(`http://127.0.0.1:${server.port}${path}`, { headers: peer ? { "x-peer": peer } : {}, signal: ctrl.signal });
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      const seen = { text: "" };
      void (async () => {
        for (;;) {
          const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
          if (done) return;
          seen.text += value;
        }
      })();
      return seen;
    };
    const events = (s: { text: string }, name: string) => [...s.text.matchAll(new RegExp(`^event: ${name}\\ndata: (.*)$`, "gm"))].map((m) => JSON.parse(m[1]!));
    const until = async (cond: () => boolean, what: string) => {
      const deadline = Date.now() + 10_000;
      while (!cond()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
        await Bun.sleep(5);
      }
    };
    const admin = await open("/turnstile/events");
    const bob = await open("/turnstile/events?client_id=bob-tab", "192.168.1.5");
    const stranger = await open("/turnstile/events", "192.168.1.9");
    await until(() => [admin, bob, stranger].every((s) => events(s, "status").length === 1), "three snapshots");
    expect(events(admin, "status")[0].line).toEqual([
      { client: "bob", class: "interactive", jobs: [{ job: 3, position: 1, estimate_s: 30 }], requests: [] },
      { client: "alice", class: "batch", jobs: [{ job: 1, position: 2, estimate_s: 40 }], requests: [] },
    ]);
    expect(events(bob, "status")[0].line).toEqual([{ client: "bob", class: "interactive", jobs: [{ job: 3, position: 1, estimate_s: 30 }], requests: [] }]);
    expect(events(stranger, "status")[0].line).toEqual([]);
    // The running job goes on: the estimate ages at the next tick, nobody having joined.
    left = 20;
    await until(() => events(admin, "line").length > 0 && events(bob, "line").length > 0, "the aged estimate");
    expect(events(bob, "line").at(-1)).toEqual({ line: [{ client: "bob", class: "interactive", jobs: [{ job: 3, position: 1, estimate_s: 20 }], requests: [] }] });
    expect(events(admin, "line").at(-1).line[1]).toEqual({ client: "alice", class: "batch", jobs: [{ job: 1, position: 2, estimate_s: 30 }], requests: [] });
    // A newcomer of alice's moves nobody ahead; bob's stream never names another client.
    void lock.acquireImage(undefined, { client: "alice", cls: "batch", tag: 2 });
    await until(() => JSON.stringify(events(admin, "line").at(-1)).includes('"job":2'), "alice's second job in the line");
    for (const s of [bob, stranger]) {
      expect(s.text).not.toContain("alice");
      expect(s.text).not.toContain("127.0.0.1");
    }
    expect(events(stranger, "line")).toEqual([]);
  } finally {
    ctrl.abort();
    server.stop(true);
    chat.release();
  }
});

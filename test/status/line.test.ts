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
  expect(placeInLine(entries, (ahead) => 10 * (ahead + 1))).toEqual([
    { client: "alice", class: "batch", jobs: [{ job: 11, position: 1, estimate_s: 10 }, { job: 12, position: 4, estimate_s: 40 }] },
    { client: "bob", class: "interactive", jobs: [{ job: 20, position: 2, estimate_s: 20 }] },
  ]);
});

test("a viewer who may not steer sees its own entries only, with their places among everyone's", () => {
  expect(placeInLine(entries, (ahead) => ahead, "bob")).toEqual([{ client: "bob", class: "interactive", jobs: [{ job: 20, position: 2, estimate_s: 1 }] }]);
  expect(placeInLine(entries, (ahead) => ahead, "carol")).toEqual([]);
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
    line: (seen) => placeInLine(lock.imageLine(), (ahead) => 5 * (ahead + 1), seen && identify(seen, parsed.rules).client),
  });
  const line = async (url: string, ip: string) => ((await (await r(new Request(url), ip)).json()) as { line: unknown }).line;
  // Bob's interactive job goes first: weight 4 against alice's 1.
  expect(await line("http://t/turnstile/status", "127.0.0.1")).toEqual([
    { client: "bob", class: "interactive", jobs: [{ job: 3, position: 1, estimate_s: 5 }] },
    { client: "alice", class: "batch", jobs: [{ job: 1, position: 2, estimate_s: 10 }, { job: 2, position: 3, estimate_s: 15 }] },
  ]);
  const bob = await line("http://t/turnstile/status?client_id=bob-tab-2", "192.168.1.5");
  expect(bob).toEqual([{ client: "bob", class: "interactive", jobs: [{ job: 3, position: 1, estimate_s: 5 }] }]);
  expect(JSON.stringify(bob)).not.toContain("alice");
  expect(await line("http://t/turnstile/status", "192.168.1.5")).toEqual([]);
  chat.release();
});

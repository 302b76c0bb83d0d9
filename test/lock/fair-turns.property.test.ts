/**
 * Property test of the lock with fair turns (issue 30): random schedules of named and anonymous
 * image jobs, chats and leases from clients of three classes (one of them giving way to chats),
 * with sessions on or off, random releases, session closes and aborts. After every step:
 *   - the card is in one state: no LLM slot while an image session or a lease holds it;
 *   - in a session a named client never has two jobs at once;
 *   - every call settles once, and an aborted waiter is never granted;
 *   - a waiting chat's place (llmLine: image jobs and leases ahead of its LLM turn) never rises
 *     while no image job or lease joins, and every one granted before the chat was counted in it;
 * and at the end, once every holder has let go, nothing is left waiting (no stall).
 *
 * Replay: FAIR_LOCK_SEED=<seed> FAIR_LOCK_RUNS=<n> npx bun test test/lock/fair-turns.property.test.ts
 */
import { expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import type { ImageLease, Lease } from "../../src/lock/index.ts";
import { mulberry32 } from "../support/prng.ts";
import { fakeClock, flush } from "./helpers.ts";

const BASE_SEED = Number(process.env.FAIR_LOCK_SEED ?? 0xfa17);
const RUNS = Number(process.env.FAIR_LOCK_RUNS ?? 300);

const CLIENTS = [
  { client: "alice", cls: "interactive" },
  { client: "bob", cls: "normal" },
  { client: "night", cls: "batch" },
];

interface Call {
  kind: "llm" | "image" | "lease";
  client?: string;
  ac: AbortController;
  settles: number;
  /** A waiting chat's place as last told (llmLine's `ahead`). */
  ahead?: number;
  lease?: Lease;
  rejected?: boolean;
  abortedAt?: number;
  closed?: boolean;
}

async function run(seed: number): Promise<void> {
  const rnd = mulberry32(seed);
  const clock = fakeClock();
  const sessions = rnd() < 0.7;
  const lock = new GpuLock({
    now: clock.now,
    imageSessionMaxMs: sessions ? 1 + Math.floor(rnd() * 200) : 0,
    turnClasses: [
      { name: "interactive", weight: 4 },
      { name: "normal", weight: 2 },
      { name: "batch", weight: 1, chatsFirst: true },
    ],
  });
  const calls: Call[] = [];
  let wholeGrants = 0;
  lock.onEvent((e) => {
    if (e.type === "acquired" && e.kind !== "llm") wholeGrants++;
  });
  const fail = (msg: string) => {
    throw new Error(`seed ${seed}: ${msg} (replay: FAIR_LOCK_SEED=${seed} FAIR_LOCK_RUNS=1)`);
  };
  const held = () => calls.filter((c) => c.lease && !c.closed);

  const check = () => {
    const h = held();
    const llm = h.filter((c) => c.kind === "llm").length;
    const images = h.filter((c) => c.kind === "image");
    const leases = h.filter((c) => c.kind === "lease").length;
    if (llm > 0 && (images.length > 0 || leases > 0)) fail(`${llm} LLM slots beside ${images.length} image jobs and ${leases} leases`);
    if (leases > 1 || (leases === 1 && images.length > 0)) fail("a lease shares the card");
    if (new Set(images.map((c) => (c.lease as ImageLease).sessionId)).size > 1) fail("two image sessions at once");
    const named = images.filter((c) => c.client !== undefined).map((c) => c.client);
    if (new Set(named).size !== named.length) fail(`a client has two jobs in one session: ${named.join(",")}`);
    for (const c of calls) if (c.settles > 1) fail("a call settled twice");
  };

  const ask = (kind: Call["kind"], who?: (typeof CLIENTS)[number]) => {
    const c: Call = { kind, client: who?.client, ac: new AbortController(), settles: 0 };
    calls.push(c);
    const tag = calls.length - 1;
    const p = kind === "llm" ? lock.acquireLLM(c.ac.signal, who && { ...who, tag }) : kind === "lease" ? lock.acquireLease(c.ac.signal) : lock.acquireImage(c.ac.signal, who);
    p.then(
      (l) => {
        c.settles++;
        if (c.abortedAt !== undefined) fail("an aborted waiter was granted");
        c.lease = l;
      },
      () => {
        c.settles++;
        c.rejected = true;
      },
    );
  };

  const release = (c: Call) => {
    c.closed = true;
    if (c.kind === "image") (c.lease as ImageLease).closeIfLast();
    c.lease!.release();
  };

  /**
   * Each waiting chat's place against the one told before: with nobody joining, it dropped by at
   * least the image jobs and leases granted meanwhile (so none went first uncounted).
   */
  const checkPlaces = (joined: boolean, granted: number) => {
    for (const e of lock.llmLine()) {
      const c = calls[e.tag!]!;
      if (!joined && c.ahead !== undefined && e.ahead + granted > c.ahead) fail(`a chat's place went from ${c.ahead} to ${e.ahead} with ${granted} granted and nobody joining`);
      c.ahead = e.ahead;
    }
  };

  for (let step = 0; step < 60; step++) {
    const r = rnd();
    const before = wholeGrants;
    let joined = false;
    if (r < 0.35) {
      const who = rnd() < 0.85 ? CLIENTS[Math.floor(rnd() * CLIENTS.length)] : undefined;
      ask("image", who);
      joined = true;
    } else if (r < 0.55) ask("llm", CLIENTS[Math.floor(rnd() * CLIENTS.length)]);
    else if (r < 0.58) {
      ask("lease");
      joined = true;
    }
    else if (r < 0.88) {
      const h = held();
      if (h.length > 0) release(h[Math.floor(rnd() * h.length)]!);
    } else if (r < 0.95) {
      const waiting = calls.filter((c) => c.settles === 0 && c.abortedAt === undefined);
      const c = waiting[Math.floor(rnd() * waiting.length)];
      if (c) {
        c.abortedAt = clock.now();
        c.ac.abort();
      }
    } else clock.advance(Math.floor(rnd() * 100));
    await flush();
    check();
    checkPlaces(joined, wholeGrants - before);
  }
  // Everyone lets go: whatever waits must be granted in turn, down to nothing.
  for (let round = 0; round < 500; round++) {
    const h = held();
    if (h.length === 0 && calls.every((c) => c.settles === 1)) break;
    const before = wholeGrants;
    for (const c of h) release(c);
    clock.advance(50);
    await flush();
    check();
    checkPlaces(false, wholeGrants - before);
  }
  const stuck = calls.filter((c) => c.settles === 0);
  if (stuck.length > 0) fail(`${stuck.length} waiter(s) never granted: ${stuck.map((c) => `${c.kind}${c.client ? `:${c.client}` : ""}`).join(", ")}; ${JSON.stringify(lock.snapshot())}`);
  expect(lock.state).toBe("idle");
}

test("random schedules with named clients of three classes: one state at a time, one job per client in a session, nothing stuck", async () => {
  for (let i = 0; i < RUNS; i++) await run(BASE_SEED + i);
}, 30_000);

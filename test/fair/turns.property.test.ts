/**
 * Property tests of the fair-turns scheduler (issue 30) on a virtual clock: random arrival traces
 * (bursts of 20–50 jobs, single jobs every few seconds, in half of them clients that give up), one server taking
 * one job at a time with random service times, and after every event:
 *   - no waiter is taken later than its bound, counted in turns: it waits behind at most
 *     k + Σ ⌈(k+2)·w_d / w⌉ others (k: its own client's jobs ahead when it joined, w its class's
 *     weight, the sum over every other client d of the trace), whatever the better classes do;
 *   - fair share: in any stretch of turns in which two clients of a class both have jobs waiting,
 *     their numbers of turns differ by at most ε = 2 (each client's next finish is within two steps
 *     of the virtual time, one for its turn this round and one for the job it just had; traces without give-ups: a job given up leaves
 *     its slot empty rather than move its client's later jobs past others);
 *   - a waiter's position and estimate never rise while nobody joins ahead of it.
 *
 * Replay: FAIR_PROP_SEED=<seed> FAIR_PROP_RUNS=<n> npx bun test test/fair
 */
import { expect, test } from "bun:test";
import { FairTurns, type TurnClass, type Waiter } from "../../src/fair/turns.ts";
import { mulberry32 } from "../support/prng.ts";

const BASE_SEED = Number(process.env.FAIR_PROP_SEED ?? 0xfa1e);
const RUNS = Number(process.env.FAIR_PROP_RUNS ?? 100);
const EPSILON = 2;

interface Job extends Waiter {
  readonly at: number;
  /** What the estimate assumes it costs, and what it really takes. */
  readonly expectedMs: number;
  readonly actualMs: number;
  readonly giveUpAt: number;
}

interface Record {
  job: Job;
  /**
   * Own client's jobs ahead when it joined: those not yet taken that joined since the client last
   * had nothing waiting (one that gave up still holds its tag, see FairTurns.remove).
   */
  k: number;
  /** Turn number when it joined, and when it was taken. */
  joinedTurn: number;
  takenTurn?: number;
}

class Violation extends Error {}
function check(cond: boolean, msg: () => string): asserts cond {
  if (!cond) throw new Violation(msg());
}

function trace(rnd: () => number, classes: readonly string[], giveUps: boolean) {
  const clients = 2 + Math.floor(rnd() * 5);
  const jobs: Omit<Job, "id">[] = [];
  for (let c = 0; c < clients; c++) {
    const client = `c${c}`;
    const cls = classes[Math.floor(rnd() * classes.length)]!;
    const style = rnd();
    const add = (at: number) => {
      const expectedMs = 1000 + Math.floor(rnd() * 4000);
      const actualMs = Math.max(1, Math.floor(expectedMs * (0.3 + rnd() * 1.4)));
      const giveUpAt = giveUps && rnd() < 0.1 ? at + Math.floor(rnd() * 60_000) : Infinity;
      jobs.push({ client, cls, at, expectedMs, actualMs, giveUpAt });
    };
    if (style < 0.4) {
      // A batch: many at once, maybe twice.
      for (let b = 0; b < 1 + Math.floor(rnd() * 2); b++) {
        const at = Math.floor(rnd() * 60_000);
        for (let i = 0, n = 20 + Math.floor(rnd() * 30); i < n; i++) add(at);
      }
    } else {
      // One job every few seconds.
      for (let at = Math.floor(rnd() * 5000); at < 200_000; at += 1000 + Math.floor(rnd() * 8000)) add(at);
    }
  }
  jobs.sort((a, b) => a.at - b.at);
  return { clients, jobs: jobs.map((j, i): Job => ({ ...j, id: i + 1 })) };
}

function run(seed: number, weights: readonly TurnClass[], giveUps: boolean): void {
  const rnd = mulberry32(seed);
  const classes = weights.map((c) => c.name);
  const weightOf = (cls: string) => weights.find((c) => c.name === cls)!.weight;
  const { jobs } = trace(rnd, classes, giveUps);
  const turns = new FairTurns<Job>(weights);
  const records = new Map<number, Record>();
  const streaks = new Map<string, Job[]>();
  const takenIds = new Set<number>();
  /** Turns in order, and jobs given up (where a stretch of fair shares ends). */
  const taken: { client: string; backlogged: Set<string>; gaveUp?: true }[] = [];
  let now = 0;
  let running: { job: Job; startedAt: number } | undefined;
  let next = 0;
  let previous = new Map<number, { position: number; estimateMs: number }>();

  const waitingOf = (client: string) => turns.entries().filter((e) => e.client === client).length;
  const line = () => {
    const left = running ? running.startedAt + running.job.expectedMs - now : 0;
    return new Map(turns.line(left, (e) => e.expectedMs).map((p) => [p.entry.id, p]));
  };
  const after = (joined: Job | undefined) => {
    const current = line();
    for (const [id, before] of previous) {
      const place = current.get(id);
      if (!place) continue;
      if (joined && current.get(joined.id)!.position < place.position) continue;
      check(place.position <= before.position, () => `seed ${seed}: job ${id}'s position rose ${before.position} → ${place.position} at ${now}`);
      check(place.estimateMs <= before.estimateMs, () => `seed ${seed}: ${joined ? "join" : running?.startedAt === now ? "turn" : "leave/done"}: job ${id}'s estimate rose ${before.estimateMs} → ${place.estimateMs} at ${now}`);
    }
    previous = current;
  };
  const serve = () => {
    if (running) return;
    const backlogged = new Set(turns.entries().map((e) => e.client));
    const job = turns.take();
    if (!job) return;
    taken.push({ client: job.client, backlogged });
    records.get(job.id)!.takenTurn = taken.length;
    takenIds.add(job.id);
    running = { job, startedAt: now };
  };

  for (;;) {
    const arrival = jobs[next]?.at ?? Infinity;
    const done = running ? running.startedAt + running.job.actualMs : Infinity;
    let giveUp: Job | undefined;
    for (const e of turns.entries()) if (e.giveUpAt < (giveUp?.giveUpAt ?? Infinity)) giveUp = e;
    const t = Math.min(arrival, done, giveUp?.giveUpAt ?? Infinity);
    if (t === Infinity) break;
    now = t;
    if (t === done) {
      running = undefined;
      serve();
      after(undefined);
    } else if (t === arrival) {
      const job = jobs[next++]!;
      if (waitingOf(job.client) === 0) streaks.set(job.client, []);
      const streak = streaks.get(job.client)!;
      records.set(job.id, { job, k: streak.filter((j) => !takenIds.has(j.id)).length, joinedTurn: taken.length });
      streak.push(job);
      turns.add(job);
      serve();
      after(job);
    } else {
      taken.push({ client: giveUp!.client, backlogged: new Set(turns.entries().map((e) => e.client)), gaveUp: true });
      check(turns.remove(giveUp!.id), () => `seed ${seed}: job ${giveUp!.id} was not waiting`);
      records.delete(giveUp!.id);
      after(undefined);
    }
  }

  check(turns.size === 0, () => `seed ${seed}: ${turns.size} left waiting`);
  const classOf = new Map(jobs.map((j) => [j.client, j.cls]));
  for (const r of records.values()) {
    const ahead = taken.slice(r.joinedTurn, r.takenTurn! - 1).filter((t) => !t.gaveUp).length;
    let bound = r.k;
    for (const [d, cls] of classOf) if (d !== r.job.client) bound += Math.ceil(((r.k + 2) * weightOf(cls)) / weightOf(r.job.cls));
    check(ahead <= bound, () => `seed ${seed}: job ${r.job.id} (${r.job.client}, ${r.job.cls}, k=${r.k}) waited ${ahead} turns, bound ${bound}`);
  }
  // Fair share: every maximal stretch of turns in which both clients of a pair were backlogged.
  // Only without give-ups: a job given up leaves its slot empty, and its client's later jobs keep
  // their places rather than pass others (so that no place told ever rises).
  if (giveUps) return;
  const byClass = new Map(jobs.map((j) => [j.client, j.cls]));
  const names = [...byClass.keys()];
  for (const a of names)
    for (const b of names) {
      if (a >= b || byClass.get(a) !== byClass.get(b)) continue;
      let diff = 0;
      for (const t of taken) {
        if (!t.backlogged.has(a) || !t.backlogged.has(b)) {
          diff = 0;
          continue;
        }
        diff += t.client === a ? 1 : t.client === b ? -1 : 0;
        check(Math.abs(diff) <= EPSILON, () => `seed ${seed}: ${a} and ${b} both waiting, turns differ by ${diff}`);
      }
    }
}

function runMany(weights: readonly TurnClass[]): void {
  for (let i = 0; i < RUNS; i++) {
    try {
      run(BASE_SEED + i, weights, i % 2 === 0);
    } catch (err) {
      if (err instanceof Violation) throw new Error(`${err.message} (replay: FAIR_PROP_SEED=${BASE_SEED + i} FAIR_PROP_RUNS=1)`);
      throw err;
    }
  }
}

const THREE = [
  { name: "interactive", weight: 4 },
  { name: "normal", weight: 2 },
  { name: "batch", weight: 1 },
];

// Pure and quick alone (1–2 s); the bound leaves room for a machine shared by other test runs.
test("one class: bounded waits, fair shares within ε, places that never rise", () => {
  runMany([{ name: "normal", weight: 1 }]);
}, 30_000);

test("three classes: no class starves, shares within a class stay fair, places never rise", () => {
  runMany(THREE);
}, 30_000);

test("weights far apart (100:1): the batch class still gets its turns", () => {
  runMany([
    { name: "interactive", weight: 100 },
    { name: "batch", weight: 1 },
  ]);
}, 30_000);

test("a client's single job waits behind at most one job of each other client of its class", () => {
  const turns = new FairTurns<Waiter>([{ name: "normal", weight: 2 }]);
  let id = 0;
  for (let i = 0; i < 50; i++) turns.add({ id: ++id, client: "batcher", cls: "normal" });
  turns.take();
  for (let i = 0; i < 5; i++) turns.add({ id: ++id, client: "other", cls: "normal" });
  turns.add({ id: ++id, client: "single", cls: "normal" });
  const order = turns.line(0, () => 1).map((p) => p.entry.client);
  expect(order.slice(0, 3).sort()).toEqual(["batcher", "other", "single"]);
  expect(order.indexOf("single")).toBeLessThan(3);
});

test("a better class goes first and gets turns in proportion to its weight; the worse one still gets its own", () => {
  const turns = new FairTurns<Waiter>(THREE);
  let id = 0;
  for (let i = 0; i < 3; i++) turns.add({ id: ++id, client: "night-job", cls: "batch" });
  for (let i = 0; i < 9; i++) turns.add({ id: ++id, client: "alice", cls: "interactive" });
  const order = turns.line(0, () => 1).map((p) => p.entry.cls[0]);
  expect(order.join("")).toBe("iiibiiiibiib");
});

test("a waiter that gives up moves no one: its turn goes to whoever is next", () => {
  const turns = new FairTurns<Waiter>([{ name: "normal", weight: 1 }]);
  turns.add({ id: 1, client: "a", cls: "normal" });
  turns.add({ id: 2, client: "a", cls: "normal" });
  turns.add({ id: 3, client: "b", cls: "normal" });
  turns.add({ id: 4, client: "b", cls: "normal" });
  expect(turns.line(0, () => 1).map((p) => p.entry.id)).toEqual([1, 3, 2, 4]);
  turns.remove(1);
  expect(turns.line(0, () => 1).map((p) => p.entry.id)).toEqual([3, 2, 4]);
  // A client whose latest job gave up: its next one starts where that one started.
  turns.remove(2);
  turns.add({ id: 5, client: "a", cls: "normal" });
  expect(turns.line(0, () => 1).map((p) => p.entry.id)).toEqual([3, 4, 5]);
});

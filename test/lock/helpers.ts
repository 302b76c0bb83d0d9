import { GpuLock } from "../../src/lock/index.ts";
import type { LockEvent } from "../../src/lock/index.ts";

/** A clock the test moves by hand. */
export function fakeClock(start = 0) {
  let t = start;
  return {
    now: () => t,
    advance(ms: number) {
      t += ms;
    },
  };
}

/** Lets pending promise reactions run (grants resolve a microtask after they are decided). */
export async function flush(rounds = 4): Promise<void> {
  for (let i = 0; i < rounds; i++) await null;
}

export type Tracked<T> =
  | { status: "pending"; settles: number }
  | { status: "resolved"; value: T; settles: number }
  | { status: "rejected"; reason: unknown; settles: number };

/** Observes a promise without awaiting it; `settles` counts how often a reaction ran. */
export function track<T>(p: Promise<T>): { readonly current: Tracked<T> } {
  const box: { current: Tracked<T> } = { current: { status: "pending", settles: 0 } };
  p.then(
    (value) => {
      box.current = { status: "resolved", value, settles: box.current.settles + 1 };
    },
    (reason: unknown) => {
      box.current = { status: "rejected", reason, settles: box.current.settles + 1 };
    },
  );
  return box;
}

/** A lock on a fake clock with every event recorded. */
export function setup(opts: { imageSessionMaxMs?: number } = {}) {
  const clock = fakeClock(1000);
  const lock = new GpuLock({ now: clock.now, ...opts });
  const events: LockEvent[] = [];
  lock.onEvent((e) => events.push(e));
  const transitions = () => events.flatMap((e) => (e.type === "transition" ? [`${e.from}->${e.to}`] : []));
  return { lock, clock, events, transitions };
}

/** Resolves a granted promise or fails the test if it is not granted within a few microtasks. */
export async function granted<T>(p: Promise<T>): Promise<T> {
  const t = track(p);
  await flush();
  const c = t.current;
  if (c.status !== "resolved") throw new Error(`expected a grant, promise is ${c.status}`);
  return c.value;
}

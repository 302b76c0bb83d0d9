/** A GPU lease kept across a restart, through Steering with a fake clock and an in-memory store (no sockets). */
import { expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import type { StoredLease } from "../../src/status/steer.ts";
import { bareSteering } from "./helpers.ts";

function steering(now: () => number) {
  const kept: (StoredLease | null)[] = [];
  const lines: string[] = [];
  const events: string[] = [];
  const lock = new GpuLock();
  const s = bareSteering(lock, undefined, {
    log: { warn: (m) => lines.push(`WARN ${m}`), notice: (m) => lines.push(m) },
    onLease: (e) => events.push(e.event),
    store: { save: (l) => kept.push(l) },
    now,
  });
  return { s, lock, kept, lines, events };
}

const LEASE: StoredLease = { id: "L1", holder: "train.py", by: "127.0.0.1", since: 0, expires_at: 30_000, ttl_ms: 30_000 };

test("every grant and renewal is kept, an end removes it, a shutdown keeps it without announcing an end", async () => {
  const t = steering(() => 1000);
  const v = await t.s.take("train.py", 10_000, "127.0.0.1", new AbortController().signal);
  expect(t.kept.at(-1)).toMatchObject({ id: v.id, expires_at: 11_000, ttl_ms: 10_000 });
  t.s.renew(v.id, 20_000);
  expect(t.kept.at(-1)).toMatchObject({ id: v.id, expires_at: 21_000, ttl_ms: 20_000 });
  t.s.giveBack(v.id);
  expect(t.kept.at(-1)).toBeNull();

  const w = await t.s.take("game", 10_000, "127.0.0.1", new AbortController().signal);
  const before = t.kept.length;
  t.s.stop();
  expect(t.kept.length).toBe(before);
  // No `end` goes out: a follower of the event stream (lease -- cmd) must not stop its command.
  expect(t.events).toEqual(["grant", "renew", "end", "grant"]);
  expect(t.lines.at(-1)).toBe('GPU lease of "game" is kept for the next start, until its TTL');
  expect(w.id).not.toBe(v.id);
});

test("taken again with its id, holder and expiry; renewed by that id with its TTL", async () => {
  const t = steering(() => 10_000);
  await t.s.restore(LEASE);
  expect(t.lock.state).toBe("lease");
  expect(t.s.current()).toMatchObject({ id: "L1", holder: "train.py", expires_at: 30_000 });
  expect(t.s.renew("L1").expires_at).toBe(40_000);
});

test("an expiry beyond LEASE_MAX_TTL is brought within it; an expired lease is dropped and forgotten", async () => {
  const far = steering(() => 0);
  await far.s.restore({ ...LEASE, expires_at: 10 * 3_600_000, ttl_ms: 10 * 3_600_000 });
  expect(far.s.current()!.expires_at).toBe(60_000);
  expect(far.s.renew("L1").expires_at).toBe(60_000);

  const late = steering(() => 30_000);
  await late.s.restore(LEASE);
  expect(late.lock.state).toBe("idle");
  expect(late.s.current()).toBeNull();
  expect(late.kept).toEqual([null]);
  expect(late.lines).toEqual(['WARN GPU lease of "train.py" expired while gpu-turnstile was down: dropped']);
});

test("a lease capped at start stays capped: the cap is kept, so it ends at its first capped expiry across any number of restarts", async () => {
  // A file with an expiry ten hours out; LEASE_MAX_TTL is one minute. Restarts every 20 s after.
  let now = 0;
  let file: StoredLease | null = { ...LEASE, expires_at: 10 * 3_600_000, ttl_ms: 10 * 3_600_000 };
  const restart = async () => {
    const t = steering(() => now);
    await t.s.restore(file!);
    if (t.kept.length > 0) file = t.kept.at(-1)!;
    t.s.stop();
    return t;
  };
  const first = await restart();
  expect(file).toMatchObject({ id: "L1", expires_at: 60_000, ttl_ms: 60_000 });
  expect(first.lines[0]).toContain("capped by LEASE_MAX_TTL");
  for (now = 20_000; now < 60_000; now += 20_000) {
    const t = await restart();
    expect(t.s.current()).toBeNull(); // stopped
    expect(file!.expires_at).toBe(60_000);
  }
  now = 60_000;
  const last = await restart();
  expect(last.lock.state).toBe("idle");
  expect(file).toBeNull();
});

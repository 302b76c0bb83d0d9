/**
 * Why each waiter waits, in words an operator reads at a glance: behind which image job, a lease,
 * chats, or chats still draining. Pure: given what holds the card and the waiters in the order the
 * lock will grant them (inLockOrder: image jobs and leases in fair turns, each chat at its LLM
 * turn), each waits behind the one before it.
 */
import type { GpuState } from "../lock/index.ts";
import type { LockLines } from "./line.ts";

export interface CardHolders {
  state: GpuState;
  /** LLM requests holding a slot. */
  llmHolding: number;
  /** The image job the session is on (the one ComfyUI runs, else its oldest). */
  imageJob: number | null;
  /** The lease's holder, while one is held. */
  lease: string | null;
}

/** `id`: the LLM request's number (the lock's llmLine tag). */
export type WaiterKey = { kind: "llm"; id: number } | { kind: "image"; job: number } | { kind: "lease"; holder: string };

const behind = (w: WaiterKey): string => (w.kind === "image" ? `behind image job ${w.job} (waiting too)` : w.kind === "lease" ? `behind a queued lease (${JSON.stringify(w.holder)})` : "behind a chat");

function holderReason(card: CardHolders): string | undefined {
  if (card.state === "lease") return `a lease holds the card (${JSON.stringify(card.lease ?? "?")})`;
  if (card.state === "image") return card.imageJob === null ? "an image session holds the card" : `behind image job ${card.imageJob}`;
  return undefined;
}

/**
 * The waiters, given oldest first, in the order the lock will grant them: image jobs and leases in
 * its line's order, each chat at its LLM turn (after `ahead` of them; chats of one turn oldest
 * first). Image jobs the line names by number are found by it; its image jobs that name none and
 * its leases are matched oldest first (first come, first served among themselves). Waiters the
 * lock does not hold yet (a request still reading its body) go last, oldest first.
 */
export function inLockOrder<T extends { key: WaiterKey }>(waiters: readonly T[], lines: LockLines): T[] {
  const byJob = new Map<number, number>();
  const unnamed: number[] = [];
  const leases: number[] = [];
  lines.image.forEach((e, i) => {
    if (e.kind === "lease") leases.push(i);
    else if (e.tag === undefined) unnamed.push(i);
    else byJob.set(e.tag, i);
  });
  const turns = new Map<number, number>();
  for (const e of lines.llm) if (e.tag !== undefined) turns.set(e.tag, e.ahead - 0.5);
  let u = 0;
  let l = 0;
  const rank = new Map<T, number>();
  for (const w of waiters) {
    const k = w.key;
    const r = k.kind === "llm" ? turns.get(k.id) : k.kind === "lease" ? leases[l++] : (byJob.get(k.job) ?? unnamed[u++]);
    rank.set(w, r ?? Infinity);
  }
  return [...waiters].sort((a, b) => {
    const ra = rank.get(a)!;
    const rb = rank.get(b)!;
    return ra === rb ? 0 : ra - rb;
  });
}

/** One reason per waiter, in the order given (the lock's: inLockOrder). */
export function waitReasons(card: CardHolders, waiters: readonly WaiterKey[]): string[] {
  const held = holderReason(card);
  let before: WaiterKey | undefined;
  let lastWhole: WaiterKey | undefined;
  return waiters.map((w) => {
    // Chats of one LLM turn are granted together: each waits for the last whole-card waiter ahead.
    if (w.kind === "llm") {
      before = w;
      return lastWhole ? behind(lastWhole) : (held ?? "waiting for a free slot");
    }
    const ahead = before;
    before = lastWhole = w;
    if (ahead) return behind(ahead);
    if (held) return held;
    if (card.llmHolding > 0) return `draining chats (${card.llmHolding} in flight)`;
    return "the card is being handed over";
  });
}

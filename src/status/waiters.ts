/**
 * Why each waiter waits, in words an operator reads at a glance: behind which image job, a lease,
 * or chats still draining. Pure: given what holds the card and the waiters oldest first, it
 * follows the lock's order (image jobs and leases queue together, first come first served; an LLM
 * request waits while anything holds or waits for the whole card).
 */
import type { GpuState } from "../lock/index.ts";

export interface CardHolders {
  state: GpuState;
  /** LLM requests holding a slot. */
  llmHolding: number;
  /** The image job the session is on (the one ComfyUI runs, else its oldest). */
  imageJob: number | null;
  /** The lease's holder, while one is held. */
  lease: string | null;
}

export type WaiterKey = { kind: "llm" } | { kind: "image"; job: number } | { kind: "lease"; holder: string };

const behind = (w: WaiterKey): string => (w.kind === "image" ? `behind image job ${w.job} (waiting too)` : w.kind === "lease" ? `behind a queued lease (${JSON.stringify(w.holder)})` : "behind a chat");

function holderReason(card: CardHolders): string | undefined {
  if (card.state === "lease") return `a lease holds the card (${JSON.stringify(card.lease ?? "?")})`;
  if (card.state === "image") return card.imageJob === null ? "an image session holds the card" : `behind image job ${card.imageJob}`;
  return undefined;
}

/** One reason per waiter, in the order given (oldest first). */
export function waitReasons(card: CardHolders, waiters: readonly WaiterKey[]): string[] {
  const held = holderReason(card);
  const firstWhole = waiters.find((w) => w.kind !== "llm");
  let lastWhole: WaiterKey | undefined;
  return waiters.map((w) => {
    if (w.kind === "llm") return held ?? (firstWhole ? behind(firstWhole) : "waiting for a free slot");
    const before = lastWhole;
    lastWhole = w;
    if (before) return behind(before);
    if (held) return held;
    if (card.llmHolding > 0) return `draining chats (${card.llmHolding} in flight)`;
    return "the card is being handed over";
  });
}

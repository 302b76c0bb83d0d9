/**
 * Scenario 9: several cards. The same mixed workload — a burst of image jobs from separate
 * clients while chats keep arriving — on one card (clients talk to its turnstile) and on two cards
 * behind a real HAProxy run from the shipped recipe (deploy/haproxy.cfg); each card is its own
 * simulated GPU with its own Ollama, ComfyUI and turnstile. Like scenario 7 it measures the workload, not the proxy's CPU: the
 * simulators and turnstiles run in this process, HAProxy in its own, every time on one clock.
 */
import { findHaproxy, startHaproxy } from "../../src/demo/haproxy.ts";
import { now } from "../../src/sim/clock.ts";
import { startSimPair, type SimPair } from "../../src/sim/index.ts";
import type { Turnstile } from "../../src/turnstile.ts";
import { readiness } from "../../src/balance/readiness.ts";
import { median, percentile } from "../lib/stats.ts";
import { startWorkloadTurnstile, timedChat } from "../lib/workload.ts";
import type { SessionWorkload } from "./sessions.ts";
import { DEFAULT_WORKFLOW } from "./handoff.ts";

/** The same shape as scenario 7's: a burst of image jobs among chats arriving throughout. */
export type CardsWorkload = SessionWorkload;

export interface CardsRow {
  cards: number;
  /** Medians over the rounds. */
  imageMakespanMs: number;
  /** Images per minute: images / (burst → last image finished). */
  imagesPerMin: number;
  p95ChatWaitMs: number;
  /** Chats that began waiting at a card while another card admitted chats at once (goal: 0); most over the rounds. */
  chatsWaitingBesideFreeCard: number;
  /** Chats refused with 503 because every card turned busy within one HAProxy check; most over the rounds. */
  chatsRefused: number;
  /** Every round: all images done, every chat answered (or refused with 503), 0 overlaps on every card. */
  complete: boolean;
}

interface Round {
  imageMakespanMs: number;
  p95ChatWaitMs: number;
  besideFree: number;
  refused: number;
  complete: boolean;
}

interface Card {
  sims: SimPair;
  t: Turnstile;
  /** Whether the card admitted chats at once (its /readyz?class=llm), from each change on (sim clock). */
  ready: { at: number; ready: boolean }[];
}

/** How often the cards' readiness is sampled: an image job that waits changes it without a lock event. */
const SAMPLE_MS = 5;

async function startCard(w: CardsWorkload, name: string): Promise<Card> {
  const sims = await startSimPair({
    ollama: { loadMs: 300, unloadMs: 100, tokenDelayMs: 20, tokens: 20 },
    comfy: { jobMs: w.jobMs, loadMs: w.loadMs, freeDelayMs: w.freeDelayMs },
  });
  const t = startWorkloadTurnstile(sims, { CARD_NAME: name });
  await t.probed;
  return { sims, t, ready: [] };
}

function sample(card: Card): void {
  const ready = readiness(card.t.lock.snapshot(), "up").ready;
  if (card.ready.at(-1)?.ready !== ready) card.ready.push({ at: now(), ready });
}

/** Was `card` admitting chats at once at `at`? */
function free(card: Card, at: number): boolean {
  let ready = false;
  for (const s of card.ready) {
    if (s.at > at) break;
    ready = s.ready;
  }
  return ready;
}

async function runRound(w: CardsWorkload, haproxyPath: string, n: number): Promise<Round> {
  const cards: Card[] = [];
  for (let i = 0; i < n; i++) cards.push(await startCard(w, `card${i + 1}`));
  // Each chat that waited at a card: when it began waiting, and where.
  const waits: { card: number; at: number }[] = [];
  cards.forEach((c, i) =>
    c.t.lock.onEvent((e) => {
      if (e.type === "acquired" && e.kind === "llm" && e.waitedMs > 5) waits.push({ card: i, at: now() - e.waitedMs });
    }),
  );
  const host = (u: string) => new URL(u).host;
  const only = { ollama: cards[0]!.t.listener("ollama")!.url, comfy: cards[0]!.t.listener("comfy")!.url, stop: async () => {} };
  const lb = n === 1 ? only : await startHaproxy(haproxyPath, cards.map((c) => ({ ollama: host(c.t.listener("ollama")!.url), comfy: host(c.t.listener("comfy")!.url) })));
  for (const c of cards) sample(c);
  const sampler = setInterval(() => cards.forEach(sample), SAMPLE_MS);
  try {
    const t0 = now();
    const at = (ms: number) => Bun.sleep(Math.max(0, t0 + ms - now()));
    const chat = async (i: number) => {
      await at(i * w.chatEveryMs);
      return timedChat(lb.ollama);
    };
    // Separate clients (their own client_id), as several users or a SwarmUI with several backends.
    const image = async (i: number): Promise<boolean> => {
      await at(w.burstAtMs);
      const res = await fetch(`${lb.comfy}/prompt`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: DEFAULT_WORKFLOW, client_id: `bench-client-${i}`, prompt_id: crypto.randomUUID() }),
      });
      await res.text();
      return res.status === 200;
    };
    const [chats, images] = await Promise.all([
      Promise.all(Array.from({ length: w.chats }, (_, i) => chat(i))),
      Promise.all(Array.from({ length: w.images }, (_, i) => image(i))),
    ]);
    await Promise.all(cards.map((c) => c.t.whenIdle()));
    const jobs = cards.flatMap((c) => c.sims.comfy.jobs());
    const answered = chats.filter((c) => c.status === 200);
    const lastImage = Math.max(...jobs.map((j) => j.endedAt ?? Number.POSITIVE_INFINITY));
    return {
      imageMakespanMs: lastImage - (t0 + w.burstAtMs),
      p95ChatWaitMs: percentile(answered.map((c) => c.waitMs), 95),
      besideFree: waits.filter((x) => cards.some((c, i) => i !== x.card && free(c, x.at))).length,
      refused: chats.length - answered.length,
      complete:
        chats.every((c) => c.status === 200 || c.status === 503) && images.every(Boolean) && jobs.length === w.images && jobs.every((j) => j.state === "done") && cards.every((c) => c.sims.gpu.overlaps().length === 0),
    };
  } finally {
    clearInterval(sampler);
    await lb.stop();
    for (const c of cards) {
      await c.t.stop(1000);
      await c.sims.stop();
    }
  }
}

/** Undefined when haproxy is not installed (the caller notes the skip). */
export async function cards(w: CardsWorkload, note: (s: string) => void): Promise<CardsRow[] | undefined> {
  const haproxy = findHaproxy();
  if (!haproxy) return undefined;
  const rows: CardsRow[] = [];
  for (const n of [1, 2]) {
    const rounds: Round[] = [];
    for (let r = 0; r < w.rounds; r++) rounds.push(await runRound(w, haproxy.path, n));
    const m = (pick: (x: Round) => number) => median(rounds.map(pick));
    const makespan = m((x) => x.imageMakespanMs);
    const row: CardsRow = {
      cards: n,
      imageMakespanMs: makespan,
      imagesPerMin: (w.images / makespan) * 60_000,
      p95ChatWaitMs: m((x) => x.p95ChatWaitMs),
      chatsWaitingBesideFreeCard: Math.max(...rounds.map((x) => x.besideFree)),
      chatsRefused: Math.max(...rounds.map((x) => x.refused)),
      complete: rounds.every((x) => x.complete),
    };
    note(
      `  ${n} card(s): image makespan ${(row.imageMakespanMs / 1000).toFixed(2)} s, ${row.imagesPerMin.toFixed(1)} images/min, p95 chat wait ${(row.p95ChatWaitMs / 1000).toFixed(2)} s, ${row.chatsWaitingBesideFreeCard} chats waited beside a free card, ${row.chatsRefused} refused${row.complete ? "" : " (INCOMPLETE)"}`,
    );
    rows.push(row);
  }
  return rows;
}

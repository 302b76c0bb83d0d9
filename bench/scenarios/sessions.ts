/**
 * Scenario 7: image sessions on a mixed workload, turnstile only. A burst of image jobs arrives
 * while chats keep arriving throughout; the same workload runs with IMAGE_SESSION_MAX=0 (one job
 * per GPU cycle) and with the default, side by side. It measures the workload, not the proxy's
 * CPU: the simulators' timings stand for a real card scaled down (a cold checkpoint load half a
 * job long, as SDXL's is against a 5–10 s picture), so the simulators and the turnstile run in
 * this process and every time is read from one clock.
 */
import { now } from "../../src/sim/clock.ts";
import { startSimPair } from "../../src/sim/index.ts";
import { median } from "../lib/stats.ts";
import { startWorkloadTurnstile, timedChat } from "../lib/workload.ts";
import { DEFAULT_WORKFLOW } from "./handoff.ts";

export interface SessionWorkload {
  images: number;
  /** When the burst of image jobs arrives, after the first chat (ms). */
  burstAtMs: number;
  chats: number;
  chatEveryMs: number;
  jobMs: number;
  loadMs: number;
  freeDelayMs: number;
  rounds: number;
}

export interface SessionRow {
  imageSessionMax: string;
  /** Medians over the rounds. */
  makespanMs: number;
  checkpointLoads: number;
  frees: number;
  longestLlmWaitMs: number;
  /** Every round: all images done and all chats answered. */
  complete: boolean;
}

interface Round {
  makespanMs: number;
  checkpointLoads: number;
  frees: number;
  longestLlmWaitMs: number;
  complete: boolean;
}

async function runRound(w: SessionWorkload, imageSessionMax: string): Promise<Round> {
  const sims = await startSimPair({
    ollama: { loadMs: 300, unloadMs: 100, tokenDelayMs: 20, tokens: 20 },
    comfy: { jobMs: w.jobMs, loadMs: w.loadMs, freeDelayMs: w.freeDelayMs },
  });
  const t = startWorkloadTurnstile(sims, { IMAGE_SESSION_MAX: imageSessionMax });
  try {
    await t.probed;
    const ollama = t.listener("ollama")!.url;
    const comfy = t.listener("comfy")!.url;
    const t0 = now();
    const at = (ms: number) => Bun.sleep(Math.max(0, t0 + ms - now()));

    const chat = async (i: number): Promise<{ ok: boolean; waitMs: number; end: number }> => {
      await at(i * w.chatEveryMs);
      const r = await timedChat(ollama);
      return { ok: r.status === 200, waitMs: r.waitMs, end: r.end };
    };
    const image = async (i: number): Promise<boolean> => {
      await at(w.burstAtMs);
      const res = await fetch(`${comfy}/prompt`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: DEFAULT_WORKFLOW, prompt_id: crypto.randomUUID() }),
      });
      await res.text();
      return res.status === 200;
    };
    const [chats, images] = await Promise.all([
      Promise.all(Array.from({ length: w.chats }, (_, i) => chat(i))),
      Promise.all(Array.from({ length: w.images }, (_, i) => image(i))),
    ]);
    await t.whenIdle();
    const jobs = sims.comfy.jobs();
    const lastImage = Math.max(...jobs.map((j) => j.endedAt ?? Number.POSITIVE_INFINITY));
    const lastChat = Math.max(...chats.map((c) => c.end));
    return {
      makespanMs: Math.max(lastImage, lastChat) - t0,
      checkpointLoads: sims.comfy.checkpointLoads(),
      frees: sims.comfy.calls.filter((c) => c.path === "/free").length,
      longestLlmWaitMs: Math.max(...chats.map((c) => c.waitMs)),
      complete: chats.every((c) => c.ok) && images.every(Boolean) && jobs.length === w.images && jobs.every((j) => j.state === "done") && sims.gpu.overlaps().length === 0,
    };
  } finally {
    await t.stop(1000);
    await sims.stop();
  }
}

export async function sessions(w: SessionWorkload, note: (s: string) => void): Promise<SessionRow[]> {
  const rows: SessionRow[] = [];
  for (const max of ["0", "5m"]) {
    const rounds: Round[] = [];
    for (let r = 0; r < w.rounds; r++) rounds.push(await runRound(w, max));
    const m = (pick: (x: Round) => number) => median(rounds.map(pick));
    const row: SessionRow = {
      imageSessionMax: max,
      makespanMs: m((x) => x.makespanMs),
      checkpointLoads: m((x) => x.checkpointLoads),
      frees: m((x) => x.frees),
      longestLlmWaitMs: m((x) => x.longestLlmWaitMs),
      complete: rounds.every((x) => x.complete),
    };
    note(`  IMAGE_SESSION_MAX=${max}: makespan ${(row.makespanMs / 1000).toFixed(2)} s, ${row.checkpointLoads} checkpoint loads, ${row.frees} /free, longest LLM wait ${(row.longestLlmWaitMs / 1000).toFixed(2)} s${row.complete ? "" : " (INCOMPLETE)"}`);
    rows.push(row);
  }
  return rows;
}

/**
 * Fair turns (issue 30): one client queues 50 images while another sends one image and a chat
 * every few seconds. The second client's waits — its image's wait for ComfyUI to start it, its
 * chat's time to the first byte — first come, first served (FAIR_TURNS=false, the behaviour
 * before), with fair turns (the default, no clients file), and with a clients file that makes the
 * first client `batch` and the second `interactive`. Counts the checkpoint loads: the batch must
 * still run in few sessions. Like scenario 7 it measures the workload, not the proxy's CPU: the
 * simulators' timings stand for a real card scaled down, and every time is read from one clock.
 *
 *   npx bun bench/scenarios/fair.ts [--rounds N]   prints the BENCHMARKS.md section
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { now } from "../../src/sim/clock.ts";
import { startSimPair } from "../../src/sim/index.ts";
import { median } from "../lib/stats.ts";
import { startWorkloadTurnstile, timedChat } from "../lib/workload.ts";
import { DEFAULT_WORKFLOW } from "./handoff.ts";

export const FAIR_WORKLOAD = { batch: 50, visits: 6, firstVisitMs: 1000, visitEveryMs: 3000, jobMs: 400, loadMs: 500, freeDelayMs: 100 };
type Workload = typeof FAIR_WORKLOAD;

interface Round {
  imageWaits: number[];
  chatWaits: number[];
  checkpointLoads: number;
  batchMakespanMs: number;
  complete: boolean;
}

export interface FairRow {
  label: string;
  imageMedianMs: number;
  imageMaxMs: number;
  chatMedianMs: number;
  chatMaxMs: number;
  checkpointLoads: number;
  batchMakespanMs: number;
  complete: boolean;
}

async function runRound(w: Workload, env: Record<string, string>): Promise<Round> {
  const sims = await startSimPair({
    ollama: { loadMs: 300, unloadMs: 100, tokenDelayMs: 20, tokens: 20 },
    comfy: { jobMs: w.jobMs, loadMs: w.loadMs, freeDelayMs: w.freeDelayMs },
  });
  const t = startWorkloadTurnstile(sims, env);
  try {
    await t.probed;
    const ollama = t.listener("ollama")!.url;
    const comfy = t.listener("comfy")!.url;
    const t0 = now();
    const at = (ms: number) => Bun.sleep(Math.max(0, t0 + ms - now()));
    const post = async (clientId: string, promptId: string): Promise<{ ok: boolean; sent: number }> => {
      const sent = now();
      const res = await fetch(`${comfy}/prompt`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: DEFAULT_WORKFLOW, prompt_id: promptId, client_id: clientId }),
      });
      await res.text();
      return { ok: res.status === 200, sent };
    };
    const batchIds = Array.from({ length: w.batch }, () => crypto.randomUUID());
    const batch = Promise.all(batchIds.map((id) => post("alice-batch", id)));
    const visits = Array.from({ length: w.visits }, async (_, i) => {
      await at(w.firstVisitMs + i * w.visitEveryMs);
      const id = crypto.randomUUID();
      const [image, chat] = await Promise.all([post("bob-desk", id), timedChat(ollama)]);
      return { id, image, chat };
    });
    const [batchAnswers, visitAnswers] = await Promise.all([batch, Promise.all(visits)]);
    await t.whenIdle();
    const jobs = new Map(sims.comfy.jobs().map((j) => [j.id, j]));
    const startOf = (id: string) => jobs.get(id)?.startedAt ?? Number.POSITIVE_INFINITY;
    return {
      imageWaits: visitAnswers.map((v) => startOf(v.id) - v.image.sent),
      chatWaits: visitAnswers.map((v) => v.chat.waitMs),
      checkpointLoads: sims.comfy.checkpointLoads(),
      batchMakespanMs: Math.max(...batchIds.map((id) => jobs.get(id)?.endedAt ?? Number.POSITIVE_INFINITY)) - t0,
      complete:
        batchAnswers.every((a) => a.ok) &&
        visitAnswers.every((v) => v.image.ok && v.chat.status === 200) &&
        [...jobs.values()].every((j) => j.state === "done") &&
        jobs.size === w.batch + w.visits &&
        sims.gpu.overlaps().length === 0,
    };
  } finally {
    await t.stop(1000);
    await sims.stop();
  }
}

export async function fair(w: Workload, rounds: number, note: (s: string) => void): Promise<FairRow[]> {
  const dir = mkdtempSync(join(tmpdir(), "gt-bench-fair-"));
  const clients = join(dir, "clients");
  writeFileSync(clients, "alice batch client_id=alice-\nbob interactive client_id=bob-\n");
  const configs: [string, Record<string, string>][] = [
    ["first come, first served (`FAIR_TURNS=false`, before)", { FAIR_TURNS: "false" }],
    ["fair turns (the default, no clients file)", {}],
    ["fair turns, `CLIENTS_FILE`: the batch client `batch`, the other `interactive`", { CLIENTS_FILE: clients }],
  ];
  const rows: FairRow[] = [];
  try {
    for (const [label, env] of configs) {
      const rs: Round[] = [];
      for (let r = 0; r < rounds; r++) rs.push(await runRound(w, env));
      const all = (pick: (x: Round) => number[]) => rs.flatMap(pick);
      const row: FairRow = {
        label,
        imageMedianMs: median(all((x) => x.imageWaits)),
        imageMaxMs: Math.max(...all((x) => x.imageWaits)),
        chatMedianMs: median(all((x) => x.chatWaits)),
        chatMaxMs: Math.max(...all((x) => x.chatWaits)),
        checkpointLoads: median(rs.map((x) => x.checkpointLoads)),
        batchMakespanMs: median(rs.map((x) => x.batchMakespanMs)),
        complete: rs.every((x) => x.complete),
      };
      note(`  ${label}: image wait median ${s(row.imageMedianMs)} max ${s(row.imageMaxMs)}, chat wait median ${s(row.chatMedianMs)} max ${s(row.chatMaxMs)}, ${row.checkpointLoads} checkpoint loads, batch ${s(row.batchMakespanMs)}${row.complete ? "" : " (INCOMPLETE)"}`);
      rows.push(row);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}

const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

export function renderFair(rows: FairRow[], w: Workload, rounds: number, date: string, commit: string): string {
  const lines = [
    "### Fair turns (issue 30) — one client queues 50 images, another sends an image and a chat every few seconds",
    "",
    `${date}, commit ${commit}; ${rounds} round(s) each, waits pooled over the rounds. Simulated card: ComfyUI jobs of ${w.jobMs} ms, a cold checkpoint load of ${w.loadMs} ms (after every \`/free\` that unloaded it), memory back ${w.freeDelayMs} ms after \`/free\`; Ollama loads a model in 300 ms and streams 20 tokens 20 ms apart; \`IMAGE_SESSION_MAX\` at its default (5m). Client A (\`client_id\` alice-batch) posts ${w.batch} images at t=0; client B (\`client_id\` bob-desk) posts one image and one chat together at t=${w.firstVisitMs / 1000} s and every ${w.visitEveryMs / 1000} s after, ${w.visits} times. B's image wait: its \`POST /prompt\` → ComfyUI starts it. B's chat wait: time to the first byte. Run: \`npx bun bench/scenarios/fair.ts\`.`,
    "",
    "| turns | B's image wait, median | max | B's chat wait, median | max | checkpoint loads | A's 50 images done after | all done, 0 overlaps |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
    ...rows.map((r) => `| ${r.label} | ${s(r.imageMedianMs)} | ${s(r.imageMaxMs)} | ${s(r.chatMedianMs)} | ${s(r.chatMaxMs)} | ${r.checkpointLoads} | ${s(r.batchMakespanMs)} | ${r.complete ? "yes" : "no"} |`),
  ];
  return lines.join("\n");
}

if (import.meta.main) {
  const i = process.argv.indexOf("--rounds");
  const rounds = i > 0 ? Number(process.argv[i + 1]) : 1;
  const rows = await fair(FAIR_WORKLOAD, rounds, (l) => process.stderr.write(`${l}\n`));
  const commit = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"]).stdout.toString().trim();
  const dirty = Bun.spawnSync(["git", "status", "--porcelain", "--untracked-files=no"]).stdout.toString().trim() ? "+local changes" : "";
  const date = new Date().toISOString().slice(0, 16).replace("T", " ") + " UTC";
  process.stdout.write(`${renderFair(rows, FAIR_WORKLOAD, rounds, date, commit + dirty)}\n`);
}

/**
 * Issue 31: seeded chaos with COEXIST on. Embeddings, chats and image jobs of two workflows whose
 * peaks grow from run to run, all at once through the turnstile. Whatever the interleaving:
 *
 * - the ledger shows no moment over the card's capacity (SimGpu.violations with co-residency);
 * - every model that landed partly on the CPU was reported in the log;
 * - every request got its answer, and the turnstile ends idle;
 * - co-residency happened (admissions > 0): the run proves something.
 *
 * The eject is only as quick as a reading of the card plus an unload: the 4 GiB margin covers
 * about 200 ms of the steepest sampler (22.3 GB over a 2 s job), so a machine busy enough to delay
 * a reading longer than that can make this fail; that is the documented limit, not a bug.
 *
 * Reproduce a failure with CHAOS_SEED=<seed printed in the failure>.
 */
import { afterEach, expect, test } from "bun:test";
import { mulberry32 } from "../../support/prng.ts";
import { parseExposition, sampleValue } from "../../support/prom-parse.ts";
import { chat, newPromptId, postJson, promptBody, type Stack, startStack, submit, until, warnLines } from "./helpers.ts";

const SEED = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
// Enough image jobs for every workflow to reach its third run on most seeds; each costs 2 s of suite time.
const OPS = 20;
const CONCURRENCY = 4;
const GB = 1_000_000_000;
/** What each model occupies wholly in VRAM (the simulator's figures). */
const VRAM: Record<string, number> = { "nomic-embed-text:latest": 590_557_184, "llama3.2:latest": 3_735_225_344 };

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

test(`COEXIST chaos: no moment over capacity, no unreported CPU spill (seed ${SEED})`, async () => {
  const r = mulberry32(SEED);
  const s = (stack = await startStack({
    comfy: { jobMs: 2000, loadMs: 10, freeDelayMs: 20 },
    env: { COEXIST: "true", COEXIST_MODELS: "nomic-embed-text", COEXIST_MARGIN: "4GiB", COEXIST_POLL_INTERVAL: "20ms", LOGLEVEL: "info", LLM_BUSY_MODE: "wait", LLM_WAIT_TIMEOUT: "60s" },
  }));
  // Three workflows (another size is another workflow), each a little higher run after run; on
  // its third run one may go to the most the 25.4 GB card holds beside ComfyUI's 2.7 GB checkpoint
  // alone (22.3 GB): with the 0.6 GB model beside it too, the card would run out.
  const peak = [2 * GB, 3 * GB, 4 * GB];
  const runs = [0, 0, 0];
  const ops = Array.from({ length: OPS }, (_, i) => {
    const x = r();
    if (x < 0.4) return { kind: "embed" as const };
    if (x < 0.55) return { kind: "chat" as const };
    const w = Math.floor(r() * 3);
    runs[w]!++;
    peak[w] = runs[w] === 3 && r() < 0.6 ? 22.3 * GB : Math.min(22.3 * GB, peak[w]! + r() * 0.5 * GB);
    return { kind: "image" as const, width: 512 + 128 * w, work: Math.round(peak[w]!), seed: i };
  });
  const image = (width: number, work: number, seed: number) =>
    submit(
      s.t,
      promptBody(newPromptId(), { sim_work_bytes: work }, (p) => {
        (p["3"] as { inputs: { seed: number } }).inputs.seed = seed;
        (p["5"] as { inputs: { width: number } }).inputs.width = width;
      }),
    );
  // Each workflow's first run is exclusive: one of each first, one after the other, so the chaos
  // starts with learned peaks (and a run of it can be admitted).
  for (const w of [0, 1, 2]) {
    const res = await image(512 + 128 * w, 2 * GB + w * GB, -1);
    expect(res.status).toBe(200);
    await res.text();
    await until(() => s.t.lock.snapshot().state === "idle", "a learning run's end", 15_000);
  }
  // The chaos opens with the model loaded and a learned workflow: one admission at least, whatever
  // the seed draws next (the assertion below would otherwise prove nothing on some seeds).
  expect((await postJson(`${s.t.ollamaUrl}/api/embed`, { model: "nomic-embed-text", input: "a document" })).status).toBe(200);
  ops.unshift({ kind: "image", width: 512, work: 2 * GB, seed: -2 });
  const statuses: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < ops.length) {
      const op = ops[next++]!;
      if (op.kind === "embed") {
        const res = await postJson(`${s.t.ollamaUrl}/api/embed`, { model: "nomic-embed-text", input: "a document" });
        statuses.push(`embed ${res.status}`);
        await res.text();
      } else if (op.kind === "chat") {
        const res = await chat(s.t);
        statuses.push(`chat ${res.status}`);
        await res.text();
      } else {
        const res = await image(op.width, op.work, op.seed);
        statuses.push(`image ${res.status}`);
        await res.text();
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  await until(() => s.t.lock.snapshot().state === "idle" && s.comfy!.runningJob() === undefined, "the last job's end", 60_000);

  if (statuses.some((x) => !x.endsWith(" 200"))) console.log(s.t.logLines.filter((l) => /ERROR|WARN|500/i.test(l)).join("\n"));
  expect(statuses.filter((x) => !x.endsWith(" 200"))).toEqual([]);
  expect(s.gpu.violations({ coexist: true })).toEqual([]);
  const spilled = s.gpu.ledger.filter((h) => h.tenant === "ollama" && VRAM[h.detail] !== undefined && h.bytes < VRAM[h.detail]!);
  for (const h of spilled) expect(warnLines(s.t, h.detail.split(":")[0]!).length).toBeGreaterThan(0);
  const metrics = parseExposition(await (await fetch(`${s.t.ollamaUrl}/metrics`)).text());
  expect(sampleValue(metrics, "gpu_turnstile_coexist_admissions_total")).toBeGreaterThan(0);
  // Every image job ran to success: ejects came before ComfyUI was short of memory.
  const history = (await (await fetch(`${s.comfy!.url}/history`)).json()) as Record<string, { status: { status_str: string } }>;
  expect(Object.values(history).filter((h) => h.status.status_str !== "success")).toEqual([]);
}, 120_000);

/**
 * Issue 31: the co-residency rule against arbitrary traces. A seeded generator (no dependency)
 * draws thousands of cards, models, workflows and memory curves; the properties are the promises
 * SPEC.md makes: nothing is admitted past total − margin at the learned peak, and while a model is
 * admitted the eject comes before the card runs out.
 */
import { describe, expect, test } from "bun:test";
import type { LoadedModel } from "../../src/ollama/client.ts";
import { admitBeside, comfyUse, modelAllowed, mustEject, parseModelList, parseSize, type CardMeasure, type CoexistSettings } from "../../src/jobs/coexist-rule.ts";
import { LearnedPeaks } from "../../src/jobs/learned-peaks.ts";
import { workflowKey } from "../../src/jobs/workflow-key.ts";
import { mulberry32 } from "../support/prng.ts";

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

const rng = mulberry32;
const between = (r: () => number, lo: number, hi: number) => Math.floor(lo + r() * (hi - lo));

const on = (marginBytes = GiB): CoexistSettings => ({ enabled: true, models: ["nomic-embed-text", "qwen*"], marginBytes });
const model = (size: number, sizeVram = size, name = "nomic-embed-text:latest"): LoadedModel => ({ name, size, sizeVram });
const card = (totalBytes: number, freeBytes: number, shared?: string): CardMeasure => ({ totalBytes, freeBytes, shared });

describe("admission (pure)", () => {
  test("never admits past total − margin at the learned peak, nor past free − margin now, whatever the figures", () => {
    const r = rng(31);
    let admitted = 0;
    for (let i = 0; i < 20_000; i++) {
      const total = between(r, 2 * GiB, 48 * GiB);
      const margin = between(r, 0, 4 * GiB);
      const size = between(r, 1, 16 * GiB);
      const peakBytes = between(r, 0, total + GiB);
      const free = between(r, 0, total);
      const resident = r() < 0.5;
      const a = admitBeside({ settings: on(margin), model: model(size), resident, card: card(total, free), peak: { peakBytes, runs: 1 } });
      if (!a.admit) continue;
      admitted++;
      expect(peakBytes + size + margin).toBeLessThanOrEqual(total);
      expect((resident ? 0 : size) + margin).toBeLessThanOrEqual(free);
      expect(a.headroomBytes).toBe(total - peakBytes - size - margin);
    }
    // The generator reaches both sides of the rule, or the property proves nothing.
    expect(admitted).toBeGreaterThan(1000);
  });

  test("never admits when off, not allowed, unmeasured, unlearned, exclusive only, or spilled to the CPU", () => {
    const roomy = { model: model(300 * MiB), resident: false, card: card(24 * GiB, 20 * GiB), peak: { peakBytes: 8 * GiB, runs: 1 } };
    expect(admitBeside({ settings: on(), ...roomy })).toEqual({ admit: true, headroomBytes: 24 * GiB - 8 * GiB - 300 * MiB - GiB });
    const reason = (over: Partial<Parameters<typeof admitBeside>[0]>) => {
      const a = admitBeside({ settings: on(), ...roomy, ...over });
      return a.admit ? "admitted" : a.reason;
    };
    expect(reason({ settings: { ...on(), enabled: false } })).toBe("off");
    expect(reason({ model: model(300 * MiB, 300 * MiB, "llama3.1:8b") })).toBe("not-allowed");
    for (const dev of ["cpu", "mps", "directml", "privateuseone"]) expect(reason({ card: card(24 * GiB, 20 * GiB, dev) })).toBe("not-measured");
    expect(reason({ card: card(0, 0) })).toBe("not-measured");
    expect(reason({ peak: undefined })).toBe("unlearned");
    expect(reason({ peak: { peakBytes: 8 * GiB, runs: 3, exclusiveOnly: "job failed" } })).toBe("exclusive-only");
    expect(reason({ model: model(300 * MiB, 200 * MiB) })).toBe("cpu-spill");
    expect(reason({ model: model(0, 0) })).toBe("cpu-spill");
    expect(reason({ card: card(24 * GiB, GiB) })).toBe("no-room-now");
    expect(reason({ peak: { peakBytes: 23 * GiB, runs: 1 } })).toBe("no-room-at-peak");
  });

  test("a model already resident is not counted twice in the free figure", () => {
    const base = { settings: on(), model: model(2 * GiB), card: card(24 * GiB, 2.5 * GiB), peak: { peakBytes: 10 * GiB, runs: 1 } };
    expect(admitBeside({ ...base, resident: true }).admit).toBe(true);
    expect(admitBeside({ ...base, resident: false }).admit).toBe(false);
  });
});

/**
 * One image job at a time on a simulated card: a workflow's use follows a curve sampled at each
 * poll of /system_stats; its peak grows from run to run by up to `growth`. The turnstile's side is
 * exactly what the wiring does: admit at the job's start, watch each sample, eject below the margin,
 * learn the peak at the end.
 */
function runTraces(seed: number, jobs: number, step: (r: () => number, margin: number) => number) {
  const r = rng(seed);
  const total = between(r, 8 * GiB, 48 * GiB);
  const margin = between(r, 256 * MiB, 3 * GiB);
  const settings = on(margin);
  const peaks = new LearnedPeaks();
  const workflows = Array.from({ length: 4 }, () => ({ key: `wf${between(r, 0, 1e9)}`, peak: between(r, GiB, total - 2 * GiB) }));
  const emb = model(between(r, 100 * MiB, 6 * GiB));
  const out = { admissions: 0, ejects: 0, overCapacity: 0, pastMarginBelowLearned: 0, exclusiveRunsLearned: 0 };
  for (let j = 0; j < jobs; j++) {
    const wf = workflows[between(r, 0, workflows.length)]!;
    // Peaks grow now and then (a larger batch, dynamic VRAM): the learned figure lags behind.
    if (r() < 0.3) wf.peak = Math.min(total, wf.peak + between(r, 0, 2 * GiB));
    const learned = peaks.get(wf.key);
    let resident = false;
    let free = total - emb.size;
    // The model is loaded when the job starts (an embedding was just served).
    const a = admitBeside({ settings, model: emb, resident: true, card: card(total, free), peak: learned });
    if (a.admit) {
      resident = true;
      out.admissions++;
    } else {
      out.exclusiveRunsLearned += learned === undefined ? 1 : 0;
    }
    let used = 0;
    let highest = 0;
    // The curve: rises in steps to the run's peak, holds, falls.
    while (used < wf.peak) {
      used = Math.min(wf.peak, used + step(r, margin));
      const onCard = used + (resident ? emb.size : 0);
      if (onCard > total) out.overCapacity++;
      if (resident && learned && used <= learned.peakBytes && onCard > total - margin) out.pastMarginBelowLearned++;
      free = Math.max(0, total - onCard);
      highest = Math.max(highest, comfyUse(card(total, free), resident ? emb.size : 0));
      if (resident && mustEject(free, margin)) {
        resident = false; // unloaded at once: gone before ComfyUI's next step
        out.ejects++;
      }
    }
    peaks.record(wf.key, highest);
  }
  return out;
}

describe("traces", () => {
  test("while a model is admitted, the card never goes over capacity when each step grows by less than the margin", () => {
    let admissions = 0;
    let ejects = 0;
    for (let seed = 1; seed <= 300; seed++) {
      const out = runTraces(seed, 40, (r, margin) => between(r, 1, margin));
      expect(out.overCapacity).toBe(0);
      expect(out.pastMarginBelowLearned).toBe(0);
      admissions += out.admissions;
      ejects += out.ejects;
    }
    // Both sides of the rule were exercised: models were admitted, and growing peaks ejected some.
    expect(admissions).toBeGreaterThan(500);
    expect(ejects).toBeGreaterThan(20);
  });

  test("an unlearned workflow's first run is exclusive, and it is learned from that run", () => {
    const peaks = new LearnedPeaks();
    const a = admitBeside({ settings: on(), model: model(300 * MiB), resident: true, card: card(24 * GiB, 23 * GiB), peak: peaks.get("wf") });
    expect(a.admit).toBe(false);
    expect(peaks.record("wf", 7 * GiB)).toBe(true);
    const b = admitBeside({ settings: on(), model: model(300 * MiB), resident: true, card: card(24 * GiB, 23 * GiB), peak: peaks.get("wf") });
    expect(b.admit).toBe(true);
  });
});

describe("learned peaks", () => {
  test("a peak only rises; a lower run never lowers it", () => {
    const p = new LearnedPeaks();
    expect(p.record("a", 5 * GiB)).toBe(true);
    expect(p.record("a", 4 * GiB)).toBe(false);
    expect(p.get("a")).toEqual({ peakBytes: 5 * GiB, runs: 2 });
    expect(p.record("a", 6 * GiB)).toBe(true);
    expect(p.get("a")?.peakBytes).toBe(6 * GiB);
  });

  test("exclusive only sticks through later runs; bad figures teach nothing", () => {
    const p = new LearnedPeaks();
    p.record("a", GiB);
    p.markExclusive("a", "job failed after an admission");
    p.record("a", 2 * GiB);
    expect(p.get("a")).toEqual({ peakBytes: 2 * GiB, runs: 2, exclusiveOnly: "job failed after an admission" });
    expect(p.record("b", Number.NaN)).toBe(false);
    expect(p.record("b", -1)).toBe(false);
    expect(p.get("b")).toBeUndefined();
  });

  test("bounded: the least recently used workflow is forgotten, so it is unlearned again", () => {
    const p = new LearnedPeaks(2);
    p.record("a", 1);
    p.record("b", 2);
    p.get("a");
    p.record("c", 3);
    expect(p.get("b")).toBeUndefined();
    expect(p.get("a")?.peakBytes).toBe(1);
    expect(p.size).toBe(2);
  });
});

describe("workflow key", () => {
  const graph = (seed: number, text: string, steps = 20, width = 1024) => ({
    "3": { class_type: "KSampler", inputs: { seed, steps, cfg: 7, model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0] } },
    "4": { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "sd_xl_base_1.0.safetensors" } },
    "5": { class_type: "EmptyLatentImage", inputs: { width, height: 1024, batch_size: 1 } },
    "6": { class_type: "CLIPTextEncode", inputs: { text, clip: ["4", 1] } },
    "7": { class_type: "CLIPTextEncode", inputs: { text: "blurry", clip: ["4", 1] } },
  });

  test("seeds and prompt text do not change it; sizes, steps and models do", () => {
    const k = workflowKey(graph(1, "a cat"));
    expect(k).toMatch(/^[0-9a-f]{16}$/);
    expect(workflowKey(graph(987654321, "a dog in the rain"))).toBe(k);
    expect(workflowKey(graph(1, "a cat", 30))).not.toBe(k);
    expect(workflowKey(graph(1, "a cat", 20, 1536))).not.toBe(k);
    const other = graph(1, "a cat");
    other["4"].inputs.ckpt_name = "flux1-dev.safetensors";
    expect(workflowKey(other)).not.toBe(k);
  });

  test("the order the client wrote keys in does not matter; a non-graph has no key", () => {
    const g = graph(1, "x");
    const reordered = Object.fromEntries(Object.entries(g).reverse().map(([id, n]) => [id, { inputs: Object.fromEntries(Object.entries(n.inputs).reverse()), class_type: n.class_type }]));
    expect(workflowKey(reordered)).toBe(workflowKey(g));
    for (const bad of [null, [], "x", {}, { "1": { inputs: {} } }]) expect(workflowKey(bad)).toBeUndefined();
  });
});

describe("allowed models", () => {
  test("a bare name matches its tags; patterns match with *; case does not matter", () => {
    expect(modelAllowed("nomic-embed-text:latest", ["nomic-embed-text"])).toBe(true);
    expect(modelAllowed("nomic-embed-text:v1.5", ["nomic-embed-text"])).toBe(true);
    expect(modelAllowed("nomic-embed-text-large:latest", ["nomic-embed-text"])).toBe(false);
    expect(modelAllowed("nomic-embed-text:v1.5", ["nomic-embed-text:latest"])).toBe(false);
    expect(modelAllowed("Qwen2.5:3b", ["qwen*:3b"])).toBe(true);
    expect(modelAllowed("qwen2.5:7b", ["qwen*:3b"])).toBe(false);
    expect(modelAllowed("anything", ["", " "])).toBe(false);
    expect(modelAllowed("a.b", ["a*b"])).toBe(true);
    expect(modelAllowed("axb", ["a.b"])).toBe(false);
  });
});

describe("settings text", () => {
  test("COEXIST_MARGIN and COEXIST_MODELS as the table lets them be written", () => {
    expect(parseSize("1GiB")).toBe(GiB);
    expect(parseSize(" 512 mib ")).toBe(512 * MiB);
    expect(parseSize("1.5GiB")).toBe(1.5 * GiB);
    expect(() => parseSize("1GB")).toThrow();
    expect(parseModelList(" nomic-embed-text, qwen*:3b ,,")).toEqual(["nomic-embed-text", "qwen*:3b"]);
  });
});

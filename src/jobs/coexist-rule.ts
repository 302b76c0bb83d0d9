/**
 * Co-residency (issue 31, COEXIST): may a small Ollama model stay on the card, or be served,
 * beside a running image job? Decided from measurements only, never from declared sizes:
 *
 * - the model is wholly in VRAM (/api/ps `size_vram == size`): a model already spilled to the CPU
 *   says the card was short when it loaded, and its size on the card is not what it needs;
 * - its size plus COEXIST_MARGIN fits in what ComfyUI measures free now (/system_stats
 *   `vram_free`, which is the device's free memory, so it already counts everything loaded);
 * - it also fits under the card's total minus the workflow's learned peak (learned-peaks.ts):
 *   free memory now says nothing of the step that needs the most, the peak does;
 * - never where memory is not measured (ComfyUI on cpu, mps, DirectML: device-memory.ts), and
 *   never for a workflow not yet learned or marked exclusive only.
 *
 * And, once admitted, the eject: free memory below the margin during the job means the workflow
 * is going higher than it was ever seen to; the co-resident model goes at once. Pure, so the rule
 * is tested on its own against arbitrary traces (test/jobs/coexist-rule.test.ts).
 */
import type { LoadedModel } from "../ollama/client.ts";
import type { LearnedPeak } from "./learned-peaks.ts";

export interface CoexistSettings {
  /** COEXIST: off means no model ever stays beside an image job (the rule answers "off"). */
  enabled: boolean;
  /** COEXIST_MODELS: names or patterns (`*` any run of characters) of the models allowed to stay. */
  models: readonly string[];
  /** COEXIST_MARGIN: bytes that must stay free on the card at every moment. */
  marginBytes: number;
}

/** What ComfyUI's /system_stats measures of the card now. */
export interface CardMeasure {
  /**
   * The device type when ComfyUI's memory is the system's (cpu, mps, directml): nothing of a
   * card's own is measured then. undefined on a card with memory of its own.
   */
  shared: string | undefined;
  /** The card's total memory (`vram_total`). */
  totalBytes: number;
  /** What the device has free now (`vram_free`), everything loaded counted. */
  freeBytes: number;
}

export type RefusalReason =
  | "off"
  | "not-allowed"
  | "not-measured"
  | "unlearned"
  | "exclusive-only"
  | "cpu-spill"
  | "no-room-now"
  | "no-room-at-peak";

export type Admission =
  | {
      admit: true;
      /** Bytes left above the margin at the workflow's learned peak with the model resident. */
      headroomBytes: number;
    }
  | { admit: false; reason: RefusalReason; detail: string };

export interface AdmissionInput {
  settings: CoexistSettings;
  /** The model as /api/ps lists it now (it is resident), or as it last measured when resident. */
  model: LoadedModel;
  /**
   * Whether the model's memory is already counted in `card.freeBytes` (it is loaded now). A model
   * about to load must find its whole size free; one already loaded is in the figure already.
   */
  resident: boolean;
  card: CardMeasure;
  /** The running workflow's learned peak; undefined when the workflow was never run exclusive. */
  peak: LearnedPeak | undefined;
}

/** Whether `name` is on the list (`*` matches any run; a bare name matches its `:tag`s as Ollama does). */
export function modelAllowed(name: string, patterns: readonly string[]): boolean {
  const n = name.toLowerCase();
  return patterns.some((p) => {
    const want = p.trim().toLowerCase();
    if (want === "") return false;
    if (!want.includes("*")) return n === want || (!want.includes(":") && n === `${want}:latest`) || (!want.includes(":") && n.startsWith(`${want}:`));
    const re = new RegExp(`^${want.split("*").map(escapeRegExp).join(".*")}$`);
    return re.test(n);
  });
}

export function admitBeside(input: AdmissionInput): Admission {
  const { settings, model, card, peak } = input;
  const no = (reason: RefusalReason, detail: string): Admission => ({ admit: false, reason, detail });
  if (!settings.enabled) return no("off", "COEXIST is off");
  if (!modelAllowed(model.name, settings.models)) return no("not-allowed", `${model.name} is not in COEXIST_MODELS`);
  if (card.shared !== undefined) return no("not-measured", `ComfyUI runs on ${card.shared}: the card's memory is not measured`);
  if (!(card.totalBytes > 0) || !(card.freeBytes >= 0)) return no("not-measured", "ComfyUI reported no memory figures");
  if (peak === undefined) return no("unlearned", "this workflow has not run alone yet: its peak is not known");
  if (peak.exclusiveOnly) return no("exclusive-only", `this workflow is exclusive only (${peak.exclusiveOnly})`);
  if (!(model.size > 0) || model.sizeVram !== model.size) {
    return no("cpu-spill", `${model.name} is not wholly in VRAM (${model.sizeVram} of ${model.size} bytes)`);
  }
  const margin = settings.marginBytes;
  const needNow = (input.resident ? 0 : model.size) + margin;
  if (needNow > card.freeBytes) {
    return no("no-room-now", `needs ${needNow} bytes free now (model ${model.size} + margin ${margin}${input.resident ? ", model already counted" : ""}), ${card.freeBytes} free`);
  }
  const atPeak = card.totalBytes - peak.peakBytes - model.size - margin;
  if (atPeak < 0) {
    return no("no-room-at-peak", `card ${card.totalBytes} − learned peak ${peak.peakBytes} leaves ${card.totalBytes - peak.peakBytes}, model ${model.size} + margin ${margin} do not fit`);
  }
  return { admit: true, headroomBytes: atPeak };
}

/**
 * During a job with a co-resident model: the card's free memory fell below the margin, so the
 * workflow is past anything learned and the model must go before ComfyUI runs out.
 */
export function mustEject(freeBytes: number, marginBytes: number): boolean {
  return freeBytes < marginBytes;
}

/**
 * What ComfyUI's own use is, measured: the card's total minus its free memory, minus what the
 * co-resident model holds (0 when none). This is the figure a workflow's peak is learned from.
 */
export function comfyUse(card: CardMeasure, coResidentBytes: number): number {
  return Math.max(0, card.totalBytes - card.freeBytes - coResidentBytes);
}

/** COEXIST_MARGIN's text ("1GiB", "512 MiB"; the settings table checked its form) in bytes. */
export function parseSize(text: string): number {
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*(MiB|GiB)\s*$/i.exec(text);
  if (!m) throw new Error(`not a size: ${JSON.stringify(text)}`);
  return Math.round(Number(m[1]) * (m[2]!.toLowerCase() === "gib" ? 1024 ** 3 : 1024 ** 2));
}

/** COEXIST_MODELS's text as a list. */
export function parseModelList(text: string): string[] {
  return text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
}

function escapeRegExp(s: string): string {
  return s.replace(/[.+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * Co-residency during image sessions (issue 31, COEXIST; SPEC "Co-residency"). Where today the
 * session's opener empties Ollama, this keeps one model of COEXIST_MODELS loaded when the rule
 * (coexist-rule.ts) admits it for the session's workflow, serves its requests at once while it
 * stays, and watches the card through the session:
 *
 * - every COEXIST_POLL_INTERVAL it reads ComfyUI's free memory; below COEXIST_MARGIN with a model
 *   resident, that model is unloaded at once (the eject) and its requests wait for the lock again;
 * - a job that joins with a workflow the rule does not admit ejects the model before it goes out;
 * - the session's highest measured use teaches the peak of every workflow it ran (a session of
 *   several workflows over-states each one's peak: safe, never under);
 * - a job that fails in a session that had a model admitted marks its workflow exclusive only.
 *
 * One session at a time: the lock opens a new one only after the last ended. Off (COEXIST=false)
 * nothing here is constructed and image jobs empty Ollama exactly as before.
 */
import type { ComfyClient } from "../comfy/client.ts";
import { sleep } from "../http/backoff.ts";
import type { LoadedModel, OllamaClient } from "../ollama/client.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";
import { admitBeside, type CardMeasure, comfyUse, type CoexistSettings, modelAllowed, mustEject, type RefusalReason } from "./coexist-rule.ts";
import type { LearnedPeaks } from "./learned-peaks.ts";

export interface CoexistOptions extends CoexistSettings {
  /** COEXIST_POLL_INTERVAL. */
  pollMs: number;
  /** One /system_stats or /api/ps read during the session. */
  readTimeoutMs: number;
}

export type CoexistEvent =
  | { kind: "admitted"; model: string; sizeBytes: number; workflow: string; peakBytes: number; headroomBytes: number; freeBytes: number; totalBytes: number }
  | { kind: "refused"; model: string; workflow: string | undefined; reason: RefusalReason; detail: string }
  | { kind: "ejected"; model: string; sizeBytes: number; why: string; freeBytes?: number; marginBytes: number; totalBytes?: number; peakBytes?: number; error?: string }
  | { kind: "learned"; workflows: string[]; peakBytes: number; rose: boolean }
  | { kind: "exclusive"; workflow: string; why: string };

export interface LastEject {
  at: number;
  model: string;
  why: string;
  freeBytes?: number;
}

/** For the status page and `status`. */
export interface CoexistView {
  /** The model staying beside the running session, if any. */
  model?: string;
  /** Bytes above the margin at the workflow's learned peak, when a model is admitted. */
  headroomBytes?: number;
  /** The running session's learned peak (the highest of its workflows), when learned. */
  peakBytes?: number;
  /** ComfyUI's free memory at the last read during the session. */
  freeBytes?: number;
  lastEject?: LastEject;
}

export interface CoexistDeps {
  options: CoexistOptions;
  ollama: OllamaClient;
  comfy: ComfyClient;
  peaks: LearnedPeaks;
  emit: (e: CoexistEvent) => void;
}

interface Episode {
  /** The workflows of the session's jobs (their keys). */
  readonly workflows: Set<string>;
  /** Those with a job that ran to its end: only a run that completed teaches a peak. */
  readonly completed: Set<string>;
  resident: LoadedModel | undefined;
  headroomBytes?: number;
  /** A model was admitted at some moment of the session. */
  admittedEver: boolean;
  /** The highest use measured of ComfyUI during the session; undefined while nothing measured. */
  maxUse: number | undefined;
  /** Some read found the memory not measured (cpu, mps, DirectML): nothing is learned. */
  unmeasured: boolean;
  lastFree?: number;
  /** A joining job's eject and the wait for Ollama to be empty: later joiners wait for it too. */
  emptying?: Promise<unknown>;
  readonly stop: AbortController;
}

export class Coexistence {
  #episode: Episode | undefined;
  #lastEject: LastEject | undefined;

  constructor(private readonly deps: CoexistDeps) {}

  /**
   * The session opens: decide which model stays (at most one), empty Ollama of the others through
   * `unload` (the image job's, which logs it), and start watching. `workflow` undefined: the
   * opener's graph has no key, so nothing stays.
   */
  async prepare(workflow: string | undefined, unload: (keep?: string) => Promise<{ tried: string[] } | undefined>): Promise<void> {
    this.#end();
    const ep: Episode = { workflows: new Set(workflow ? [workflow] : []), completed: new Set(), resident: undefined, admittedEver: false, maxUse: undefined, unmeasured: false, stop: new AbortController() };
    this.#episode = ep;
    const keep = await this.#choose(ep, workflow).catch(() => undefined);
    const r = await unload(keep?.name);
    // Unloaded blind (an unreadable /api/ps): the model may be gone, so it is not served.
    if (keep && r && r.tried.includes(keep.name)) {
      ep.resident = undefined;
      ep.headroomBytes = undefined;
    }
    void this.#watch(ep);
  }

  /**
   * A job about to go to ComfyUI in the open session: a workflow the rule does not admit ejects
   * the model first, and the job waits until Ollama is empty (`unload`, the image job's, bounded by
   * UNLOAD_TIMEOUT), as Ollama frees a model only after it has answered the unload.
   */
  async beforeJob(workflow: string | undefined, unload: () => Promise<unknown>): Promise<unknown> {
    const ep = this.#episode;
    if (!ep) return;
    if (workflow) ep.workflows.add(workflow);
    const m = ep.resident;
    if (!m) return ep.emptying;
    const card = await this.#card().catch(() => undefined);
    // Another job's check may have ejected it meanwhile (jobs join a session at once): this one
    // waits for the same emptying.
    if (ep.resident !== m) return ep.emptying;
    const verdict = card && this.#admit(m, card, workflow);
    if (verdict?.admit) {
      ep.headroomBytes = Math.min(ep.headroomBytes ?? Infinity, verdict.headroomBytes);
      return;
    }
    ep.emptying = this.#eject(ep, verdict ? `a job of workflow ${workflow ?? "(unknown)"} joined: ${verdict.detail}` : "ComfyUI's memory could not be read for a joining job", card).then(unload);
    await ep.emptying;
  }

  /**
   * A job of the session ended. One that completed teaches its workflow's peak at the session's
   * end; one that failed after an admission makes its workflow exclusive only.
   */
  jobEnded(workflow: string | undefined, outcome: "completed" | "failed" | "other"): void {
    const ep = this.#episode;
    if (!ep || !workflow) return;
    if (outcome === "completed") ep.completed.add(workflow);
    if (outcome !== "failed" || !ep.admittedEver) return;
    const why = "a job failed while a model shared the card";
    this.deps.peaks.markExclusive(workflow, why);
    this.deps.emit({ kind: "exclusive", workflow, why });
  }

  /** The session ended: stop watching, learn its peak. */
  sessionEnded(): void {
    this.#end();
  }

  /**
   * An LLM request for `model` while a session is open: a hold when the model is the one staying
   * beside it (the request goes to Ollama at once), undefined otherwise (it waits for the lock).
   * The hold counts nothing: one still running when the session ends needs no wait, as the next
   * session that does not keep the model waits for Ollama's /api/ps to be empty, which Ollama
   * reaches only once the request is done.
   */
  serve(model: string | undefined): { release(): void } | undefined {
    const ep = this.#episode;
    if (!ep?.resident || model === undefined || withTag(model) !== withTag(ep.resident.name)) return undefined;
    return NOTHING_HELD;
  }

  view(): CoexistView {
    const ep = this.#episode;
    const peaks = ep ? [...ep.workflows].map((w) => this.deps.peaks.get(w)?.peakBytes) : [];
    const known = peaks.filter((p): p is number => p !== undefined);
    return {
      model: ep?.resident?.name,
      headroomBytes: ep?.resident ? ep.headroomBytes : undefined,
      peakBytes: known.length > 0 && known.length === peaks.length ? Math.max(...known) : undefined,
      freeBytes: ep?.lastFree,
      lastEject: this.#lastEject,
    };
  }

  async #choose(ep: Episode, workflow: string | undefined): Promise<LoadedModel | undefined> {
    const { options } = this.deps;
    const loaded = await this.deps.ollama.ps(undefined, options.readTimeoutMs);
    const candidates = loaded.filter((m) => modelAllowed(m.name, options.models));
    if (candidates.length === 0) return undefined;
    // Not sampled for the peak: the models about to be unloaded are still in the figure.
    const card = await this.#card();
    // Everything but one model goes: the rule is stated for one model beside the job.
    for (const m of candidates) {
      const verdict = this.#admit(m, card, workflow);
      if (!verdict.admit) {
        this.deps.emit({ kind: "refused", model: m.name, workflow, reason: verdict.reason, detail: verdict.detail });
        continue;
      }
      const peak = this.deps.peaks.get(workflow!)!.peakBytes;
      ep.resident = m;
      ep.headroomBytes = verdict.headroomBytes;
      ep.admittedEver = true;
      this.deps.emit({ kind: "admitted", model: m.name, sizeBytes: m.size, workflow: workflow!, peakBytes: peak, headroomBytes: verdict.headroomBytes, freeBytes: card.freeBytes, totalBytes: card.totalBytes });
      return m;
    }
    return undefined;
  }

  /**
   * The rule for a loaded `model` beside `workflow`. Other models about to be unloaded are still
   * in the free figure; they are not credited back (their unload may lag): the verdict errs on no.
   */
  #admit(model: LoadedModel, card: CardMeasure, workflow: string | undefined) {
    return admitBeside({ settings: this.deps.options, model, resident: true, card, peak: workflow ? this.deps.peaks.get(workflow) : undefined });
  }

  async #card(): Promise<CardMeasure> {
    const s = await this.deps.comfy.systemStats(this.deps.options.readTimeoutMs);
    return { shared: s.shared, totalBytes: s.totalBytes, freeBytes: s.freeBytes };
  }

  #sample(ep: Episode, card: CardMeasure): void {
    if (card.shared !== undefined || !(card.totalBytes > 0)) {
      ep.unmeasured = true;
      return;
    }
    ep.lastFree = card.freeBytes;
    ep.maxUse = Math.max(ep.maxUse ?? 0, comfyUse(card, ep.resident?.size ?? 0));
  }

  async #watch(ep: Episode): Promise<void> {
    const { options } = this.deps;
    const signal = ep.stop.signal;
    while (!signal.aborted) {
      try {
        const card = await this.#card();
        if (signal.aborted) return;
        this.#sample(ep, card);
        if (ep.resident && (card.shared !== undefined || mustEject(card.freeBytes, options.marginBytes))) {
          const why = card.shared !== undefined ? `ComfyUI now runs on ${card.shared}` : `free memory ${card.freeBytes} below COEXIST_MARGIN ${options.marginBytes}`;
          await this.#eject(ep, why, card);
        }
        if (ep.resident) await this.#recheck(ep, card);
      } catch (err) {
        // Blind: a model kept beside a job whose memory cannot be read is not kept.
        if (signal.aborted) return;
        if (ep.resident) await this.#eject(ep, `the card's memory could not be read (ComfyUI's /system_stats or Ollama's /api/ps): ${describeFetchError(err)}`, undefined);
      }
      await sleep(options.pollMs, signal).catch(() => {});
    }
  }

  /**
   * The resident model as Ollama lists it now. A request with other load options (num_ctx…) makes
   * Ollama reload it, at another size or partly on the CPU: that is no longer what was admitted.
   * Gone (its keep_alive ran out): it is not served again, as loading it would be a new admission.
   */
  async #recheck(ep: Episode, card: CardMeasure): Promise<void> {
    const m = ep.resident!;
    const now = (await this.deps.ollama.ps(undefined, this.deps.options.readTimeoutMs)).find((l) => l.name === m.name);
    if (ep.resident !== m) return;
    if (!now) {
      ep.resident = undefined;
      ep.headroomBytes = undefined;
      return;
    }
    if (now.size !== m.size || now.sizeVram !== now.size) {
      await this.#eject(ep, `Ollama reloaded it: ${now.sizeVram} of ${now.size} bytes in VRAM, admitted at ${m.size}`, card);
    }
  }

  /** Unloads the resident model at once; its further requests wait for the lock. */
  async #eject(ep: Episode, why: string, card: CardMeasure | undefined): Promise<void> {
    const m = ep.resident;
    if (!m) return;
    ep.resident = undefined;
    ep.headroomBytes = undefined;
    let error: string | undefined;
    try {
      await this.deps.ollama.unload(m.name);
    } catch (err) {
      error = describeFetchError(err);
    }
    const peaks = [...ep.workflows].map((w) => this.deps.peaks.get(w)?.peakBytes ?? 0);
    this.#lastEject = { at: Date.now(), model: m.name, why, freeBytes: card?.freeBytes };
    this.deps.emit({
      kind: "ejected",
      model: m.name,
      sizeBytes: m.size,
      why,
      freeBytes: card?.freeBytes,
      marginBytes: this.deps.options.marginBytes,
      totalBytes: card?.totalBytes,
      peakBytes: peaks.length > 0 ? Math.max(...peaks) : undefined,
      error,
    });
  }

  #end(): void {
    const ep = this.#episode;
    if (!ep) return;
    this.#episode = undefined;
    ep.stop.abort();
    if (ep.unmeasured || ep.maxUse === undefined || ep.completed.size === 0) return;
    let rose = false;
    for (const w of ep.completed) rose = this.deps.peaks.record(w, ep.maxUse) || rose;
    this.deps.emit({ kind: "learned", workflows: [...ep.completed], peakBytes: ep.maxUse, rose });
  }
}

const NOTHING_HELD = { release() {} };

/** Ollama's name for a model: a bare name means its `latest` tag. */
function withTag(name: string): string {
  const n = name.toLowerCase();
  return n.includes(":") ? n : `${n}:latest`;
}

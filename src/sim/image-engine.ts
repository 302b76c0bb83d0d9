/**
 * What the simulated AUTOMATIC1111/Forge and SwarmUI share: a checkpoint that lives on the
 * simulated GPU (recorded on the image side of its ledger, so any overlap with an LLM tenant fails
 * a test), in system RAM after an unload, or nowhere; and one generation at a time on it, FIFO
 * (A1111's queue_lock, one SwarmUI backend's single usage).
 */
import type { Hold, SimGpu, Tenant } from "./gpu.ts";
import { AbortedError, type Timers } from "./timers.ts";

/** The ledger side every image simulator records on (the GPU ledger calls the image side "comfy"). */
export const IMAGE_SIDE: Tenant = "comfy";

/** How an image simulator lies about releasing (tenants.md: "a 200 from a release call proves nothing"). */
export interface ImageLyingModes {
  /** The release is answered as successful and frees nothing (Forge's unload-checkpoint, #738). */
  releaseFreesNothing?: boolean;
  /** A release while a generation runs is refused and frees nothing. */
  refuseWhileBusy?: boolean;
}

export interface CheckpointTiming {
  /** VRAM the checkpoint occupies on the card (default 2.5 GiB, an SD 1.5 fp16 with its VAE). */
  bytes: number;
  /** Loading it cold from disk: the first generation (default 200). */
  loadMs: number;
  /** Moving it back from system RAM after an unload (default 50). */
  reloadMs: number;
  /** Moving it to system RAM and emptying the CUDA cache (default 30). */
  unloadMs: number;
}

export type CheckpointPlace = "none" | "loading" | "gpu" | "unloading" | "ram";

/** One checkpoint on the card and the queue of generations that use it. */
export class SimCheckpoint {
  place: CheckpointPlace = "none";
  /** Generations running now (0 or 1) and waiting for the queue lock. */
  running = 0;
  waiting = 0;
  /** Cold loads and reloads so far. */
  loads = 0;
  private hold: Hold | undefined;
  private tail: Promise<void> = Promise.resolve();
  private current: AbortController | undefined;

  constructor(
    private readonly gpu: SimGpu,
    private readonly timers: Timers,
    /** The checkpoint's name, also the ledger detail. */
    readonly name: string,
    private readonly timing: CheckpointTiming,
  ) {}

  /** Bytes this checkpoint holds on the card now. */
  get vramBytes(): number {
    return this.hold && this.hold.end === null ? this.hold.bytes : 0;
  }

  /** Runs `work` under the queue lock, FIFO, after `work` had the checkpoint loaded. */
  async generate<T>(work: (signal: AbortSignal) => Promise<T>): Promise<T> {
    this.waiting++;
    const release = await this.lock();
    this.waiting--;
    this.running++;
    const abort = new AbortController();
    this.current = abort;
    try {
      await this.load();
      return await work(abort.signal);
    } finally {
      this.running--;
      this.current = undefined;
      release();
    }
  }

  /** Ends the running generation early (A1111's interrupt, SwarmUI's InterruptAll). */
  interrupt(): boolean {
    if (!this.current) return false;
    this.current.abort();
    return true;
  }

  /** Sleeps `ms` of generation; an interrupt ends it early without an error (A1111 returns what it has). */
  async step(ms: number, signal: AbortSignal): Promise<void> {
    try {
      await this.timers.sleep(ms, signal);
    } catch (e) {
      if (!(e instanceof AbortedError) || this.timers.stopped) throw e;
    }
  }

  /** Puts the checkpoint on the card (cold, or back from RAM); a no-op when it is there. */
  async load(): Promise<void> {
    if (this.place === "gpu") return;
    const fromRam = this.place === "ram";
    this.place = "loading";
    this.loads++;
    this.gpu.note("load-start", IMAGE_SIDE, this.name);
    // Memory fills while the weights are copied: the ledger counts it from the start.
    this.hold = this.gpu.acquire(IMAGE_SIDE, this.name, this.timing.bytes);
    await this.timers.sleep(fromRam ? this.timing.reloadMs : this.timing.loadMs);
    this.place = "gpu";
    this.gpu.note("loaded", IMAGE_SIDE, this.name);
  }

  /** Moves the checkpoint to system RAM once the running generation ended; resolves when the memory is back. */
  async unload(): Promise<void> {
    const release = await this.lock();
    try {
      if (this.place !== "gpu") return;
      this.place = "unloading";
      this.gpu.note("unload-start", IMAGE_SIDE, this.name);
      await this.timers.sleep(this.timing.unloadMs);
      if (this.hold) this.gpu.release(this.hold);
      this.hold = undefined;
      this.place = "ram";
      this.gpu.note("unloaded", IMAGE_SIDE, this.name);
    } finally {
      release();
    }
  }

  /** Puts it back on the card under the queue lock (A1111's reload-checkpoint). */
  async reload(): Promise<void> {
    const release = await this.lock();
    try {
      await this.load();
    } finally {
      release();
    }
  }

  /** The process died: its memory goes back to the card at once. */
  drop(): void {
    if (this.hold) this.gpu.release(this.hold);
    this.hold = undefined;
    this.place = "none";
  }

  private lock(): Promise<() => void> {
    let release!: () => void;
    const mine = new Promise<void>((r) => {
      release = r;
    });
    const before = this.tail;
    this.tail = before.then(() => mine);
    return before.then(() => release);
  }
}

export const DEFAULT_CHECKPOINT_TIMING: CheckpointTiming = {
  bytes: 2_684_354_560,
  loadMs: 200,
  reloadMs: 50,
  unloadMs: 30,
};

/** The defaults, with whatever of the four the options set. */
export function timingOf(o: Partial<CheckpointTiming>): CheckpointTiming {
  return {
    bytes: o.bytes ?? DEFAULT_CHECKPOINT_TIMING.bytes,
    loadMs: o.loadMs ?? DEFAULT_CHECKPOINT_TIMING.loadMs,
    reloadMs: o.reloadMs ?? DEFAULT_CHECKPOINT_TIMING.reloadMs,
    unloadMs: o.unloadMs ?? DEFAULT_CHECKPOINT_TIMING.unloadMs,
  };
}

/** A small valid PNG (1×1, transparent), what the simulators answer as every image. */
export const PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/** Reads a JSON object body; undefined when it is not one. */
export function jsonObject(text: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The per-request run time a test may ask for (`sim_job_ms`), else the simulator's default. */
export function jobMsOf(body: Record<string, unknown>, fallback: number): number {
  const v = body.sim_job_ms;
  return typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : fallback;
}

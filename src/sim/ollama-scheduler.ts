/**
 * The simulated Ollama scheduler (server/sched.go in miniature): runners that load, are shared
 * by concurrent requests (refCount), expire after their keep-alive, and unload ASYNCHRONOUSLY —
 * the unload request is answered at once while the model stays listed in /api/ps (and holds GPU
 * memory in the ledger) until `unloadMs` later. That delay is what the turnstile must poll for.
 */
import { FOREVER_MS } from "./clock.ts";
import type { Hold, SimGpu } from "./gpu.ts";
import type { Model } from "./ollama-models.ts";
import { AbortedError, raceAbort, type Timers } from "./timers.ts";

export type RunnerState = "loading" | "loaded" | "unloading";

export interface Runner {
  readonly model: Model;
  state: RunnerState;
  refCount: number;
  /** Keep-alive after the last request; 0 = unload when idle, FOREVER_MS = never. */
  durationMs: number;
  expiresAt: number;
  readonly hold: Hold;
  /** Bytes of the model in VRAM (/api/ps size_vram): less than its size when VRAM was short at load. */
  readonly sizeVram: number;
  readonly loaded: Promise<void>;
  unloaded?: Promise<void>;
  cancelExpiry?: () => void;
}

export interface Lease {
  /** How long this request waited for the model to be ready (load_duration). */
  readonly waitedMs: number;
  /** Idempotent: the runner goes idle (and maybe unloads) when its last lease is released. */
  release(): void;
}

export interface SchedulerTiming {
  loadMs: number;
  unloadMs: number;
  defaultKeepAliveMs: number;
}

export class Scheduler {
  private readonly runners = new Map<string, Runner>();

  constructor(
    private readonly gpu: SimGpu,
    private readonly timers: Timers,
    private readonly timing: SchedulerTiming,
  ) {}

  /**
   * Takes a reference on `model`'s runner, loading it first if needed. `keepAliveMs` replaces the
   * runner's keep-alive only when given, as Ollama does (a request without keep_alive keeps -1).
   */
  async acquire(model: Model, keepAliveMs: number | undefined, signal?: AbortSignal, nested = false): Promise<Lease> {
    const t0 = this.gpu.now();
    for (;;) {
      // After stop() every pending unload has settled without removing its runner: don't spin.
      if (this.timers.stopped) throw new AbortedError();
      const existing = this.runners.get(model.name);
      if (existing?.state === "unloading") {
        // A request for a model being unloaded waits for the unload, then loads it again.
        await raceAbort(existing.unloaded ?? Promise.resolve(), signal);
        continue;
      }
      const r = existing ?? this.load(model, keepAliveMs, nested);
      if (existing && keepAliveMs !== undefined) r.durationMs = keepAliveMs;
      r.refCount++;
      r.cancelExpiry?.();
      r.cancelExpiry = undefined;
      let released = false;
      const release = (): void => {
        if (released) return;
        released = true;
        r.refCount--;
        if (r.refCount === 0 && r.state === "loaded") this.idle(r);
      };
      try {
        await raceAbort(r.loaded, signal);
      } catch (e) {
        release();
        throw e;
      }
      return { waitedMs: this.gpu.now() - t0, release };
    }
  }

  /**
   * `keep_alive:0` with no prompt: mark the runner expired. Idle runners start unloading now;
   * busy or loading ones unload when their last request finishes. The caller replies at once.
   */
  expire(model: Model): void {
    const r = this.runners.get(model.name);
    if (!r || r.state === "unloading") return;
    r.durationMs = 0;
    r.expiresAt = this.gpu.now();
    if (r.state === "loaded" && r.refCount === 0) this.unload(r);
  }

  /** Runners as /api/ps lists them: loading, loaded and still unloading. */
  list(): Runner[] {
    return [...this.runners.values()];
  }

  /** Forget everything and give the GPU memory back, as a killed Ollama process would. */
  shutdown(): void {
    for (const r of this.runners.values()) {
      r.cancelExpiry?.();
      this.gpu.release(r.hold);
    }
    this.runners.clear();
  }

  private load(model: Model, keepAliveMs: number | undefined, nested: boolean): Runner {
    const durationMs = keepAliveMs ?? this.timing.defaultKeepAliveMs;
    const at = this.gpu.now();
    // The model occupies VRAM from the moment loading starts. Since v0.30 Ollama places as many
    // layers as fit in the VRAM that is free and the rest on the CPU (api-facts S2): the ledger
    // records only the VRAM part.
    const sizeVram = Math.min(model.vramBytes, Math.max(0, this.gpu.vramTotal - this.gpu.vramUsed()));
    const hold = this.gpu.acquire("ollama", model.name, sizeVram, { nested });
    this.gpu.note("load-start", "ollama", model.name);
    const r: Runner = {
      model,
      state: "loading",
      refCount: 0,
      durationMs,
      expiresAt: at + durationMs, // estimated while loading, as Ollama does
      hold,
      sizeVram,
      loaded: this.timers.sleep(this.timing.loadMs).then(() => {
        r.state = "loaded";
        this.gpu.note("loaded", "ollama", model.name);
        if (r.refCount === 0) this.idle(r);
      }),
    };
    r.loaded.catch(() => {}); // rejected only when the simulator stops
    this.runners.set(model.name, r);
    return r;
  }

  private idle(r: Runner): void {
    const now = this.gpu.now();
    if (r.durationMs <= 0) {
      this.unload(r);
      return;
    }
    r.expiresAt = now + r.durationMs;
    if (r.durationMs >= FOREVER_MS) return;
    r.cancelExpiry = this.timers.after(r.durationMs, () => {
      r.cancelExpiry = undefined;
      if (r.refCount === 0 && r.state === "loaded") this.unload(r);
    });
  }

  private unload(r: Runner): void {
    r.state = "unloading";
    r.cancelExpiry?.();
    r.cancelExpiry = undefined;
    this.gpu.note("unload-start", "ollama", r.model.name);
    r.unloaded = this.timers.sleep(this.timing.unloadMs).then(
      () => {
        // Leaving /api/ps and giving the memory back happen in the same instant, so a client
        // that saw the model gone from /api/ps can rely on the GPU being free.
        this.runners.delete(r.model.name);
        this.gpu.release(r.hold);
        this.gpu.note("unloaded", "ollama", r.model.name);
      },
      () => {},
    );
  }
}

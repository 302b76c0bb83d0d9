/**
 * The simulated GPU both simulators share. It exists to make the turnstile's invariant
 * observable: it keeps a ledger of every interval during which a tenant holds GPU memory and
 * reports each moment both tenants held some (`overlaps()`), plus every time the VRAM budget was
 * exceeded. It also carries the simulators' phase events for the demo's live timeline.
 */
import { now as clockNow } from "./clock.ts";

export type Tenant = "ollama" | "comfy";

/** One interval during which a tenant held GPU memory. `end` is null while it still holds it. */
export interface Hold {
  readonly id: number;
  readonly tenant: Tenant;
  /** Model name (Ollama) or the prompt_id that loaded the models (ComfyUI). */
  readonly detail: string;
  /** What it occupies now (a ComfyUI job's working memory changes through `resize`). */
  bytes: number;
  readonly start: number;
  end: number | null;
  /**
   * Ollama loaded this model for a request the turnstile served during an image job on its nested
   * listener (LISTEN_OLLAMA_NESTED): sharing the card with that job is the operator's choice.
   */
  readonly nested?: boolean;
}

export interface OverlapOptions {
  /**
   * Leave out what the nested listener does by design: a nested hold overlapping ComfyUI memory
   * that was already held when the model loaded (the job that asked for it). A ComfyUI hold that
   * starts later — the next job, after the turnstile should have emptied Ollama — still counts.
   */
  excuseNested?: boolean;
}

export interface Overlap {
  /** Detail of the Ollama hold. */
  ollama: string;
  /** Detail of the ComfyUI hold. */
  comfy: string;
  from: number;
  /** null while both still hold memory. */
  to: number | null;
}

export interface Oversubscription {
  at: number;
  tenant: Tenant;
  detail: string;
  usedBytes: number;
  totalBytes: number;
}

/** What a simulator is doing, for timelines. The memory kinds come from the GPU itself. */
export type GpuEventKind =
  | "hold" // a tenant starts holding memory
  | "free" // a hold ends
  | "overlap-start"
  | "overlap-end"
  | "oversubscribed"
  // phases reported by the simulators through `note()`
  | "load-start"
  | "loaded"
  | "unload-start"
  | "unloaded"
  | "job-queued"
  | "job-start"
  | "job-end"
  | "free-requested"
  | "freed";

export interface GpuEvent {
  kind: GpuEventKind;
  at: number;
  tenant: Tenant;
  detail: string;
  /** Total VRAM in use after the event. */
  vramUsed: number;
  /** On "overlap-start": the hold that began it was loaded for a nested request (see Hold). */
  nested?: boolean;
}

export type GpuListener = (e: GpuEvent) => void;

export interface SimGpuOptions {
  /** VRAM budget in bytes (default: an RTX 4090's 25386352640). */
  vramBytes?: number;
  /** Clock in epoch ms; injectable for pure tests. */
  now?: () => number;
}

export const DEFAULT_VRAM_BYTES = 25_386_352_640;

export class SimGpu {
  readonly vramTotal: number;
  /** Every hold ever taken, in start order. */
  readonly ledger: Hold[] = [];
  readonly oversubscriptions: Oversubscription[] = [];
  private readonly listeners = new Set<GpuListener>();
  private readonly clock: () => number;
  private nextId = 1;

  constructor(opts: SimGpuOptions = {}) {
    this.vramTotal = opts.vramBytes ?? DEFAULT_VRAM_BYTES;
    this.clock = opts.now ?? clockNow;
  }

  now(): number {
    return this.clock();
  }

  /** Starts holding `bytes` for `tenant`; returns the hold to pass to `release`. */
  acquire(tenant: Tenant, detail: string, bytes: number, opts: { nested?: boolean } = {}): Hold {
    const at = this.clock();
    const otherBefore = this.holding(other(tenant));
    const hold: Hold = { id: this.nextId++, tenant, detail, bytes, start: at, end: null, ...(opts.nested ? { nested: true } : {}) };
    this.ledger.push(hold);
    const used = this.vramUsed();
    this.emit({ kind: "hold", at, tenant, detail, vramUsed: used });
    if (used > this.vramTotal) {
      this.oversubscriptions.push({ at, tenant, detail, usedBytes: used, totalBytes: this.vramTotal });
      this.emit({ kind: "oversubscribed", at, tenant, detail, vramUsed: used });
    }
    if (otherBefore && this.active(tenant).length === 1) {
      this.emit({ kind: "overlap-start", at, tenant, detail, vramUsed: used, ...(hold.nested ? { nested: true } : {}) });
    }
    return hold;
  }

  /**
   * Changes what an open hold occupies (issue 31): a ComfyUI job's working memory follows its
   * workflow's curve. Growth past the card is recorded like an acquire's: the moment the card ran out.
   */
  resize(hold: Hold, bytes: number): void {
    if (hold.end !== null || bytes === hold.bytes) return;
    const grew = bytes > hold.bytes;
    hold.bytes = bytes;
    const used = this.vramUsed();
    if (grew && used > this.vramTotal) {
      const at = this.clock();
      this.oversubscriptions.push({ at, tenant: hold.tenant, detail: hold.detail, usedBytes: used, totalBytes: this.vramTotal });
      this.emit({ kind: "oversubscribed", at, tenant: hold.tenant, detail: hold.detail, vramUsed: used });
    }
  }

  /**
   * The card's invariant as a list of what broke it, empty when nothing did. Always: every moment
   * the tenants' footprints summed past the card's capacity. Without co-residency (COEXIST off,
   * the default) also today's rule: any overlap at all (see `overlaps`).
   */
  violations(opts: OverlapOptions & { coexist?: boolean } = {}): string[] {
    const out = this.oversubscriptions.map((o) => `${o.at}: ${o.tenant} ${o.detail} brought the card to ${o.usedBytes} of ${o.totalBytes} bytes`);
    if (!opts.coexist) for (const o of this.overlaps(opts)) out.push(`${o.from}-${o.to ?? "now"}: ollama ${o.ollama} overlapped comfy ${o.comfy}`);
    return out;
  }

  /** Ends a hold; releasing twice is a no-op so shutdown paths can be blunt. */
  release(hold: Hold): void {
    if (hold.end !== null) return;
    const at = this.clock();
    const wasOverlap = this.holding("ollama") && this.holding("comfy");
    hold.end = at;
    const used = this.vramUsed();
    this.emit({ kind: "free", at, tenant: hold.tenant, detail: hold.detail, vramUsed: used });
    if (wasOverlap && !(this.holding("ollama") && this.holding("comfy"))) {
      this.emit({ kind: "overlap-end", at, tenant: hold.tenant, detail: hold.detail, vramUsed: used });
    }
  }

  /** Holds still open, optionally for one tenant. */
  active(tenant?: Tenant): Hold[] {
    return this.ledger.filter((h) => h.end === null && (tenant === undefined || h.tenant === tenant));
  }

  holding(tenant: Tenant): boolean {
    return this.ledger.some((h) => h.end === null && h.tenant === tenant);
  }

  vramUsed(tenant?: Tenant): number {
    let sum = 0;
    for (const h of this.active(tenant)) sum += h.bytes;
    return sum;
  }

  /**
   * Every pair of an Ollama hold and a ComfyUI hold whose intervals intersect. Touching intervals
   * (one ends in the same instant the other starts) do not count: that is a clean hand-over; nor
   * does a hold of no bytes (a model wholly on the CPU).
   */
  overlaps(opts: OverlapOptions = {}): Overlap[] {
    const out: Overlap[] = [];
    const ollama = this.ledger.filter((h) => h.tenant === "ollama" && h.bytes > 0);
    const comfy = this.ledger.filter((h) => h.tenant === "comfy" && h.bytes > 0);
    for (const o of ollama) {
      for (const c of comfy) {
        if (opts.excuseNested && o.nested && c.start <= o.start) continue;
        const from = Math.max(o.start, c.start);
        const oEnd = o.end ?? Infinity;
        const cEnd = c.end ?? Infinity;
        const to = Math.min(oEnd, cEnd);
        if (from < to) out.push({ ollama: o.detail, comfy: c.detail, from, to: to === Infinity ? null : to });
      }
    }
    return out.sort((a, b) => a.from - b.from);
  }

  /** Reports a simulator phase (load, job, free…) to listeners; does not touch the ledger. */
  note(kind: GpuEventKind, tenant: Tenant, detail: string): void {
    this.emit({ kind, at: this.clock(), tenant, detail, vramUsed: this.vramUsed() });
  }

  /** Subscribes to events; returns the unsubscribe function. */
  on(listener: GpuListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private emit(e: GpuEvent): void {
    for (const l of this.listeners) {
      try {
        l(e);
      } catch {
        // A broken listener (a demo printer) must never break the simulation.
      }
    }
  }
}

function other(t: Tenant): Tenant {
  return t === "ollama" ? "comfy" : "ollama";
}

/**
 * Steering the GPU by hand (SPEC "Steering"): force-release the current hold, and GPU leases —
 * the whole card lent to a program outside the turnstile.
 *
 * A lease is taken from the lock like an image job (it waits behind running LLM work and image
 * sessions), then the card is emptied and checked: every Ollama model unloaded (/api/ps empty)
 * and ComfyUI's memory freed (/system_stats below the floor). Only then is it granted. It ends
 * when its holder returns it, when its TTL passes without a renewal, or on a force-release.
 */
import { vramReleased, type ComfyClient } from "../comfy/client.ts";
import { formatDuration } from "../config/duration.ts";
import { sleep } from "../http/backoff.ts";
import { stopJob } from "../jobs/follow.ts";
import type { Lease } from "../lock/index.ts";
import { handOver } from "../tenants/hand-over.ts";
import type { ImageTenant, LlmTenant } from "../tenants/types.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";

/** What the status document and the `lease` event show of the lease held. */
export interface LeaseView {
  id: string;
  holder: string;
  /** Who asked for it (client address). */
  by: string;
  /** Epoch ms. */
  since: number;
  /** Epoch ms. */
  expires_at: number;
}

export type LeaseEnd = "returned" | "expired" | "revoked" | "stopped";

/** A lease as kept across a restart (lease-file.ts): its view plus the TTL a renewal extends it by. */
export interface StoredLease extends LeaseView {
  ttl_ms: number;
}

export type LeaseEvent = { event: "grant" | "renew"; lease: LeaseView } | { event: "end"; lease: LeaseView; reason: LeaseEnd; by?: string };

export interface SteerLog {
  /** What needs a look: a force-release, a lease that expired. */
  warn(msg: string, fields?: Record<string, unknown>): void;
  /** What an operator did that is no problem (a lease granted or given back): shown at the default level too. */
  notice(msg: string, fields?: Record<string, unknown>): void;
}

export interface SteeringDeps {
  lock: { acquireLease(signal?: AbortSignal): Promise<Lease> };
  /** The LLM exchanges holding slots (the proxy's idle watches). */
  llm: { cutAll(err: Error): number };
  /** The image jobs being followed. */
  jobs: { active(): Iterable<{ promptId?: string }>; readonly interrupted?: Set<string> };
  /** ComfyUI's client when IMAGE_KIND is comfyui: its jobs are stopped and its memory freed to the absolute floor. */
  comfy: ComfyClient | undefined;
  /** The LLM side (LLM_KIND's driver), emptied and proven empty before a lease. */
  llmTenant?: LlmTenant;
  /** The image side when it is not ComfyUI (`comfy`), released and proven before a lease. */
  imageTenant?: ImageTenant;
  settings: {
    maxTtlMs: number;
    unloadTimeoutMs: number;
    unloadPollIntervalMs: number;
    probeTimeoutMs: number;
    freeTimeoutMs: number;
    pollMs: number;
  };
  log: SteerLog;
  onLease: (e: LeaseEvent) => void;
  /** Told of every force-release (the metrics count them). */
  onForceRelease?: () => void;
  /** Where the lease is kept so it survives a restart (absent: it ends with the process). */
  store?: { save(lease: StoredLease | null): void };
  /** Wall clock, epoch ms. */
  now?: () => number;
}

/** A lease request the turnstile refuses; `status` is the HTTP answer. */
export class LeaseRefused extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Said to LLM clients whose stream a force-release cut. */
export class ForceReleased extends Error {
  constructor(by: string) {
    super(`gpu-turnstile: the GPU was force-released by ${by}`);
  }
}

/** A lease asked for without a ttl (bounded by LEASE_MAX_TTL). */
const DEFAULT_TTL_MS = 2 * 3_600_000;

interface Held {
  view: LeaseView;
  ttlMs: number;
  lock: Lease;
  timer: ReturnType<typeof setTimeout>;
}

export class Steering {
  readonly #d: SteeringDeps;
  readonly #now: () => number;
  #held: Held | undefined;
  /** A lease whose card is being emptied: a force-release ends it before it is granted. */
  #preparing: AbortController | undefined;
  /** Leases asked for and waiting for the lock, oldest first: a force-release ends them too. */
  readonly #queued: { holder: string; by: string; since: number; cancel: AbortController }[] = [];

  constructor(deps: SteeringDeps) {
    this.#d = deps;
    this.#now = deps.now ?? Date.now;
  }

  current(): LeaseView | null {
    return this.#held ? { ...this.#held.view } : null;
  }

  /** Leases waiting for the card, oldest first (the status page's waiters). */
  waiting(): readonly { holder: string; by: string; since: number }[] {
    return this.#queued;
  }

  /**
   * Ends the current hold, whatever it is: a lease is revoked, LLM streams are cut (their slots
   * come back at once), running and queued image jobs are interrupted — each job then ends the
   * usual way, freeing ComfyUI before it hands the GPU on. The lock goes on to the next waiter.
   */
  async release(by: string): Promise<{ lease: string | null; llm_cut: number; jobs_interrupted: string[]; leases_cancelled: number }> {
    this.#preparing?.abort();
    this.#d.onForceRelease?.();
    const queued = this.#queued.splice(0);
    for (const q of queued) q.cancel.abort(new LeaseRefused(409, `gpu-turnstile: the GPU was force-released by ${by} while this lease waited for it`));
    const lease = this.#held ? this.#end("revoked", by) : null;
    const llmCut = this.#d.llm.cutAll(new ForceReleased(by));
    // A job's follow and its /free are tracked apart: one prompt id may show twice.
    const prompts = [...new Set([...this.#d.jobs.active()].flatMap((j) => (j.promptId ? [j.promptId] : [])))];
    const { comfy, settings } = this.#d;
    for (const id of prompts) this.#d.jobs.interrupted?.add(id);
    if (comfy) {
      // As the watchdog stops a job: /interrupt (and out of the pending queue), then wait until gone.
      await Promise.all(prompts.map((id) => stopJob(comfy, id, undefined, { stopTimeoutMs: settings.freeTimeoutMs, pollMs: settings.pollMs })));
    }
    // Plain values, so a log reader (and LOG_FORMAT=text) sees them as written.
    this.#d.log.warn(`force-release by ${by}`, { client: by, lease: lease ?? null, llm_cut: llmCut, jobs_interrupted: prompts.join(",") || null, leases_cancelled: queued.length });
    return { lease, llm_cut: llmCut, jobs_interrupted: prompts, leases_cancelled: queued.length };
  }

  /**
   * Waits for the GPU, empties it and grants the lease. Rejects with LeaseRefused when the card
   * could not be emptied (the lock is given back), or with `signal`'s reason when the asker left.
   */
  async take(holder: string, ttl: number | undefined, by: string, signal: AbortSignal): Promise<LeaseView> {
    const ttlMs = ttl ?? Math.min(DEFAULT_TTL_MS, this.#d.settings.maxTtlMs);
    this.#checkTtl(ttlMs);
    const entry = { holder, by, since: this.#now(), cancel: new AbortController() };
    this.#queued.push(entry);
    let lock: Lease;
    try {
      lock = await this.#d.lock.acquireLease(AbortSignal.any([signal, entry.cancel.signal]));
    } catch (err) {
      throw entry.cancel.signal.aborted ? entry.cancel.signal.reason : err;
    } finally {
      const i = this.#queued.indexOf(entry);
      if (i >= 0) this.#queued.splice(i, 1);
    }
    const preparing = (this.#preparing = new AbortController());
    try {
      const problem = await this.#emptyGpu();
      if (problem) throw new LeaseRefused(503, `gpu-turnstile: could not empty the GPU for the lease: ${problem}`);
      signal.throwIfAborted();
      if (preparing.signal.aborted) throw new LeaseRefused(409, "gpu-turnstile: the GPU was force-released while it was being emptied for this lease");
    } catch (err) {
      lock.release();
      throw err;
    } finally {
      this.#preparing = undefined;
    }
    const since = this.#now();
    const view: LeaseView = { id: crypto.randomUUID(), holder, by, since, expires_at: since + ttlMs };
    this.#held = { view, ttlMs, lock, timer: this.#arm(view.id, ttlMs) };
    this.#keep();
    // Leases are rare, deliberate and change what every client sees: said at the default level.
    this.#d.log.notice(`GPU leased to ${JSON.stringify(holder)}`, { lease: view.id, holder, client: by, ttl_ms: ttlMs });
    this.#d.onLease({ event: "grant", lease: { ...view } });
    return { ...view };
  }

  /** Pushes the lease's end out by `ttlMs` (default: the TTL it was granted with) from now. */
  renew(id: string, ttlMs?: number): LeaseView {
    const h = this.#find(id);
    const ttl = ttlMs ?? h.ttlMs;
    this.#checkTtl(ttl);
    clearTimeout(h.timer);
    h.ttlMs = ttl;
    h.view.expires_at = this.#now() + ttl;
    h.timer = this.#arm(id, ttl);
    this.#keep();
    this.#d.onLease({ event: "renew", lease: { ...h.view } });
    return { ...h.view };
  }

  /** The holder gives the GPU back. */
  giveBack(id: string): LeaseView {
    const view = { ...this.#find(id).view };
    this.#end("returned");
    return view;
  }

  /** Shutdown: the lease ends with this process but stays kept, and the next start takes it again. */
  stop(): void {
    if (this.#held) this.#end("stopped");
  }

  /**
   * At start, before anything else: the lease the last run kept is taken again, with its id, its
   * holder and its expiry, so its holder's renewals go on as if nothing happened. The card is
   * emptied again (what was loaded meanwhile must go); the lease is held from the first moment,
   * whether or not that succeeds — its holder is using the card. One that expired is dropped.
   */
  async restore(kept: StoredLease): Promise<void> {
    const left = kept.expires_at - this.#now();
    const fields = { lease: kept.id, holder: kept.holder };
    if (left <= 0) {
      this.#d.store?.save(null);
      this.#d.log.warn(`GPU lease of ${JSON.stringify(kept.holder)} expired while gpu-turnstile was down: dropped`, { ...fields, expired_at: new Date(kept.expires_at).toISOString() });
      return;
    }
    const lock = await this.#d.lock.acquireLease();
    const { ttl_ms: ttlMs, ...view } = kept;
    // A lower LEASE_MAX_TTL since (or a file edited by hand) bounds it like a new lease. The cap is
    // kept at once: otherwise every restart would cap it afresh from its own moment, and a lease
    // nobody renews would never end.
    const max = this.#d.settings.maxTtlMs;
    const capped = left > max || ttlMs > max;
    if (left > max) view.expires_at = this.#now() + max;
    this.#held = { view, ttlMs: Math.min(ttlMs, max), lock, timer: this.#arm(view.id, view.expires_at - this.#now()) };
    if (capped) this.#keep();
    const how = capped ? `, capped by LEASE_MAX_TTL (${formatDuration(max)})` : "";
    this.#d.log.notice(`GPU lease of ${JSON.stringify(kept.holder)} taken again after a restart${how}`, { ...fields, expires_at: new Date(view.expires_at).toISOString() });
    this.#d.onLease({ event: "grant", lease: { ...view } });
    void this.#emptyGpu().then((problem) => {
      if (problem) this.#d.log.warn("could not empty the GPU again for the lease taken after a restart; it stays held", { ...fields, reason: problem });
    });
  }

  #keep(): void {
    const h = this.#held;
    if (h) this.#d.store?.save({ ...h.view, ttl_ms: h.ttlMs });
  }

  #find(id: string): Held {
    const h = this.#held;
    if (!h || h.view.id !== id) throw new LeaseRefused(404, `gpu-turnstile: no lease ${JSON.stringify(id)} is held (it ended, or never was)`);
    return h;
  }

  #checkTtl(ttlMs: number): void {
    const max = this.#d.settings.maxTtlMs;
    if (!(ttlMs > 0)) throw new LeaseRefused(400, "gpu-turnstile: a lease needs a ttl above 0");
    if (ttlMs > max) throw new LeaseRefused(400, `gpu-turnstile: ttl ${formatDuration(ttlMs)} is above LEASE_MAX_TTL (${formatDuration(max)})`);
  }

  #arm(id: string, ttlMs: number): ReturnType<typeof setTimeout> {
    const timer = setTimeout(() => {
      if (this.#held?.view.id === id) this.#end("expired");
    }, ttlMs);
    timer.unref();
    return timer;
  }

  #end(reason: LeaseEnd, by?: string): string {
    const h = this.#held!;
    this.#held = undefined;
    clearTimeout(h.timer);
    h.lock.release();
    const heldMs = this.#now() - h.view.since;
    const fields = { lease: h.view.id, holder: h.view.holder, held_ms: heldMs, reason };
    if (reason === "stopped" && this.#d.store) {
      // Not an end for its holder: the next start takes it again, so no `end` event tells anyone it is over.
      this.#d.log.notice(`GPU lease of ${JSON.stringify(h.view.holder)} is kept for the next start, until its TTL`, { ...fields, expires_at: new Date(h.view.expires_at).toISOString() });
      return h.view.id;
    }
    this.#d.store?.save(null);
    if (reason === "expired") this.#d.log.warn(`GPU lease of ${JSON.stringify(h.view.holder)} expired: not renewed within its TTL`, fields);
    else this.#d.log.notice(`GPU lease of ${JSON.stringify(h.view.holder)} ended (${reason})`, fields);
    this.#d.onLease(by ? { event: "end", lease: { ...h.view }, reason, by } : { event: "end", lease: { ...h.view }, reason });
    return h.view.id;
  }

  /** Empties the LLM side and frees the image side, each proven from its own report; a reason when either fails. */
  async #emptyGpu(): Promise<string | undefined> {
    const { llmTenant, imageTenant, comfy, settings } = this.#d;
    if (llmTenant) {
      const r = await handOver(llmTenant, { timeoutMs: settings.unloadTimeoutMs, pollMs: settings.unloadPollIntervalMs, callTimeoutMs: settings.probeTimeoutMs });
      if (!r.released) return `${llmTenant.label} still holds a model (${r.error ?? "unknown"})`;
    }
    if (imageTenant && !comfy) {
      const r = await handOver(imageTenant, { timeoutMs: settings.freeTimeoutMs, pollMs: settings.pollMs, callTimeoutMs: settings.probeTimeoutMs });
      if (!r.released) return `${imageTenant.label} did not free its memory (${r.error ?? "unknown"})`;
    }
    if (comfy) {
      const deadline = performance.now() + settings.freeTimeoutMs;
      try {
        await comfy.free(settings.freeTimeoutMs);
        for (;;) {
          // An outside program needs the card empty, not merely emptier: the absolute floor.
          if (vramReleased(0, await comfy.torchReserved(settings.freeTimeoutMs))) break;
          const left = deadline - performance.now();
          if (left <= 0) return `ComfyUI did not free its memory within FREE_TIMEOUT (${settings.freeTimeoutMs} ms)`;
          await sleep(Math.min(settings.pollMs, left));
        }
      } catch (err) {
        return `ComfyUI could not be freed (${describeFetchError(err)})`;
      }
    }
    return undefined;
  }
}

import { FairTurns } from "../fair/turns.ts";
import { turnsAhead } from "./llm-turn.ts";
import type { GpuLockOptions, GpuState, ImageClient, ImageLease, Lease, LeaseKind, LineEntry, LlmLineEntry, LockEvent, LockSnapshot } from "./types.ts";

/**
 * The two-mode, writer-preferring lock of the SPEC: "readers" are LLM requests (any number at
 * once), the single "writer" is an image job.
 *
 * Every public operation is one synchronous step: it mutates the counters, grants whatever has
 * become grantable, and only then tells listeners. Grants resolve promises, which callers see a
 * microtask later, but snapshot() reflects a grant the moment it is decided. Because of that a
 * waiter is settled exactly once and never both ways: a waiter whose signal has already aborted
 * is never granted (even when an earlier abort listener releases a lease mid-abort), and an abort
 * that comes after the grant is ignored — the lease belongs to the caller, who must release it.
 * So there is no "granted but rejected" lease to clean up.
 *
 * Priority and starvation: image jobs always go before waiting LLM requests. An image that
 * releases while another image waits hands the GPU straight to it, and a new LLM request waits as
 * soon as any image waits. A steady stream of image jobs can therefore starve LLM requests
 * indefinitely. The SPEC asks for exactly this ("two-mode lock with image priority"): without it
 * steady chat traffic would keep n > 0 and starve image jobs instead. LLM waits are bounded by the
 * caller's signal (LLM_WAIT_TIMEOUT), so a starved LLM request gets a 503, not a hang.
 *
 * Transitions: one step emits at most one "transition", from the state before the step to the
 * state after it, and only when they differ. Releasing the last LLM while an image waits hands
 * the GPU over in the same step, so listeners see llm → image directly, never an idle in between;
 * likewise image → llm when an image releases and LLMs were waiting.
 *
 * Event order within a step: the cause ("released" / "abandoned"), then "transition", then the
 * "acquired" events. A listener may call back into the lock; its events are queued and delivered
 * after the current ones, so every listener sees one global order.
 *
 * Ids: every acquireLLM/acquireImage call takes the next id (starting at 1), even one that
 * rejects at once; tryAcquireLLM takes one only when it returns a lease.
 *
 * Image sessions (`imageSessionMaxMs` > 0): the first image grant opens a session, and while it
 * is open every further image job joins it at once (ComfyUI queues them itself); the state stays
 * `image` until the session's last lease is released. A session stops admitting when its holder
 * closes it (`closeIfLast`, before the final /free) or, while LLM requests wait, once it has
 * lasted `imageSessionMaxMs`; image jobs that arrive then queue. Between a session and waiting LLM
 * requests the order is FIFO by call: when a session ends, the LLM requests that called before
 * the first queued image job go first, and that image job opens the next session once they have
 * drained. With `imageSessionMaxMs` 0 (the default) every image job is its own session and the
 * image priority above holds unchanged.
 *
 * GPU leases (`acquireLease`): the whole card for a program outside the turnstile. A lease queues
 * with the image jobs and is granted like one (no LLM in flight, no image session open), but it
 * opens no session and nothing joins it: while it is held no LLM slot and no image job is granted.
 *
 * Fair turns (issue 30): which waiting image job (or GPU lease) goes next is decided by FairTurns,
 * not by call order: jobs that name a client take turns across clients and classes; those that
 * name none are each a client of their own, so among themselves they keep call order. In a
 * session a named client has at most one job at a time: its next waits (and keeps its turn) until
 * that one leaves. So that a client's jobs one after another still make one session (one
 * checkpoint load), the session's last member hands over to a waiter that may join instead of
 * closing (`closeIfLast` grants that waiter in the same step and returns false). The FIFO rule
 * between sessions and LLM requests is unchanged: it compares with the oldest image waiter. A job
 * of a `chatsFirst` class (FAIR_CHATS_FIRST) joins no session while a chat waits: a batch client's
 * session then ends after the job it has in ComfyUI, and the chat goes before its next.
 */
/** The class of a waiter that names no client (a lease, a job picked up at start): FAIR_CLASSES' default. */
const ANONYMOUS_CLASS = "normal";

export class GpuLock {
  readonly #now: () => number;
  readonly #onListenerError: (error: unknown, event: LockEvent) => void;
  readonly #listeners = new Set<(e: LockEvent) => void>();

  readonly #sessionMaxMs: number;

  #llmInflight = 0;
  /** An outside program holds the whole GPU. */
  #leased = false;
  /** The image session holding the GPU, if any. */
  #session: Session | undefined;
  /** In call order (the oldest decides the LLM rules); who goes next is #turns' choice. */
  readonly #imageQueue: Waiter[] = [];
  readonly #turns: FairTurns<Waiter>;
  /** Classes whose image jobs join no session while a chat waits. */
  readonly #chatsFirst: ReadonlySet<string>;
  readonly #llmQueue: Waiter[] = [];
  /** The state last announced; equal to #derive() between steps. */
  #state: GpuState = "idle";
  #nextId = 1;

  // Per-step scratch: filled while mutating, flushed by #finish().
  #causes: LockEvent[] = [];
  #grants: LockEvent[] = [];
  readonly #outbox: LockEvent[] = [];
  #delivering = false;

  constructor(opts: GpuLockOptions = {}) {
    this.#now = opts.now ?? (() => performance.now());
    this.#onListenerError = opts.onListenerError ?? (() => {});
    this.#sessionMaxMs = opts.imageSessionMaxMs ?? 0;
    this.#turns = new FairTurns<Waiter>(opts.turnClasses ?? [{ name: "normal", weight: 1 }]);
    this.#chatsFirst = new Set((opts.turnClasses ?? []).filter((c) => c.chatsFirst).map((c) => c.name));
  }

  get state(): GpuState {
    return this.#state;
  }

  snapshot(): LockSnapshot {
    return {
      state: this.#state,
      llmInflight: this.#llmInflight,
      imagePending: this.#imageQueue.length > 0,
      imageWaiting: this.#imageQueue.length,
      llmWaiting: this.#llmQueue.length,
    };
  }

  /**
   * The image jobs and leases waiting, in the order they will be taken if nobody joins (fair
   * turns); a session's per-client limit can let a later one join first.
   */
  imageLine(): LineEntry[] {
    return this.#turns.entries().map((w) => ({ kind: w.kind, client: w.named ? w.client : undefined, cls: w.cls, tag: w.tag }));
  }

  /**
   * The LLM requests waiting, oldest first, each with how many of imageLine()'s entries go before
   * its LLM turn (llm-turn.ts; `chatsFirst` image jobs never do: they wait while a chat waits).
   */
  llmLine(): LlmLineEntry[] {
    if (this.#llmQueue.length === 0) return [];
    const line = this.#turns.entries().filter((w) => this.#blocks(w));
    // #joinable without its per-moment rules (a lease called first, a client with a job in the
    // session): a leaver could lift those, so the count must not rest on them.
    const s = this.#session;
    const admitting = s !== undefined && !s.closing && this.#now() - s.startedAt < this.#sessionMaxMs;
    return this.#llmQueue.map((w) => ({ client: w.named ? w.client : undefined, cls: w.cls, tag: w.tag, ahead: turnsAhead(line, w.id, this.#sessionMaxMs > 0, admitting) }));
  }

  onEvent(listener: (e: LockEvent) => void): () => void {
    // Wrap so the same function can subscribe twice and unsubscribe each independently.
    const entry = (e: LockEvent) => listener(e);
    this.#listeners.add(entry);
    return () => {
      this.#listeners.delete(entry);
    };
  }

  /** `who`: its client, for its place in line only (llmLine; LLM requests take no fair turns). */
  acquireLLM(signal?: AbortSignal, who?: ImageClient): Promise<Lease> {
    const id = this.#nextId++;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const at = this.#now();
    if (!this.#llmMayEnter()) return this.#enqueue(this.#llmQueue, "llm", id, at, signal, who);
    const lease = this.#take("llm", id, at, at);
    this.#finish(at);
    return Promise.resolve(lease);
  }

  /** For LLM_BUSY_MODE=reject: a lease when one is free right now, null when it would have to wait. */
  tryAcquireLLM(): Lease | null {
    if (!this.#llmMayEnter()) return null;
    const at = this.#now();
    const lease = this.#take("llm", this.#nextId++, at, at);
    this.#finish(at);
    return lease;
  }

  acquireImage(signal?: AbortSignal, who?: ImageClient): Promise<ImageLease> {
    const id = this.#nextId++;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const at = this.#now();
    // Queue first, then dispatch: an idle GPU or an open session grants at once, otherwise the
    // queue blocks new LLMs.
    const promise = this.#enqueue(this.#imageQueue, "image", id, at, signal, who) as Promise<ImageLease>;
    this.#dispatch(at);
    this.#finish(at);
    return promise;
  }

  /** The whole GPU for an outside program: queued and granted like an image job, exclusive of everything. */
  acquireLease(signal?: AbortSignal): Promise<Lease> {
    const id = this.#nextId++;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const at = this.#now();
    const promise = this.#enqueue(this.#imageQueue, "lease", id, at, signal);
    this.#dispatch(at);
    this.#finish(at);
    return promise;
  }

  #llmMayEnter(): boolean {
    // While LLMs wait an image is held or pending, so this also keeps LLMs from overtaking them.
    // A chatsFirst class's job does not hold chats back: it waits while a chat waits anyway.
    return this.#session === undefined && !this.#leased && this.#oldestBlocking() === undefined;
  }

  /** Whether an image job may join the running session now (see the class comment). */
  #joinable(at: number): boolean {
    const s = this.#session;
    if (s === undefined || s.closing || this.#sessionMaxMs <= 0 || this.#imageQueue[0]?.kind === "lease") return false;
    return this.#llmQueue.length === 0 || at - s.startedAt < this.#sessionMaxMs;
  }

  #derive(): GpuState {
    if (this.#leased) return "lease";
    if (this.#session) return "image";
    return this.#llmInflight > 0 ? "llm" : "idle";
  }

  #enqueue(queue: Waiter[], kind: LeaseKind, id: number, calledAt: number, signal?: AbortSignal, who?: ImageClient): Promise<Lease> {
    return new Promise<Lease>((resolve, reject) => {
      // One that names no client is a client of its own (first come, first served among those).
      const waiter: Waiter = { kind, id, calledAt, resolve, reject, signal, settled: false, onAbort: undefined, named: who !== undefined, client: who?.client ?? `#${id}`, cls: who?.cls ?? ANONYMOUS_CLASS, tag: who?.tag };
      if (signal) {
        waiter.onAbort = () => this.#abandon(waiter);
        signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      queue.push(waiter);
      if (queue === this.#imageQueue) this.#turns.add(waiter);
    });
  }

  /** Takes a waiter out of the image queue: its turn (`served`, about to be granted) or gone. */
  #unqueueImage(waiter: Waiter, served: boolean): void {
    const i = this.#imageQueue.indexOf(waiter);
    if (i >= 0) this.#imageQueue.splice(i, 1);
    if (served) this.#turns.taken(waiter.id);
    else this.#turns.remove(waiter.id);
  }

  /**
   * The image waiter whose turn it is. In a session, only image jobs may join, and a named client
   * only while it has no job in the session (`leaving`: a client whose job is about to leave).
   */
  #nextImage(session: Session | undefined, leaving?: string): Waiter | undefined {
    const chatWaits = this.#llmQueue.length > 0;
    if (!session) return this.#turns.peek((w) => !chatWaits || this.#blocks(w));
    return this.#turns.peek(
      (w) => w.kind === "image" && (!w.named || (session.clients.get(w.client) ?? 0) - (w.client === leaving ? 1 : 0) <= 0) && (!chatWaits || this.#blocks(w)),
    );
  }

  /** Whether a waiter goes before chats that called after it (all but a `chatsFirst` class's images). */
  #blocks(w: Waiter): boolean {
    return w.kind !== "image" || !this.#chatsFirst.has(w.cls);
  }

  /** The oldest image waiter that chats queue behind (see #blocks). */
  #oldestBlocking(): Waiter | undefined {
    return this.#chatsFirst.size === 0 ? this.#imageQueue[0] : this.#imageQueue.find((w) => this.#blocks(w));
  }

  /** Grants everything that has become grantable. Idempotent between steps. */
  #dispatch(at: number): void {
    for (;;) {
      this.#dispatchImages(at);
      if (this.#session || this.#leased) return;
      // No session: the waiting LLM requests go at once, except those behind an image job — with
      // sessions, those that called after it; without, all of them (image priority).
      const head = this.#oldestBlocking();
      const firstImage = head === undefined ? Infinity : this.#sessionMaxMs > 0 ? head.id : -Infinity;
      let n = 0;
      while (n < this.#llmQueue.length && this.#llmQueue[n]!.id < firstImage) n++;
      if (n === 0) return;
      for (const waiter of this.#llmQueue.splice(0, n)) this.#grant(waiter, at);
      // All of them had aborted unseen: the image job behind them may go now.
      if (this.#llmInflight > 0) return;
    }
  }

  #dispatchImages(at: number): void {
    for (;;) {
      if (this.#leased) return;
      if (this.#session) {
        const next = this.#nextImage(this.#session);
        if (next === undefined || !this.#joinable(at)) return;
        this.#unqueueImage(next, true);
        this.#grant(next, at);
        continue;
      }
      const next = this.#nextImage(undefined);
      if (next === undefined) return;
      if (this.#llmInflight > 0) return; // the image waits for in-flight LLM work to drain
      // Sessions: LLM requests that called before the oldest image job go first (FIFO between them).
      if (this.#sessionMaxMs > 0 && (this.#llmQueue[0]?.id ?? Infinity) < (this.#oldestBlocking() ?? next).id) return;
      this.#unqueueImage(next, true);
      if (this.#grant(next, at) && (this.#sessionMaxMs <= 0 || next.kind === "lease")) return;
      // next had aborted without our listener having run yet, or it opened a session others may join.
    }
  }

  /** Settles a dequeued waiter: granted (true) or, if its signal already aborted, rejected (false). */
  #grant(waiter: Waiter, at: number): boolean {
    waiter.settled = true;
    const { signal } = waiter;
    if (waiter.onAbort) signal?.removeEventListener("abort", waiter.onAbort);
    if (signal?.aborted) {
      this.#causes.push({ type: "abandoned", kind: waiter.kind, waitedMs: at - waiter.calledAt, reason: signal.reason, id: waiter.id });
      waiter.reject(signal.reason);
      return false;
    }
    waiter.resolve(this.#take(waiter.kind, waiter.id, waiter.calledAt, at, waiter.named ? waiter.client : undefined));
    return true;
  }

  #take(kind: LeaseKind, id: number, calledAt: number, at: number, client?: string): Lease {
    const waitedMs = at - calledAt;
    this.#grants.push({ type: "acquired", kind, waitedMs, id });
    const release = () => this.#release(kind, id, at, client);
    if (kind === "llm") {
      this.#llmInflight++;
      return new GrantedLease(kind, waitedMs, id, release);
    }
    if (kind === "lease") {
      this.#leased = true;
      return new GrantedLease(kind, waitedMs, id, release);
    }
    const opens = this.#session === undefined;
    const session = (this.#session ??= { id, startedAt: at, members: 0, closing: false, clients: new Map() });
    session.members++;
    if (client !== undefined) session.clients.set(client, (session.clients.get(client) ?? 0) + 1);
    const lease = new GrantedLease(kind, waitedMs, id, release) as GrantedLease & ImageLease;
    return Object.assign(lease, {
      opensSession: opens,
      sessionId: session.id,
      closeIfLast: () => {
        if (lease.released || session.members !== 1) return false;
        if (this.#handOver(session, client)) return false;
        session.closing = true;
        return true;
      },
    });
  }

  /**
   * The session's last member is leaving: grants the waiter whose turn it is and that may join,
   * so the session (and ComfyUI's loaded checkpoint) goes on. True when one was granted.
   */
  #handOver(session: Session, leaving: string | undefined): boolean {
    const at = this.#now();
    let granted = false;
    for (;;) {
      if (session.closing || !this.#joinable(at)) break;
      const next = this.#nextImage(session, leaving);
      if (next === undefined) break;
      this.#unqueueImage(next, true);
      if ((granted = this.#grant(next, at))) break;
    }
    this.#finish(at);
    return granted;
  }

  #release(kind: LeaseKind, id: number, grantedAt: number, client?: string): void {
    const at = this.#now();
    if (kind === "llm") this.#llmInflight--;
    else if (kind === "lease") this.#leased = false;
    else {
      const session = this.#session!;
      if (client !== undefined) {
        const n = (session.clients.get(client) ?? 1) - 1;
        if (n > 0) session.clients.set(client, n);
        else session.clients.delete(client);
      }
      if (--session.members === 0) this.#session = undefined;
    }
    this.#causes.push({ type: "released", kind, heldMs: at - grantedAt, id });
    this.#dispatch(at);
    this.#finish(at);
  }

  #abandon(waiter: Waiter): void {
    if (waiter.settled) return;
    waiter.settled = true;
    if (waiter.kind === "llm") {
      const i = this.#llmQueue.indexOf(waiter);
      if (i >= 0) this.#llmQueue.splice(i, 1);
    } else this.#unqueueImage(waiter, false);
    const at = this.#now();
    const reason = waiter.signal?.reason;
    this.#causes.push({ type: "abandoned", kind: waiter.kind, waitedMs: at - waiter.calledAt, reason, id: waiter.id });
    waiter.reject(reason);
    // An aborted image may have been the only thing holding waiting LLM requests back.
    this.#dispatch(at);
    this.#finish(at);
  }

  /** Ends a step: announces the cause, the state change if any, and the grants, in that order. */
  #finish(at: number): void {
    const events = this.#causes;
    this.#causes = [];
    const to = this.#derive();
    if (to !== this.#state) {
      const from = this.#state;
      this.#state = to;
      events.push({ type: "transition", from, to, at, snapshot: this.snapshot() });
    }
    events.push(...this.#grants);
    this.#grants = [];
    this.#outbox.push(...events);
    this.#deliver();
  }

  #deliver(): void {
    if (this.#delivering) return; // a listener called back into the lock; the outer loop delivers
    this.#delivering = true;
    try {
      for (let e = this.#outbox.shift(); e !== undefined; e = this.#outbox.shift()) {
        for (const listener of [...this.#listeners]) {
          try {
            listener(e);
          } catch (error) {
            try {
              this.#onListenerError(error, e);
            } catch {
              // The error reporter failed too; the lock must still not break.
            }
          }
        }
      }
    } finally {
      this.#delivering = false;
    }
  }
}

interface Session {
  /** The id of the lease that opened it. */
  readonly id: number;
  readonly startedAt: number;
  /** Image leases granted in this session and not yet released. */
  members: number;
  /** Closed by its last member: no one joins any more. */
  closing: boolean;
  /** Named clients' jobs in it (fair turns: one each at a time). */
  readonly clients: Map<string, number>;
}

interface Waiter {
  readonly kind: LeaseKind;
  readonly id: number;
  readonly calledAt: number;
  readonly resolve: (lease: Lease) => void;
  readonly reject: (reason: unknown) => void;
  readonly signal: AbortSignal | undefined;
  /** True once granted or abandoned; guards against a late abort listener call. */
  settled: boolean;
  onAbort: (() => void) | undefined;
  /** Fair turns: whether the caller named a client (else `client` is unique to this waiter). */
  readonly named: boolean;
  readonly client: string;
  readonly cls: string;
  readonly tag: number | undefined;
}

class GrantedLease implements Lease {
  readonly kind: LeaseKind;
  readonly waitedMs: number;
  readonly id: number;
  #onRelease: (() => void) | undefined;

  constructor(kind: LeaseKind, waitedMs: number, id: number, onRelease: () => void) {
    this.kind = kind;
    this.waitedMs = waitedMs;
    this.id = id;
    this.#onRelease = onRelease;
  }

  get released(): boolean {
    return this.#onRelease === undefined;
  }

  release(): void {
    const onRelease = this.#onRelease;
    this.#onRelease = undefined; // cleared first, so a listener re-entering release() is a no-op too
    onRelease?.();
  }
}

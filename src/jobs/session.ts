/**
 * Image sessions (SPEC "Image sessions"): once the GPU is in the image state, further image jobs
 * are forwarded to ComfyUI at once and ComfyUI queues them, so its checkpoint stays loaded from
 * one picture to the next. The lock decides who may join (IMAGE_SESSION_MAX); this module does
 * what a session owes the GPU around that: empty Ollama once, when a session opens (a joiner
 * waits until that is done), and free ComfyUI once, when the last job leaves.
 */
import type { ImageClient } from "../lock/index.ts";

/** The lock's image side, as a session uses it (GpuLock in production). */
export interface SessionLock {
  /** `who`: the client the job is for (fair turns, issue 30); none = first come, first served. */
  acquireImage(signal?: AbortSignal, who?: ImageClient): Promise<SessionLease>;
}

export interface SessionLease {
  readonly waitedMs: number;
  readonly opensSession: boolean;
  readonly sessionId: number;
  closeIfLast(): boolean;
  release(): void;
}

/** A session that ran ComfyUI jobs has ended (for the log and the jobs-per-session histogram). */
export interface SessionEnd {
  jobs: number;
  durationMs: number;
}

interface Session {
  readonly id: number;
  readonly startedAt: number;
  /** Resolves once Ollama has been emptied for this session. */
  readonly ready: Promise<void>;
  /** Jobs ComfyUI accepted in this session: when > 0 its end needs /free. */
  accepted: number;
  /** Ollama has been emptied: ComfyUI may be running the session's jobs. */
  prepared: boolean;
  /** Its last job has left: the session is ending (nested requests go through the lock again). */
  ending: boolean;
  /** Nested LLM requests running as part of the session's jobs (the nested listener). */
  readonly nested: Set<NestedEntry>;
}

interface NestedEntry {
  cut?: (err: Error) => void;
  /** Set when the session's end let go of it (cut, or never sent by then). */
  over?: boolean;
  readonly done: Promise<void>;
}

/** How a session's end treats the nested requests still running (LISTEN_OLLAMA_NESTED). */
export interface NestedDrain {
  /** The longest the end waits for them (FREE_TIMEOUT) before cutting them. */
  timeoutMs: number;
  /** Called with how many were cut, when any were. */
  onCut(n: number): void;
}

/** A nested request's place in a session: `release` when it ends; `onCut` names how to end it early. */
export interface NestedTicket {
  release(): void;
  /**
   * False once the session's end has let go of this request: one whose body was still arriving
   * then must not be sent as part of a job that is over (the card may be another job's by now).
   */
  live(): boolean;
  onCut(cut: (err: Error) => void): void;
}

export class ImageSessions {
  /** The sessions with jobs in them (one, except while one ends and the next begins). */
  readonly #open = new Map<number, Session>();
  /** prompt_ids of the jobs being followed, so a job queued behind one of ours is known as such. */
  readonly #prompts = new Set<string>();

  constructor(
    private readonly lock: SessionLock,
    private readonly onEnd: (e: SessionEnd) => void,
    private readonly drain: NestedDrain = { timeoutMs: 0, onCut: () => {} },
  ) {}

  /**
   * Takes the GPU for one attempt of one job. The first of a session's jobs to get here starts
   * `prepare` (empty Ollama); every ticket's `ready()` resolves once that has finished, so no job
   * reaches ComfyUI before Ollama is empty.
   */
  async enter(signal: AbortSignal, prepare: () => Promise<void>, who?: ImageClient): Promise<SessionTicket> {
    const lease = await this.lock.acquireImage(signal, who);
    // Whichever of the session's jobs gets here first empties Ollama (normally the opener, whose
    // grant resolves first); the others wait for that.
    let session = this.#open.get(lease.sessionId);
    if (!session) {
      const s: Session = { id: lease.sessionId, startedAt: performance.now(), accepted: 0, prepared: false, ending: false, nested: new Set(), ready: prepare().catch(() => {}).then(() => void (s.prepared = true)) };
      this.#open.set(s.id, (session = s));
    }
    return new SessionTicket(lease, session, this.drain, (e) => {
      this.#open.delete(e.id);
      if (e.jobs > 0) this.onEnd({ jobs: e.jobs, durationMs: e.durationMs });
    });
  }

  /** Marks a prompt as followed by this turnstile until `done` is called. */
  follow(promptId: string): { done(): void } {
    this.#prompts.add(promptId);
    return { done: () => this.#prompts.delete(promptId) };
  }

  owns(promptId: string): boolean {
    return this.#prompts.has(promptId);
  }

  /**
   * A nested LLM request (SPEC "Nested LLM requests") joins the session whose jobs may be running
   * in ComfyUI now: Ollama was emptied for it (so its /prompt went on) and its last job has not
   * left. Not "ComfyUI accepted a job": ComfyUI may start the job, and its node call us, before
   * its answer to /prompt has reached the turnstile. undefined otherwise — the request then waits
   * for the lock like any other.
   */
  joinNested(): NestedTicket | undefined {
    for (const s of this.#open.values()) {
      if (!s.prepared || s.ending) continue;
      let release!: () => void;
      const entry: NestedEntry = { done: new Promise<void>((r) => (release = r)) };
      s.nested.add(entry);
      return {
        release: () => {
          s.nested.delete(entry);
          release();
        },
        live: () => !entry.over,
        onCut: (cut) => void (entry.cut = cut),
      };
    }
    return undefined;
  }
}

export class SessionTicket {
  #left = false;

  constructor(
    private readonly lease: SessionLease,
    private readonly session: Session,
    private readonly drain: NestedDrain,
    private readonly onEnd: (e: SessionEnd & { id: number }) => void,
  ) {}

  get waitedMs(): number {
    return this.lease.waitedMs;
  }

  get opensSession(): boolean {
    return this.lease.opensSession;
  }

  /** Resolves once Ollama has been emptied for this session. */
  ready(): Promise<void> {
    return this.session.ready;
  }

  /** ComfyUI accepted this job: the session's end now owes a /free. */
  accepted(): void {
    this.session.accepted++;
  }

  /**
   * Leaves the session; idempotent. The last one out runs `finish` (/free and its check) before
   * the GPU is handed on — when ComfyUI took any job in this session — and gets true.
   */
  async leave(finish: () => Promise<void>): Promise<boolean> {
    if (this.#left) return false;
    this.#left = true;
    if (!this.lease.closeIfLast()) {
      this.lease.release();
      return false;
    }
    const s = this.session;
    s.ending = true;
    try {
      await this.#drainNested();
      if (s.accepted > 0) await finish();
    } finally {
      this.lease.release();
    }
    this.onEnd({ id: s.id, jobs: s.accepted, durationMs: performance.now() - s.startedAt });
    return true;
  }

  /**
   * The session's end waits for the nested requests its jobs started, at most the drain's
   * timeout, then cuts those still running: the card is not handed on with an LLM answer in flight
   * that the lock does not count.
   */
  async #drainNested(): Promise<void> {
    const nested = this.session.nested;
    if (nested.size === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<void>((r) => (timer = setTimeout(r, this.drain.timeoutMs)));
    await Promise.race([Promise.all([...nested].map((e) => e.done)), timeout]);
    clearTimeout(timer);
    if (nested.size === 0) return;
    const left = [...nested];
    this.drain.onCut(left.length);
    for (const e of left) {
      e.over = true;
      e.cut?.(new Error("gpu-turnstile: the image job that made this nested request has ended"));
    }
    nested.clear();
  }
}

/**
 * Image sessions (SPEC "Image sessions"): once the GPU is in the image state, further image jobs
 * are forwarded to ComfyUI at once and ComfyUI queues them, so its checkpoint stays loaded from
 * one picture to the next. The lock decides who may join (IMAGE_SESSION_MAX); this module does
 * what a session owes the GPU around that: empty Ollama once, when a session opens (a joiner
 * waits until that is done), and free ComfyUI once, when the last job leaves.
 */

/** The lock's image side, as a session uses it (GpuLock in production). */
export interface SessionLock {
  acquireImage(signal?: AbortSignal): Promise<SessionLease>;
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
}

export class ImageSessions {
  /** The sessions with jobs in them (one, except while one ends and the next begins). */
  readonly #open = new Map<number, Session>();
  /** prompt_ids of the jobs being followed, so a job queued behind one of ours is known as such. */
  readonly #prompts = new Set<string>();

  constructor(
    private readonly lock: SessionLock,
    private readonly onEnd: (e: SessionEnd) => void,
  ) {}

  /**
   * Takes the GPU for one attempt of one job. The first of a session's jobs to get here starts
   * `prepare` (empty Ollama); every ticket's `ready()` resolves once that has finished, so no job
   * reaches ComfyUI before Ollama is empty.
   */
  async enter(signal: AbortSignal, prepare: () => Promise<void>): Promise<SessionTicket> {
    const lease = await this.lock.acquireImage(signal);
    // Whichever of the session's jobs gets here first empties Ollama (normally the opener, whose
    // grant resolves first); the others wait for that.
    let session = this.#open.get(lease.sessionId);
    if (!session) {
      session = { id: lease.sessionId, startedAt: performance.now(), accepted: 0, ready: prepare().catch(() => {}) };
      this.#open.set(session.id, session);
    }
    return new SessionTicket(lease, session, (e) => {
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
}

export class SessionTicket {
  #left = false;

  constructor(
    private readonly lease: SessionLease,
    private readonly session: Session,
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
    try {
      if (s.accepted > 0) await finish();
    } finally {
      this.lease.release();
    }
    this.onEnd({ id: s.id, jobs: s.accepted, durationMs: performance.now() - s.startedAt });
    return true;
  }
}

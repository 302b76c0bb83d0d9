import type { TurnClass } from "../fair/turns.ts";

/** What the GPU is doing right now. `lease`: lent whole to a program outside the turnstile. */
export type GpuState = "idle" | "llm" | "image" | "lease";

/**
 * What a lease holds: one of N LLM slots, the single image slot, or the whole GPU for an outside
 * program (`lease`: exclusive of everything, queued like an image job).
 */
export type LeaseKind = "llm" | "image" | "lease";

export interface Lease {
  readonly kind: LeaseKind;
  /** now() at grant − now() at the acquire call. */
  readonly waitedMs: number;
  /** Taken at the acquire call, so ids rise in call order (see GpuLock for the exact rule). */
  readonly id: number;
  /** Gives the slot back. Idempotent: later calls are no-ops. */
  release(): void;
}

/** An image lease: one job's place in an image session (see GpuLock). */
export interface ImageLease extends Lease {
  /** This grant opened the session: the GPU was handed over for it (Ollama must be emptied). */
  readonly opensSession: boolean;
  /** The session's number: the id of the lease that opened it. */
  readonly sessionId: number;
  /**
   * When this is the session's only lease left, closes the session to newcomers and returns true:
   * the caller frees ComfyUI, then releases, which ends the session. Otherwise false (and the
   * release just leaves the session).
   */
  closeIfLast(): boolean;
}

export interface LockSnapshot {
  state: GpuState;
  llmInflight: number;
  /** True while at least one image job waits for the GPU (new LLM requests are held back). */
  imagePending: boolean;
  imageWaiting: number;
  llmWaiting: number;
}

export type LockEvent =
  | { type: "transition"; from: GpuState; to: GpuState; at: number; snapshot: LockSnapshot }
  | { type: "acquired"; kind: LeaseKind; waitedMs: number; id: number }
  | { type: "released"; kind: LeaseKind; heldMs: number; id: number }
  /** A waiter whose signal aborted before it was granted. `id` is an addition to the brief's shape. */
  | { type: "abandoned"; kind: LeaseKind; waitedMs: number; reason: unknown; id: number };

/**
 * Who a waiter is for (issue 30): its client's name and class, never a secret. For an image job
 * it decides its fair turn; for an LLM request only its place in line (LLM requests take no turns).
 */
export interface ImageClient {
  readonly client: string;
  readonly cls: string;
  /** The caller's own number for the waiter (the image job's, the LLM request's), returned by imageLine() and llmLine(). */
  readonly tag?: number;
}

/** A waiter for the whole card (image job or lease), in the order the lock will take them. */
export interface LineEntry {
  readonly kind: LeaseKind;
  /** Undefined for one that named no client. */
  readonly client: string | undefined;
  readonly cls: string;
  readonly tag: number | undefined;
}

/**
 * A waiting LLM request (issue 30). LLM waiters are granted together when the card turns to llm,
 * so a chat's place is that of its LLM turn: after at most `ahead` of imageLine()'s entries.
 */
export interface LlmLineEntry {
  /** Undefined for one that named no client. */
  readonly client: string | undefined;
  readonly cls: string;
  readonly tag: number | undefined;
  readonly ahead: number;
}

export interface GpuLockOptions {
  /**
   * Fair turns (issue 30): the classes of image waiters, best first, with their weights. Waiting
   * image jobs that name a client are taken in fair turns across clients (src/fair/turns.ts), and
   * in an image session each client has at most one job in ComfyUI at a time, so another client's
   * job joins behind at most that one. Jobs that name no client are taken first come, first
   * served, as before, in the class "normal". A class marked `chatsFirst` joins no session while a chat waits.
   * Default: one class, "normal".
   */
  turnClasses?: readonly TurnClass[];
  /**
   * IMAGE_SESSION_MAX: while LLM requests wait, how long an image session admits new image jobs.
   * 0 (default) = one image job per session.
   */
  imageSessionMaxMs?: number;
  /** Clock in milliseconds. Default `performance.now()`. */
  now?: () => number;
  /**
   * Called when an event listener throws. The lock itself stays consistent either way;
   * this only decides whether anyone hears about it. Default: ignore (the lock does no I/O).
   */
  onListenerError?: (error: unknown, event: LockEvent) => void;
}

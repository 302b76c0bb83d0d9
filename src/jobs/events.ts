/** What an image job reports as it goes; logs and metrics subscribe instead of being called inline. */
import type { Identity } from "../fair/identity.ts";

/** How an image job ended (SPEC.md, "Image job flow"); each job is counted once. */
export const JOB_OUTCOMES = ["completed", "failed", "cancelled", "timeout", "lost", "rejected", "no_prompt_id", "upstream_error", "client_gone", "interrupted"] as const;
export type JobOutcome = (typeof JOB_OUTCOMES)[number];

/**
 * How following a job ended: ComfyUI's own verdict (`cancelled`: interrupted, cancelled, or
 * removed from the queue by a client), `lost` (ComfyUI no longer knows it),
 * `timeout` (not seen finished within JOB_TIMEOUT and not in the queue to stop), `interrupted`
 * (stopped by the watchdog), `not_stopped` (still running after the watchdog's grace; handed on).
 */
export type JobEnd = "success" | "error" | "cancelled" | "lost" | "timeout" | "interrupted" | "not_stopped";

export type ImageJobEvent =
  /** The client left before the GPU was ever granted: the job leaves no other trace. */
  | { phase: "left"; jobId: number }
  /** ComfyUI began running the prompt (a /queue poll found it running). */
  | { phase: "started"; jobId: number; promptId: string }
  /**
   * A /prompt passed the door and waits for the GPU (the status page lists it from here): the prompt_id it will be followed by
   * (`minted` when the turnstile chose it), the body's `client_id` and the client's address.
   */
  | { phase: "received"; jobId: number; promptId: string; minted: boolean; clientId?: string; client?: string; /** What the tenant calls the job when it is not ComfyUI's prompt (A1111's `txt2img`): the log's word. */ work?: string; /** Who it is for (issue 30): a CLIENTS_FILE name or a hash, never a key. */ who?: Identity }
  /** `joined`: the job joined a running image session (no hand-over, no Ollama unload). */
  | { phase: "acquired"; jobId: number; waitedMs: number; joined: boolean; /** Its client's class (issue 30). */ cls?: string }
  /** `models`: those keep_alive:0 was sent to (blind ones included when /api/ps could not be read). */
  | { phase: "unloaded"; jobId: number; models: string[]; durationMs: number; complete: boolean; error?: string; notRunning?: string }
  /** `answeredPromptId`: ComfyUI's answer named another id than the one sent (both are followed). */
  | { phase: "forwarded"; jobId: number; status: number; promptId?: string; answeredPromptId?: string; clientId?: string; durationMs: number }
  /** A job ComfyUI already ran or queued when the turnstile started, taken on as its own (adopt.ts). */
  /** Picked up at start: ComfyUI's `number` for it, and when it began running (epoch ms) where ComfyUI or STATE_DIR knew. */
  | { phase: "adopted"; jobId: number; promptId: string; number?: number; startedAt?: number }
  | { phase: "retrying"; jobId: number; attempt: number; delayMs: number; reason: string }
  | { phase: "finished"; jobId: number; promptId: string; end: JobEnd; durationMs: number; /** As in `received`. */ work?: string }
  /** The watchdog's /interrupt did not stop the job within FREE_TIMEOUT; the GPU is kept up to `graceMs` more. */
  | { phase: "unstoppable"; jobId: number; promptId: string; graceMs: number }
  /**
   * ComfyUI's memory did not come back within FREE_TIMEOUT and its queue still holds jobs: the
   * card stays held until the queue is empty, for at most `boundMs` (JOB_TIMEOUT).
   */
  | { phase: "still_busy"; jobId: number; promptIds: string[]; jobs: number; boundMs: number }
  | {
      phase: "freed";
      jobId: number;
      /** The job whose end ended the session (it may have had no prompt_id). */
      promptId?: string;
      durationMs: number;
      vramBefore?: number;
      vramAfter?: number;
      /** ComfyUI's device when its memory is the system's (cpu, mps, DirectML): released once /free is answered and its queue is empty. */
      shared?: string;
      released: boolean;
      error?: string;
      /** The tenant answered the release as done and its own report still showed the memory held (tenants/hand-over.ts). */
      lied?: boolean;
    }
  /** The job's end; `gpuReleased` false when its image session goes on with other jobs. */
  | { phase: "released"; jobId: number; promptId?: string; outcome: JobOutcome; heldMs: number; gpuReleased: boolean; reason?: string }
  | { phase: "session_ended"; jobs: number; durationMs: number }
  | { phase: "warmed"; model: string; durationMs: number; error?: string }
  | { phase: "warm_skipped"; model: string; reason: string };

export type JobListener = (e: ImageJobEvent) => void;

/** What an image job reports as it goes; logs and metrics subscribe instead of being called inline. */

/** How an image job ended (SPEC.md, "Image job flow"); each job is counted once. */
export const JOB_OUTCOMES = ["completed", "failed", "timeout", "lost", "rejected", "no_prompt_id", "upstream_error", "client_gone"] as const;
export type JobOutcome = (typeof JOB_OUTCOMES)[number];

/**
 * How following a job ended: ComfyUI's own verdict, `lost` (ComfyUI no longer knows it),
 * `timeout` (not seen finished within JOB_TIMEOUT and not in the queue to stop), `interrupted`
 * (stopped by the watchdog), `not_stopped` (still running after the watchdog's grace; handed on).
 */
export type JobEnd = "success" | "error" | "lost" | "timeout" | "interrupted" | "not_stopped";

export type ImageJobEvent =
  /** `joined`: the job joined a running image session (no hand-over, no Ollama unload). */
  | { phase: "acquired"; jobId: number; waitedMs: number; joined: boolean }
  /** `models`: those keep_alive:0 was sent to (blind ones included when /api/ps could not be read). */
  | { phase: "unloaded"; jobId: number; models: string[]; durationMs: number; complete: boolean; error?: string }
  | { phase: "forwarded"; jobId: number; status: number; promptId?: string; durationMs: number }
  /** A job ComfyUI already ran or queued when the turnstile started, taken on as its own (adopt.ts). */
  | { phase: "adopted"; jobId: number; promptId: string }
  | { phase: "retrying"; jobId: number; attempt: number; delayMs: number; reason: string }
  | { phase: "finished"; jobId: number; promptId: string; end: JobEnd; durationMs: number }
  /** The watchdog's /interrupt did not stop the job within FREE_TIMEOUT; the GPU is kept up to `graceMs` more. */
  | { phase: "unstoppable"; jobId: number; promptId: string; graceMs: number }
  | {
      phase: "freed";
      jobId: number;
      /** The job whose end ended the session (it may have had no prompt_id). */
      promptId?: string;
      durationMs: number;
      vramBefore?: number;
      vramAfter?: number;
      released: boolean;
      error?: string;
    }
  /** The job's end; `gpuReleased` false when its image session goes on with other jobs. */
  | { phase: "released"; jobId: number; promptId?: string; outcome: JobOutcome; heldMs: number; gpuReleased: boolean }
  | { phase: "session_ended"; jobs: number; durationMs: number }
  | { phase: "warmed"; model: string; durationMs: number; error?: string }
  | { phase: "warm_skipped"; model: string; reason: string };

export type JobListener = (e: ImageJobEvent) => void;

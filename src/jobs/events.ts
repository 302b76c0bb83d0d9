/** What an image job reports as it goes; logs and metrics subscribe instead of being called inline. */

/** How an image job ended (SPEC.md, "Image job flow"); each job is counted once. */
export const JOB_OUTCOMES = ["completed", "failed", "timeout", "rejected", "no_prompt_id", "upstream_error", "client_gone"] as const;
export type JobOutcome = (typeof JOB_OUTCOMES)[number];

export type ImageJobEvent =
  | { phase: "acquired"; jobId: number; waitedMs: number }
  /** `models`: those keep_alive:0 was sent to (blind ones included when /api/ps could not be read). */
  | { phase: "unloaded"; jobId: number; models: string[]; durationMs: number; complete: boolean; error?: string }
  | { phase: "forwarded"; jobId: number; status: number; promptId?: string; durationMs: number }
  | { phase: "retrying"; jobId: number; attempt: number; delayMs: number; reason: string }
  | { phase: "finished"; jobId: number; promptId: string; end: "success" | "error" | "timeout"; durationMs: number }
  | {
      phase: "freed";
      jobId: number;
      promptId: string;
      durationMs: number;
      vramBefore?: number;
      vramAfter?: number;
      released: boolean;
      error?: string;
    }
  | { phase: "released"; jobId: number; promptId?: string; outcome: JobOutcome; heldMs: number }
  | { phase: "warmed"; model: string; durationMs: number; error?: string }
  | { phase: "warm_skipped"; model: string; reason: string };

export type JobListener = (e: ImageJobEvent) => void;

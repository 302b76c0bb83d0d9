/**
 * What a fresh start makes of the card (SPEC "Restarts"): a turnstile that was killed, or stopped
 * while ComfyUI still worked, must not begin by saying `idle` while ComfyUI runs a job or holds
 * its checkpoint. Pure: fed what ComfyUI answered, it says what to do; adopt.ts does it.
 */
import { vramReleased, type QueueView } from "../comfy/client.ts";

export type CardAtStart =
  /** ComfyUI did not answer: nothing is known, the start goes on as if idle (with a line). */
  | { kind: "unknown"; reason: string }
  | { kind: "idle" }
  /** No job, but the checkpoint still loaded (a job ended and no /free followed): free it first. */
  | { kind: "free"; vramBytes: number }
  /** Jobs running or queued: the GPU is image until they have ended and ComfyUI is freed. */
  | { kind: "adopt"; promptIds: string[]; detail?: QueueView["detail"] };

/**
 * `queue`: what ComfyUI runs and has pending, or why it could not be read. `vramBytes`: what
 * /system_stats says PyTorch holds (undefined when that read failed: the queue decides alone).
 */
export function decideAtStart(queue: QueueView | Error, vramBytes: number | undefined): CardAtStart {
  if (queue instanceof Error) return { kind: "unknown", reason: queue.message };
  // Running first: that is the order ComfyUI will finish them in. A job can show in both lists
  // for one read (it moved while the answer was built): named once.
  const promptIds = [...new Set([...queue.running, ...queue.pending])];
  if (promptIds.length > 0) return { kind: "adopt", promptIds, detail: queue.detail };
  if (vramBytes !== undefined && !vramReleased(0, vramBytes)) return { kind: "free", vramBytes };
  return { kind: "idle" };
}

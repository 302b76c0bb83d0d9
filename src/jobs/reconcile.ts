/**
 * What a fresh start makes of the card (SPEC "Restarts"): a turnstile that was killed, or stopped
 * while ComfyUI still worked, must not begin by saying `idle` while ComfyUI runs a job or holds
 * its checkpoint. Pure: fed what ComfyUI answered, it says what to do; adopt.ts does it.
 */
import { vramReleased, type QueueView } from "../comfy/client.ts";
import { describeFetchError, isNoAnswer } from "../upstream/upstream-errors.ts";

export type CardAtStart =
  /**
   * No ComfyUI queue there: refused, no such host, reset, or an answer that is not its queue. Nothing
   * of it runs on the card; the start goes on idle (with a line).
   */
  | { kind: "down"; reason: string }
  /**
   * No answer in time: ComfyUI may be running a job and too busy to say so, so the GPU is held as
   * image until its work is read (start-read.ts).
   */
  | { kind: "unread"; reason: string }
  | { kind: "idle" }
  /** No job, but the checkpoint still loaded (a job ended and no /free followed): free it first. */
  | { kind: "free"; vramBytes: number }
  /** Jobs running or queued: the GPU is image until they have ended and ComfyUI is freed. */
  | { kind: "adopt"; promptIds: string[]; detail?: QueueView["detail"] };

/**
 * `queue`: what ComfyUI runs and has pending, or the error that kept it from being read (it tells
 * "not running" from "slow": only the first starts idle, fail closed). `vramBytes`: what
 * /system_stats says PyTorch holds (undefined when that read failed: the queue decides alone).
 */
export function decideAtStart(queue: QueueView | Error, vramBytes: number | undefined): CardAtStart {
  if (queue instanceof Error) return { kind: isNoAnswer(queue) ? "unread" : "down", reason: describeFetchError(queue) };
  // Running first: that is the order ComfyUI will finish them in. A job can show in both lists
  // for one read (it moved while the answer was built): named once.
  const promptIds = [...new Set([...queue.running, ...queue.pending])];
  if (promptIds.length > 0) return { kind: "adopt", promptIds, detail: queue.detail };
  if (vramBytes !== undefined && !vramReleased(0, vramBytes)) return { kind: "free", vramBytes };
  return { kind: "idle" };
}

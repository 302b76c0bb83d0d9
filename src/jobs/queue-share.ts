/**
 * One `GET /queue` serves every followed job (issue 18): with multi-megabyte workflows each read
 * is megabytes, and each follower used to read it per poll. A follower takes a read that started
 * no earlier than it allows (never one from before its job was sent, never an old one), joining
 * one in flight or reusing the last; otherwise it starts one.
 */
import type { ComfyClient, QueueView } from "../comfy/client.ts";

interface Read {
  startedAt: number;
  result: Promise<QueueView | undefined>;
}

export class SharedQueue {
  #last: Read | undefined;

  constructor(
    private readonly comfy: ComfyClient,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** ComfyUI's queue as read by a request that started at `notBefore` or later; undefined when that read failed. */
  read(notBefore: number): Promise<QueueView | undefined> {
    const last = this.#last;
    if (last && last.startedAt >= notBefore) return last.result;
    const read: Read = { startedAt: this.now(), result: this.comfy.queue().catch(() => undefined) };
    this.#last = read;
    return read.result;
  }
}

/**
 * `Content-Encoding: zstd` request bodies (Codex CLI sends them to /v1/responses; Ollama inflates
 * them before it reads the model, api-facts S1). The turnstile inflates a copy to read the model
 * and forwards the original bytes. A few hundred bytes of zstd can claim gigabytes, so the copy
 * is bounded three ways (issue 26):
 *
 * - per body: MAX_INFLATED_BYTES, Ollama's own cap; past it the body gets 413, and inflating
 *   stops there (a frame that declares a larger size is refused before any of it is inflated);
 * - across all requests: INFLATE_BUDGET_BYTES held inflated at once. A body reserves what it may
 *   inflate to (its declared size, else the per-body cap) before it starts, and waits its turn
 *   in arrival order when the budget is spoken for. The budget is one body at the cap: inflating
 *   and reading run on the one JavaScript thread, so a second large body at once would only
 *   double how long every other request waits, not finish sooner;
 * - in time: it inflates as a stream, a chunk per turn of the event loop, so /healthz and every
 *   other request are answered between two chunks. Reading the inflated body (one JSON.parse,
 *   gpu-free.ts) is the one piece that is not cut: ~30 ms of CPU for 20 MiB (docs/BENCHMARKS.md).
 *
 * A frame that is cut short, or followed by bytes that are no frame, is refused with 400 before
 * inflating: zlib's decoder returns what it could of a truncated frame without an error, while
 * Ollama's refuses it, so such a body must never be waved past the lock on a partial read.
 */
import { createZstdDecompress } from "node:zlib";

/** Ollama's own cap on an inflated body (cloud_proxy.go maxDecompressedBodySize): it refuses anything larger. */
export const MAX_INFLATED_BYTES = 20 << 20;

/** Inflated bytes held at once across all requests: one body at Ollama's cap, and room for small ones beside it. */
export const INFLATE_BUDGET_BYTES = 24 << 20;

/** A body that may inflate to more than this goes into the inflater's one reused buffer, when it is free. */
const SLAB_FROM_BYTES = 1 << 20;

/** One turn of the event loop inflates at most this much (measured: ~2.5 ms, docs/BENCHMARKS.md). */
const CHUNK_BYTES = 256 << 10;

export type Refusal = { ok: false; status: 400 | 413; message: string };
/** `release` gives the body's share of the budget back; call it once the body is no longer read. */
export type Inflated = { ok: true; body: Uint8Array; release(): void } | Refusal;

/** What a walk over the frames' headers found: the inflated size they declare (undefined when one does not say). */
type Frames = { ok: true; declared: number | undefined } | { ok: false; message: string };

const ZSTD_MAGIC = 0xfd2fb528;
const SKIPPABLE_MASK = 0xfffffff0;
const SKIPPABLE_MAGIC = 0x184d2a50;

/**
 * Walks the frames (RFC 8878 §3.1) without inflating: every block must be whole and the bytes must
 * end where the last frame does. Sums the frames' Frame_Content_Size when every frame has one.
 */
export function zstdFrames(b: Uint8Array): Frames {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let at = 0;
  let declared: number | undefined = 0;
  const cut = { ok: false, message: "the zstd request body is cut short" } as const;
  if (b.length === 0) return cut;
  while (at < b.length) {
    if (at + 4 > b.length) return cut;
    const magic = v.getUint32(at, true);
    if ((magic & SKIPPABLE_MASK) >>> 0 === SKIPPABLE_MAGIC) {
      if (at + 8 > b.length) return cut;
      at += 8 + v.getUint32(at + 4, true);
      if (at > b.length) return cut;
      continue;
    }
    if (magic !== ZSTD_MAGIC) return { ok: false, message: `the zstd request body has ${at === 0 ? "no zstd frame" : "bytes after its last frame"}` };
    at += 4;
    if (at >= b.length) return cut;
    const fhd = b[at++]!;
    if (fhd & 0x08) return { ok: false, message: "the zstd request body has a frame header with its reserved bit set" };
    const single = (fhd & 0x20) !== 0;
    const fcsFlag = fhd >> 6;
    const didSize = [0, 1, 2, 4][fhd & 3]!;
    const fcsSize = fcsFlag === 0 ? (single ? 1 : 0) : [0, 2, 4, 8][fcsFlag]!;
    const headerRest = (single ? 0 : 1) + didSize;
    if (at + headerRest + fcsSize > b.length) return cut;
    at += headerRest;
    if (fcsSize === 0) declared = undefined;
    else {
      const size =
        fcsSize === 1 ? b[at]! : fcsSize === 2 ? v.getUint16(at, true) + 256 : fcsSize === 4 ? v.getUint32(at, true) : v.getUint32(at, true) + v.getUint32(at + 4, true) * 2 ** 32;
      if (declared !== undefined) declared += size;
    }
    at += fcsSize;
    for (let last = false; !last; ) {
      if (at + 3 > b.length) return cut;
      const h = b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16);
      at += 3;
      last = (h & 1) === 1;
      const type = (h >> 1) & 3;
      if (type === 3) return { ok: false, message: "the zstd request body has a block of a reserved type" };
      at += type === 1 ? 1 : h >>> 3;
      if (at > b.length) return cut;
    }
    if (fhd & 0x04) at += 4;
    if (at > b.length) return cut;
  }
  return { ok: true, declared };
}

type Waiter = { need: number; go: () => void };

/** What the inflater tells its owner, for the log. */
export interface InflateEvents {
  /** The budget is spoken for and a body had to wait (said once until the queue empties again). */
  full(r: { waiting: number; budgetBytes: number }): void;
}

/** Inflates zstd bodies within a shared budget: one per process, shared by the listeners. */
export class ZstdInflater {
  private used = 0;
  private readonly queue: Waiter[] = [];
  private saidFull = false;
  /**
   * Written again and again instead of a new 20 MiB buffer per body: fresh memory is paid for in
   * page faults on every write (measured: the largest cost of a 20 MiB body before). It stays
   * resident once a large body came, and is within the budget.
   */
  private slab: Uint8Array | undefined;
  private slabFree = true;

  constructor(
    readonly budgetBytes = INFLATE_BUDGET_BYTES,
    readonly limitBytes = Math.min(MAX_INFLATED_BYTES, budgetBytes),
    private readonly events?: InflateEvents,
  ) {}

  /** Inflated bytes reserved now, and bodies waiting for their share (tests and the benchmark read them). */
  get load(): { usedBytes: number; waiting: number } {
    return { usedBytes: this.used, waiting: this.queue.length };
  }

  /** Rejects with `signal`'s reason when the client goes away while the body waits or inflates. */
  async inflate(bytes: Uint8Array, signal?: AbortSignal): Promise<Inflated> {
    const frames = zstdFrames(bytes);
    if (!frames.ok) return { ok: false, status: 400, message: frames.message };
    const limit = this.limitBytes;
    if (frames.declared !== undefined && frames.declared > limit) return tooLarge(limit);
    const need = frames.declared ?? limit;
    await this.reserve(need, signal);
    let released = false;
    const useSlab = need > SLAB_FROM_BYTES && this.slabFree;
    if (useSlab) this.slabFree = false;
    const release = () => {
      if (released) return;
      released = true;
      if (useSlab) this.slabFree = true;
      this.used -= need;
      this.wake();
    };
    try {
      const into = useSlab ? (this.slab ??= new Uint8Array(limit)).subarray(0, need) : new Uint8Array(need);
      const r = await inflateStream(bytes, into, frames.declared === undefined ? limit : undefined, signal);
      if (!r.ok) release();
      return r.ok ? { ok: true, body: r.body, release } : r;
    } catch (err) {
      release();
      throw err;
    }
  }

  private reserve(need: number, signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted();
    if (this.queue.length === 0 && this.used + need <= this.budgetBytes) {
      this.used += need;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        need,
        go: () => {
          signal?.removeEventListener("abort", gone);
          resolve();
        },
      };
      const gone = () => {
        const i = this.queue.indexOf(w);
        if (i >= 0) this.queue.splice(i, 1);
        this.wake();
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", gone, { once: true });
      this.queue.push(w);
      if (!this.saidFull) {
        this.saidFull = true;
        this.events?.full({ waiting: this.queue.length, budgetBytes: this.budgetBytes });
      }
    });
  }

  /** First come, first served: a large body at the head is not overtaken by smaller ones behind it. */
  private wake(): void {
    while (this.queue.length > 0 && this.used + this.queue[0]!.need <= this.budgetBytes) {
      const w = this.queue.shift()!;
      this.used += w.need;
      w.go();
    }
    if (this.queue.length === 0) this.saidFull = false;
  }
}

function tooLarge(limit: number): Refusal {
  return { ok: false, status: 413, message: `the zstd request body inflates to more than ${limit >> 20} MiB` };
}

/**
 * Inflates into `out`. `limit` set: the body did not declare its size, and passing it is a 413.
 * Unset: it declared `out`'s length, and inflating to more (a lying header) is a 400.
 */
function inflateStream(bytes: Uint8Array, out: Uint8Array, limit: number | undefined, signal: AbortSignal | undefined): Promise<{ ok: true; body: Uint8Array } | Refusal> {
  return new Promise((resolve, reject) => {
    const z = createZstdDecompress({ chunkSize: CHUNK_BYTES });
    const room = out.length;
    let size = 0;
    let settled = false;
    const end = (r: { ok: true; body: Uint8Array } | Refusal | Error) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener("abort", gone);
      z.destroy();
      if (r instanceof Error) reject(r);
      else resolve(r);
    };
    const gone = () => end(signal!.reason instanceof Error ? signal!.reason : new Error(String(signal!.reason)));
    signal?.addEventListener("abort", gone, { once: true });
    z.on("data", (chunk: Buffer) => {
      if (size + chunk.length > room) {
        end(limit !== undefined ? tooLarge(limit) : { ok: false, status: 400, message: "the zstd request body inflates to more than its frame header declares" });
        return;
      }
      out.set(chunk, size);
      size += chunk.length;
    });
    z.on("error", (err: Error) => end({ ok: false, status: 400, message: `the zstd request body could not be decompressed (${err.message})` }));
    z.on("end", () => end({ ok: true, body: out.subarray(0, size) }));
    z.end(bytes);
  });
}

/**
 * A request body that knows whether it can be sent again.
 *
 * Small bodies with a Content-Length are buffered (RETRY_BODY_LIMIT), so any retry is safe.
 * Larger or chunked bodies stream to the upstream; such a body can still be re-sent after a
 * connection failure as long as the failed attempt never read a byte of it — the wrapper has a
 * high-water mark of 0, so fetch pulls only once it has a connection to write to.
 */
import type { IdleWatch } from "./idle-watch.ts";

export interface ReplayableBody {
  /** The body for the next attempt, or undefined when this request has none. */
  next(): BodyInit | undefined;
  /** True when `next()` can be called again and send the same bytes. */
  readonly replayable: boolean;
  /** True when the body is held in memory (so even a 5xx may be replayed for idempotent methods). */
  readonly buffered: boolean;
  /** The buffered bytes, without sending them (and without telling `watch`). */
  peek?(): Uint8Array;
}

/** The body of every request without one (GET and HEAD, an empty body): forward() knows it by identity. */
export const NO_BODY: ReplayableBody = { next: () => undefined, replayable: true, buffered: true };

/**
 * `watch` (an LLM exchange's idle watch) sees each piece of a streamed body, and its end.
 * `inspect` sees the body's bytes the first time they are sent (the attempt's hold is taken by
 * then): a buffered body whole, a streamed one chunk by chunk as the upstream pulls it.
 */
export function prepareBody(
  req: Request,
  bufferLimit: number,
  watch?: IdleWatch,
  inspect?: (chunk: Uint8Array) => void,
): ReplayableBody | Promise<ReplayableBody> {
  // Not async for the usual bodiless request: an await of a plain value is one more turn of the microtask queue.
  if (req.method === "GET" || req.method === "HEAD") return NO_BODY;
  return readBody(req, bufferLimit, watch, inspect);
}

async function readBody(req: Request, bufferLimit: number, watch: IdleWatch | undefined, inspect: ((chunk: Uint8Array) => void) | undefined): Promise<ReplayableBody> {
  const declared = Number(req.headers.get("content-length") ?? NaN);
  // Read before touching req.body: that getter alone makes a JavaScript stream for the body.
  if (Number.isFinite(declared) && declared <= bufferLimit) {
    const bytes = new Uint8Array(await req.arrayBuffer());
    if (bytes.length === 0) return NO_BODY;
    return {
      next() {
        inspect?.(bytes);
        inspect = undefined;
        return bytes;
      },
      peek: () => bytes,
      replayable: true,
      buffered: true,
    };
  }
  if (req.body === null) return NO_BODY;
  return streamingBody(req.body, watch, inspect);
}

function streamingBody(
  source: ReadableStream<Uint8Array>,
  watch: IdleWatch | undefined,
  inspect: ((chunk: Uint8Array) => void) | undefined,
): ReplayableBody {
  const reader = source.getReader();
  let touched = false;
  if (watch) watch.stage = "request";
  return {
    get replayable() {
      return !touched;
    },
    buffered: false,
    next() {
      return new ReadableStream<Uint8Array>(
        {
          async pull(c) {
            touched = true;
            const { done, value } = await reader.read();
            if (watch) {
              watch.moved = true;
              if (done) watch.stage = "waiting";
            }
            if (done) return c.close();
            inspect?.(value);
            c.enqueue(value);
          },
          cancel(reason) {
            return reader.cancel(reason);
          },
        },
        { highWaterMark: 0 },
      );
    },
  };
}

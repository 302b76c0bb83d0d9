/** One NDJSON chat stream as a client sees it: when each line arrived and when Ollama stamped it. */
import { parseGoTime } from "../lib/clock.ts";
import { exchange, LineSplitter, type Exchange } from "../lib/http1.ts";

export interface StreamLine {
  /** Arrival at the client (shared clock, epoch ms). */
  at: number;
  /** The upstream's `created_at` (same clock, in the upstream's process). */
  createdAt: number;
  done: boolean;
}

export interface StreamRecord {
  sentAt: number;
  status: number;
  headAt: number;
  lines: StreamLine[];
  endAt: number;
  error?: string;
}

export interface OpenStream {
  readonly record: StreamRecord;
  /** Resolves when the first line has arrived (or the stream failed). */
  readonly first: Promise<void>;
  /** Resolves when the stream has ended, failed or been closed. */
  readonly finished: Promise<StreamRecord>;
  close(): void;
}

export function openChat(base: string, path: string, body: string): OpenStream {
  const rec: StreamRecord = { sentAt: 0, status: 0, headAt: NaN, lines: [], endAt: NaN };
  let resolveFirst!: () => void;
  let resolveDone!: (r: StreamRecord) => void;
  const first = new Promise<void>((r) => (resolveFirst = r));
  const finished = new Promise<StreamRecord>((r) => (resolveDone = r));
  const split = new LineSplitter();
  const ex: Exchange = exchange(
    new URL(base),
    { method: "POST", path, headers: { "Content-Type": "application/json" }, body },
    {
      onHead(status, _h, t) {
        rec.status = status;
        rec.headAt = t;
      },
      onData(bytes, t) {
        split.push(bytes, t, (line, at) => {
          let createdAt = NaN;
          let done = false;
          try {
            const j = JSON.parse(line) as { created_at?: string; done?: boolean };
            createdAt = parseGoTime(j.created_at ?? "");
            done = j.done === true;
          } catch {
            // not JSON: counted as a line all the same
          }
          rec.lines.push({ at, createdAt, done });
          if (rec.lines.length === 1) resolveFirst();
        });
      },
      onEnd(t) {
        rec.endAt = t;
        resolveFirst();
        resolveDone(rec);
      },
      onError(err, t) {
        rec.error = err.message;
        rec.endAt = t;
        resolveFirst();
        resolveDone(rec);
      },
    },
  );
  rec.sentAt = ex.sentAt;
  return {
    record: rec,
    first,
    finished,
    close() {
      ex.close();
      resolveFirst();
      resolveDone(rec);
    },
  };
}

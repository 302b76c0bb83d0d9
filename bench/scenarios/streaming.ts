/**
 * Scenario 2: NDJSON chat streams. Per stream: time to first chunk (request written → first
 * NDJSON line read), and per chunk the delivery latency = arrival at the client − the upstream's
 * own `created_at` stamp on that chunk. The two clocks live in different processes, so that
 * latency carries a constant offset; the direct connection has the same offset, so subtracting
 * the direct median gives what the proxy adds per chunk. Subjects take turns stream by stream.
 */
import { median, summarize, type Summary } from "../lib/stats.ts";
import { openChat } from "./chat-stream.ts";
import { CHAT_BODY, type SubjectName, type Target } from "./types.ts";

export interface StreamingRow {
  subject: SubjectName;
  concurrency: number;
  streams: number;
  failed: number;
  chunksPerStream: number;
  ttfcMs: Summary;
  /** Delivery latency per chunk (arrival − created_at), all chunks of all streams. */
  chunkMs: Summary;
}

export async function streaming(
  targets: Target[],
  opts: { concurrency: number[]; rounds: number; tokens: number; note: (s: string) => void },
): Promise<StreamingRow[]> {
  const rows: StreamingRow[] = [];
  for (const c of opts.concurrency) {
    const acc = new Map<SubjectName, { ttfc: number[]; chunk: number[]; streams: number; failed: number; lines: number }>();
    for (const t of targets) acc.set(t.subject, { ttfc: [], chunk: [], streams: 0, failed: 0, lines: 0 });
    for (let round = 0; round < opts.rounds; round++) {
      for (const t of targets) {
        const a = acc.get(t.subject)!;
        const batch = Array.from({ length: c }, () => openChat(t.url, "/api/chat", CHAT_BODY("Why is the sky blue?", opts.tokens)));
        const recs = await Promise.all(batch.map((s) => s.finished));
        for (const r of recs) {
          a.streams++;
          const ok = r.status === 200 && !r.error && r.lines.at(-1)?.done === true;
          if (!ok) {
            a.failed++;
            continue;
          }
          a.ttfc.push(r.lines[0]!.at - r.sentAt);
          a.lines += r.lines.length;
          for (const l of r.lines) if (Number.isFinite(l.createdAt)) a.chunk.push(l.at - l.createdAt);
        }
      }
    }
    for (const t of targets) {
      const a = acc.get(t.subject)!;
      const row: StreamingRow = {
        subject: t.subject,
        concurrency: c,
        streams: a.streams,
        failed: a.failed,
        chunksPerStream: a.streams - a.failed > 0 ? a.lines / (a.streams - a.failed) : 0,
        ttfcMs: summarize(a.ttfc),
        chunkMs: summarize(a.chunk),
      };
      rows.push(row);
      opts.note(
        `  c=${String(c).padStart(2)} ${t.subject.padEnd(9)} ttfc p50 ${row.ttfcMs.p50.toFixed(3)} ms  chunk delivery p50 ${median(a.chunk).toFixed(3)} ms p99 ${row.chunkMs.p99.toFixed(3)} ms${a.failed ? `  failed ${a.failed}` : ""}`,
      );
    }
  }
  return rows;
}

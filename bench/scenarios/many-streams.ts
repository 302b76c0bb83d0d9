/**
 * Scenario 4: 1,000 chat streams open at once through one subject, with a slow token rate so
 * none ends during the measurement. All requests are written at once; each stream's
 * time-to-first-byte (response head) and time-to-first-chunk (first NDJSON line) are taken from
 * its own send time. The proxy's RSS is read from /proc when idle (fresh process), once every
 * stream has its first chunk, and after all clients have gone away. For the turnstile, `dashboards`
 * /turnstile/events readers (status pages left open) connect first: the idle figure is also read
 * with them connected, and they stay connected, receiving events, through the streams.
 */
import type { Memory } from "../lib/proc.ts";
import { summarize, type Summary } from "../lib/stats.ts";
import { openChat } from "./chat-stream.ts";
import { CHAT_BODY, type SubjectName, type Target } from "./types.ts";

export interface ManyRow {
  subject: SubjectName;
  streams: number;
  /** Streams whose first NDJSON line arrived before the deadline. */
  gotFirstChunk: number;
  failed: number;
  ttfbMs: Summary;
  ttfcMs: Summary;
  /** Time from the first request written to the last stream's first chunk. */
  allFirstChunksMs: number;
  memIdle?: Memory;
  /** Idle with `dashboards` event-stream readers connected (the turnstile only). */
  memDashboards?: Memory;
  dashboards?: number;
  memOpen?: Memory;
  memAfter?: Memory;
}

export async function manyStreams(
  t: Target,
  opts: { streams: number; deadlineMs: number; memory?: () => Memory | undefined; note: (s: string) => void; dashboards?: number },
): Promise<ManyRow> {
  const memIdle = opts.memory?.();
  const dashboards = await openDashboards(t.url, opts.dashboards ?? 0);
  // Let the readers' first documents go out and the process settle before reading RSS.
  if (dashboards.count > 0) await Bun.sleep(1000);
  const memDashboards = dashboards.count > 0 ? opts.memory?.() : undefined;
  const started = performance.now();
  const open = Array.from({ length: opts.streams }, () => openChat(t.url, "/api/chat", CHAT_BODY("Tell me a long story.")));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<void>((r) => (timer = setTimeout(r, opts.deadlineMs)));
  await Promise.race([Promise.all(open.map((s) => s.first)), deadline]);
  clearTimeout(timer);
  const allFirstChunksMs = performance.now() - started;
  const memOpen = opts.memory?.();
  const recs = open.map((s) => s.record);
  for (const s of open) s.close();
  dashboards.close();
  const gotFirst = recs.filter((r) => r.lines.length > 0);
  const failed = recs.filter((r) => r.status !== 200 || (r.error !== undefined && r.lines.length === 0)).length;
  let memAfter: Memory | undefined;
  if (opts.memory) {
    // Give the proxy a moment to notice the closed sockets and drop the upstream requests.
    await Bun.sleep(1500);
    memAfter = opts.memory();
  }
  const row: ManyRow = {
    subject: t.subject,
    streams: opts.streams,
    gotFirstChunk: gotFirst.length,
    failed,
    ttfbMs: summarize(recs.filter((r) => Number.isFinite(r.headAt)).map((r) => r.headAt - r.sentAt)),
    ttfcMs: summarize(gotFirst.map((r) => r.lines[0]!.at - r.sentAt)),
    allFirstChunksMs,
    memIdle,
    memDashboards,
    dashboards: dashboards.count || undefined,
    memOpen,
    memAfter,
  };
  const mib = (m?: Memory) => (m ? `${(m.rssKiB / 1024).toFixed(1)} MiB` : "n/a");
  opts.note(
    `  ${t.subject.padEnd(9)} first chunk ${row.gotFirstChunk}/${row.streams}  slowest TTFB ${row.ttfbMs.max.toFixed(0)} ms  slowest first chunk ${row.ttfcMs.max.toFixed(0)} ms  RSS idle ${mib(memIdle)}${memDashboards ? ` with ${dashboards.count} dashboards ${mib(memDashboards)}` : ""} open ${mib(memOpen)} after ${mib(memAfter)}`,
  );
  return row;
}

/** `n` open /turnstile/events readers, each draining its stream. */
async function openDashboards(base: string, n: number): Promise<{ count: number; close(): void }> {
  const stop = new AbortController();
  const readers = await Promise.all(
    Array.from({ length: n }, async () => {
      const res = await fetch(`${base}/turnstile/events`, { signal: stop.signal });
      if (res.status !== 200 || !res.body) throw new Error(`/turnstile/events answered ${res.status}`);
      const reader = res.body.getReader();
      void (async () => {
        while (!(await reader.read().catch(() => ({ done: true }))).done);
      })();
    }),
  );
  return { count: readers.length, close: () => stop.abort() };
}

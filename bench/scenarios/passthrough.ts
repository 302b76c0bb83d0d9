/**
 * Scenario 1: small JSON passing straight through (GET /api/tags, ~1 KB), closed-loop at each
 * concurrency. Subjects take turns at each concurrency level so drift on the shared cores
 * spreads over all of them; each measurement follows a short warm-up at the same concurrency.
 */
import { runLoad, type LoadResult } from "../lib/load.ts";
import type { SubjectName, Target } from "./types.ts";

export interface PassRow extends LoadResult {
  subject: SubjectName;
}

export async function passThrough(
  targets: Target[],
  opts: { concurrency: number[]; seconds: number; warmupSeconds: number; path: string; wrk: string | undefined; note: (s: string) => void },
): Promise<PassRow[]> {
  const rows: PassRow[] = [];
  for (const c of opts.concurrency) {
    for (const t of targets) {
      const url = `${t.url}${opts.path}`;
      await runLoad({ url, connections: c, seconds: opts.warmupSeconds }, opts.wrk);
      const r = await runLoad({ url, connections: c, seconds: opts.seconds }, opts.wrk);
      opts.note(`  c=${String(c).padStart(3)} ${t.subject.padEnd(9)} ${Math.round(r.rps).toString().padStart(6)} req/s  p50 ${r.p50Ms.toFixed(3)} ms  p99 ${r.p99Ms.toFixed(3)} ms${r.errors ? `  errors ${r.errors}` : ""}`);
      rows.push({ subject: t.subject, ...r });
    }
  }
  return rows;
}

/**
 * Scenario 1: small JSON passing straight through (GET /api/tags, ~1.3 KB), closed-loop at each
 * concurrency. At each level the subjects take turns, `rounds` times over, so a burst of other
 * work on the shared cores hits one round rather than one subject; the best round per subject
 * is reported (other processes can only ever slow a run down) and every round is kept in the JSON.
 */
import { runLoad, type LoadResult } from "../lib/load.ts";
import type { SubjectName, Target } from "./types.ts";

export interface PassRow extends LoadResult {
  subject: SubjectName;
  /** req/s of every round, in order. */
  rounds: number[];
  /** CPU the proxy used per request in the best round, µs (all its threads and processes). */
  cpuUsPerReq?: number;
}

export async function passThrough(
  targets: Target[],
  opts: { concurrency: number[]; rounds: number; seconds: number; warmupSeconds: number; path: string; wrk: string | undefined; note: (s: string) => void },
): Promise<PassRow[]> {
  const rows: PassRow[] = [];
  for (const c of opts.concurrency) {
    const best = new Map<SubjectName, LoadResult & { cpuUsPerReq?: number }>();
    const all = new Map<SubjectName, number[]>();
    for (let round = 0; round < opts.rounds; round++) {
      for (const t of targets) {
        const url = `${t.url}${opts.path}`;
        if (round === 0) await runLoad({ url, connections: c, seconds: opts.warmupSeconds }, opts.wrk);
        const cpu0 = t.cpuMs?.();
        const load = await runLoad({ url, connections: c, seconds: opts.seconds }, opts.wrk);
        const cpu1 = t.cpuMs?.();
        const r = { ...load, cpuUsPerReq: cpu0 !== undefined && cpu1 !== undefined ? ((cpu1 - cpu0) * 1000) / Math.max(1, load.requests) : undefined };
        all.set(t.subject, [...(all.get(t.subject) ?? []), r.rps]);
        const prev = best.get(t.subject);
        if (!prev || r.rps > prev.rps) best.set(t.subject, r);
      }
    }
    for (const t of targets) {
      const r = best.get(t.subject)!;
      opts.note(
        `  c=${String(c).padStart(3)} ${t.subject.padEnd(9)} ${Math.round(r.rps).toString().padStart(6)} req/s  p50 ${r.p50Ms.toFixed(3)} ms  p99 ${r.p99Ms.toFixed(3)} ms${r.cpuUsPerReq !== undefined ? `  CPU ${r.cpuUsPerReq.toFixed(0)} µs/req` : ""}  (rounds ${all.get(t.subject)!.map((x) => Math.round(x)).join(", ")})${r.errors ? `  errors ${r.errors}` : ""}`,
      );
      rows.push({ subject: t.subject, ...r, rounds: all.get(t.subject)! });
    }
  }
  return rows;
}

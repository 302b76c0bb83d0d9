/**
 * Scenario 8 (issue 22): the turnstile against the floor of any Bun proxy — `bench/bare-proxy.ts`,
 * a Bun.serve handing each request to Bun's fetch — with `GET /api/tags` from an upstream that
 * answers from memory (bench/memory-upstream.ts), so nothing but the proxies differs. wrk at one
 * concurrency, the subjects taking turns round after round (a burst of other work on the shared
 * cores hits one round, not one subject); every round is kept, and the ratios are taken round by
 * round, each turnstile round against the floor round run just before or after it.
 */
import { runLoad } from "../lib/load.ts";

export interface FloorSubject {
  /** "turnstile", "floor", "nginx-1w", or any name an experiment gives. */
  name: string;
  url: string;
  /** CPU ms used so far by the subject's processes. */
  cpuMs: () => number;
  /** The serving process, when a caller wants its threads apart. */
  pid?: number;
}

export interface FloorRound {
  subject: string;
  round: number;
  rps: number;
  p50Ms: number;
  /** Proxy user + system CPU during the round, per request served. */
  cpuUsPerReq: number;
  errors: number;
}

export interface FloorOptions {
  connections: number;
  rounds: number;
  seconds: number;
  warmupSeconds: number;
  path: string;
  wrk: string | undefined;
  note: (s: string) => void;
}

export async function floorRounds(subjects: FloorSubject[], o: FloorOptions): Promise<FloorRound[]> {
  if (o.warmupSeconds > 0) for (const s of subjects) await runLoad({ url: `${s.url}${o.path}`, connections: o.connections, seconds: o.warmupSeconds }, o.wrk);
  const out: FloorRound[] = [];
  for (let round = 1; round <= o.rounds; round++) {
    for (const s of subjects) {
      const c0 = s.cpuMs();
      const r = await runLoad({ url: `${s.url}${o.path}`, connections: o.connections, seconds: o.seconds }, o.wrk);
      const row = { subject: s.name, round, rps: r.rps, p50Ms: r.p50Ms, cpuUsPerReq: ((s.cpuMs() - c0) * 1000) / Math.max(1, r.requests), errors: r.errors };
      out.push(row);
      o.note(`  round ${round} ${s.name.padEnd(12)} ${Math.round(row.rps).toString().padStart(6)} req/s  CPU ${row.cpuUsPerReq.toFixed(1)} µs/req${row.errors ? `  errors ${row.errors}` : ""}`);
    }
  }
  return out;
}

/** Per round, `subject`'s CPU per request and throughput as multiples of the reference's in the same round. */
export function ratiosByRound(rows: FloorRound[], subject: string, reference: string): { round: number; cpu: number; rps: number }[] {
  const out: { round: number; cpu: number; rps: number }[] = [];
  for (const s of rows.filter((r) => r.subject === subject)) {
    const ref = rows.find((r) => r.subject === reference && r.round === s.round);
    if (ref) out.push({ round: s.round, cpu: s.cpuUsPerReq / ref.cpuUsPerReq, rps: s.rps / ref.rps });
  }
  return out;
}

/**
 * A place in line (issue 30): every image job waiting for the card, with its position (1 = next)
 * and an estimate in seconds — the figure a busy answer's Retry-After gives with that many jobs
 * ahead — grouped by client, in the order the lock will take them. Someone who may steer sees
 * every client; anyone else only its own entries (never another client's name, key or address).
 * Pure: given the lock's line and the estimator.
 */
import type { LineEntry } from "../lock/index.ts";

export interface LineJob {
  job: number;
  position: number;
  estimate_s: number;
}

export interface LineClient {
  client: string;
  class: string;
  jobs: LineJob[];
}

/** `viewer`: the caller's own client name, or undefined to show every client. */
export function placeInLine(entries: readonly LineEntry[], estimateS: (ahead: number) => number, viewer?: string): LineClient[] {
  const groups = new Map<string, LineClient>();
  entries.forEach((e, i) => {
    if (e.client === undefined || e.tag === undefined) return;
    if (viewer !== undefined && e.client !== viewer) return;
    let g = groups.get(e.client);
    if (!g) groups.set(e.client, (g = { client: e.client, class: e.cls, jobs: [] }));
    g.jobs.push({ job: e.tag, position: i + 1, estimate_s: estimateS(i) });
  });
  return [...groups.values()];
}

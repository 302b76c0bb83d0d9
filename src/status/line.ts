/**
 * A place in line (issue 30): every image job and LLM request waiting for the card, with its
 * position (1 = next) and an estimate in seconds — the figure a busy answer's Retry-After gives
 * with that many image jobs ahead — grouped by client, in the order the lock will grant them.
 * LLM requests are granted together when the card turns to llm: a chat's position is that of its
 * LLM turn, after `ahead` of the image jobs and leases (lock/llm-turn.ts). Someone who may steer
 * sees every client; anyone else only its own entries (never another client's name, key or
 * address). Pure: given the lock's lines and the estimator.
 */
import type { LineEntry, LlmLineEntry } from "../lock/index.ts";

export interface LineJob {
  job: number;
  position: number;
  estimate_s: number;
}

/** A waiting LLM request: `request` is its number in `llm.requests` and `waiting`. */
export interface LineRequest {
  request: number;
  position: number;
  estimate_s: number;
}

export interface LineClient {
  client: string;
  class: string;
  jobs: LineJob[];
  requests: LineRequest[];
}

export interface LockLines {
  image: readonly LineEntry[];
  llm: readonly LlmLineEntry[];
}

/** `viewer`: the caller's own client name, or undefined to show every client. */
export function placeInLine(lines: LockLines, estimateS: (ahead: number) => number, viewer?: string): LineClient[] {
  // Each group at its first place: on a tie a chat's turn comes before the image job (it is not ahead of it).
  const groups = new Map<string, LineClient & { first: number }>();
  const group = (client: string | undefined, cls: string, at: number) => {
    if (client === undefined || (viewer !== undefined && client !== viewer)) return undefined;
    let g = groups.get(client);
    if (!g) groups.set(client, (g = { client, class: cls, jobs: [], requests: [], first: at }));
    g.first = Math.min(g.first, at);
    return g;
  };
  lines.image.forEach((e, i) => {
    if (e.tag !== undefined) group(e.client, e.cls, i + 1)?.jobs.push({ job: e.tag, position: i + 1, estimate_s: estimateS(i) });
  });
  for (const e of lines.llm) {
    if (e.tag !== undefined) group(e.client, e.cls, e.ahead + 0.5)?.requests.push({ request: e.tag, position: e.ahead + 1, estimate_s: estimateS(e.ahead) });
  }
  return [...groups.values()].sort((a, b) => a.first - b.first).map(({ first: _, ...g }) => g);
}

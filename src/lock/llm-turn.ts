/**
 * When does the card turn to llm for a waiting chat (issue 30, a place in line)? Waiting LLM
 * requests are granted together, so a chat's place is that of its LLM turn among the whole-card
 * work waiting (image jobs and GPU leases). Pure: the lock's rules (gpu-lock.ts) read on its line.
 *
 * Without image sessions every image job and lease that chats queue behind goes first. With them,
 * the card turns to llm once none of them that called before the chat is left (after the session or
 * lease holding the card). Until then, with no session open, the one whose fair turn it is goes
 * next: so no waiter after the last of those older ones in the line goes first by its turn. But an
 * image job of them opens a session, and a session may let any image job join while it admits
 * (IMAGE_SESSION_MAX): whether one does depends on when its client's job before it ends. So the
 * count is an upper bound: while a session may admit before the chat's turn, every image job is
 * counted as ahead of it.
 *
 * While nobody joins ahead of a chat, the count never rises: the line's order is fixed, a grant or a
 * leaver removes a waiter, and a session only stops admitting (a new one opens only for a waiter
 * already counted, at a turn before the chat's).
 */
import type { LeaseKind } from "./types.ts";

export interface Turn {
  readonly id: number;
  readonly kind: LeaseKind;
}

/**
 * How many of `line`'s waiters go before the LLM turn of the chat whose call took id `chat`, at
 * most. `line`: the waiters chats queue behind, in the order of their fair turns. `sessions`:
 * IMAGE_SESSION_MAX > 0. `admitting`: a session holds the card and may still admit image jobs.
 */
export function turnsAhead(line: readonly Turn[], chat: number, sessions: boolean, admitting: boolean): number {
  if (!sessions) return line.length;
  let last = -1;
  for (let i = 0; i < line.length; i++) if (line[i]!.id < chat) last = i;
  let leases = 0;
  let images = 0;
  for (let i = 0; i <= last; i++) {
    if (line[i]!.kind === "image") images++;
    else leases++;
  }
  const sessionAhead = admitting || images > 0;
  return leases + (sessionAhead ? line.reduce((n, w) => n + (w.kind === "image" ? 1 : 0), 0) : images);
}

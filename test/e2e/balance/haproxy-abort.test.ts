/**
 * Issue 28, point 1: a chat whose client gave up is never run. deploy/haproxy.cfg, run as shipped
 * (addresses and ports rewritten) by a real HAProxy in front of two turnstiles: while both cards
 * run image jobs a chat waits at one of them; its client gives up after 1 s; once the cards are
 * free, neither Ollama ever sees that chat. Without `option abortonclose` HAProxy keeps the
 * server side open after the client left, so the turnstile cannot tell and runs the chat once its
 * card is free: a model loads for nobody and delays real work. Skips with a note when haproxy
 * (Debian package `haproxy`, .ci/system-deps.sh) is missing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { findHaproxy, startHaproxy, type RunningHaproxy } from "../../../src/demo/haproxy.ts";
import type { LockEvent } from "../../../src/lock/index.ts";
import { callsTo, newPromptId, promptBody, startStack, submit, until, type Stack } from "../jobs/helpers.ts";

const haproxy = findHaproxy();
if (!haproxy) console.warn("haproxy is not installed (Debian package haproxy, .ci/system-deps.sh): the HAProxy abort test is skipped");

let cards: Stack[] = [];
let lb: RunningHaproxy;
/** Chats each card's turnstile gave up waiting for because their client left. */
const abandoned = [0, 0];

beforeAll(async () => {
  if (!haproxy) return;
  cards = [await startStack({ env: { CARD_NAME: "card1", LLM_WAIT_TIMEOUT: "20s" } }), await startStack({ env: { CARD_NAME: "card2", LLM_WAIT_TIMEOUT: "20s" } })];
  for (const [i, c] of cards.entries()) {
    c.t.lock.onEvent((e: LockEvent) => {
      if (e.type === "abandoned" && e.kind === "llm") abandoned[i]!++;
    });
  }
  const addr = (u: string) => new URL(u).host;
  lb = await startHaproxy(haproxy.path, cards.map((c) => ({ ollama: addr(c.t.ollamaUrl), comfy: addr(c.t.comfyUrl) })));
});

afterAll(async () => {
  await lb?.stop();
  await Promise.all(cards.map((c) => c.stop()));
  for (const [i, c] of cards.entries()) expect({ card: i + 1, overlaps: c.gpu.overlaps() }).toEqual({ card: i + 1, overlaps: [] });
});

const waiting = () => cards.map((c) => c.t.lock.snapshot().llmWaiting);
const chatsSeen = () => cards.map((c) => callsTo(c.ollama!.calls, "/api/chat").length);

/**
 * A chat through HAProxy whose client gives up 1 s after sending it, once a turnstile holds it.
 * Resolves when the client has given up (the request rejected by its abort).
 */
async function chatGivenUpAfter1s(): Promise<void> {
  const gaveUp = new AbortController();
  const sent = fetch(`${lb.ollama}/api/chat`, {
    method: "POST",
    body: JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "anyone there?" }] }),
    signal: gaveUp.signal,
  });
  const outcome = sent.then(
    (r) => `answered ${r.status}`,
    (e: unknown) => (e instanceof Error ? e.name : String(e)),
  );
  let settled = "";
  void outcome.then((o) => (settled = o));
  await until(() => waiting().some((n) => n > 0) || settled !== "", "a turnstile holds the chat for its card");
  expect(settled).toBe("");
  // The client's patience: it gives up 1 s after the card started holding its chat.
  setTimeout(() => gaveUp.abort(), 1000);
  expect(await outcome).toBe("AbortError");
}

/** Both cards' image jobs have ended, nothing waits, nothing runs: whatever was held has gone somewhere. */
async function cardsFree(): Promise<void> {
  await Promise.all(cards.map((c) => c.t.settled()));
  await until(() => waiting().every((n) => n === 0), "no chat waits at any card");
}

describe.skipIf(!haproxy)("HAProxy from deploy/haproxy.cfg: a chat whose client gave up never reaches Ollama", () => {
  test("both cards run image jobs; the chat waits at one (llm_wait); its client leaves after 1 s; once the cards are free, neither Ollama sees it", async () => {
    for (const c of cards) c.ollama!.clearCalls();
    const before = [...abandoned];
    for (const c of cards) expect((await submit(c.t, promptBody(newPromptId(), { sim_job_ms: 2500 }))).status).toBe(200);
    await until(() => cards.every((c) => c.t.lock.state === "image"), "both cards run an image job");
    // HAProxy's checks see both cards busy: no card in `llm`, so the chat goes to `llm_wait`.
    await until(async () => {
      const s = await lb.servers();
      return s["llm/card1"] === "DOWN" && s["llm/card2"] === "DOWN";
    }, "HAProxy takes both cards out of `llm`");

    await chatGivenUpAfter1s();
    // The turnstile holding it heard the client leave (through HAProxy) and gave up its place.
    await until(() => abandoned.reduce((a, b) => a + b, 0) > before.reduce((a, b) => a + b, 0), "the turnstile holding the chat gives it up");
    await cardsFree();
    expect(chatsSeen()).toEqual([0, 0]);
  }, 15_000);

  test("one card in rotation, turned busy before HAProxy's check saw it: the chat waits there; its client leaves; it is not retried anywhere", async () => {
    // Card 2 out of `llm`, card 1's check frozen UP: HAProxy sends the chat to card 1 without
    // X-Turnstile-Wait (one card left), so card 1 holds it. When the client leaves and the
    // turnstile drops the chat, `retry-on empty-response` must not send it again (to either card).
    await until(async () => {
      const s = await lb.servers();
      return s["llm/card1"] === "UP" && s["llm/card2"] === "UP";
    }, "HAProxy has both cards back in `llm`");
    await lb.command("disable server llm/card2");
    await lb.command("disable health llm/card1");
    try {
      for (const c of cards) c.ollama!.clearCalls();
      expect((await submit(cards[0]!.t, promptBody(newPromptId(), { sim_job_ms: 2500 }))).status).toBe(200);
      await until(() => cards[0]!.t.lock.state === "image", "card 1 runs an image job");
      const before = abandoned[0]!;

      await chatGivenUpAfter1s();
      await until(() => abandoned[0]! > before, "card 1's turnstile gives the chat up");
      await cardsFree();
      expect(chatsSeen()).toEqual([0, 0]);
    } finally {
      await lb.command("enable health llm/card1");
      await lb.command("enable server llm/card2");
    }
  }, 15_000);
});

/**
 * Streaming is not buffered: with the simulated Ollama writing one token every 100 ms, each
 * NDJSON line / SSE event reaches the client while the upstream is still generating, and the
 * stream as a whole has the same structure as one read directly from the upstream.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { postJson, readTimed, type Stack, startStack } from "./helpers.ts";

const TOKEN_MS = 100;
const TOKENS = 5;

let s: Stack;
beforeAll(async () => {
  s = await startStack({}, { ollama: { tokenDelayMs: TOKEN_MS, tokens: TOKENS } });
});
afterAll(async () => {
  await s.stop();
});

const CHAT = { model: "llama3.2", messages: [{ role: "user", content: "why is the sky blue?" }] };
const OPENAI = { model: "llama3.2", messages: [{ role: "user", content: "why is the sky blue?" }], stream: true };

interface Observed {
  /** Complete records (NDJSON lines or SSE events), in order. */
  records: string[];
  reads: { text: string; at: number }[];
  /** Upstream requests still generating when the first bytes reached the client. */
  upstreamBusyAtFirst: number;
}

async function observe(url: string, body: unknown, sep: string): Promise<Observed> {
  const res = await postJson(url, body);
  expect(res.status).toBe(200);
  let upstreamBusyAtFirst = -1;
  const reads = await readTimed(res, (_, i) => {
    if (i === 0) upstreamBusyAtFirst = s.pair.ollama.inflight();
  });
  const records = reads
    .map((r) => r.text)
    .join("")
    .split(sep)
    .filter((r) => r.trim() !== "");
  return { records, reads, upstreamBusyAtFirst };
}

function keysOf(json: string): string[] {
  return Object.keys(JSON.parse(json) as Record<string, unknown>);
}

function expectUnbuffered(o: Observed): void {
  // The first record was delivered while the simulated model was still producing tokens…
  expect(o.upstreamBusyAtFirst).toBe(1);
  // …and the records came in separate reads spread over the generation, not in one burst at the end.
  expect(o.reads.length).toBeGreaterThanOrEqual(3);
  const spread = (o.reads.at(-1)?.at ?? 0) - (o.reads[0]?.at ?? 0);
  expect(spread).toBeGreaterThanOrEqual((TOKENS - 2) * TOKEN_MS);
}

describe("streaming through the turnstile is not buffered", () => {
  test("/api/chat NDJSON: the first line arrives long before the last is sent; same lines as direct", async () => {
    const proxied = await observe(`${s.t.ollamaUrl}/api/chat`, CHAT, "\n");
    expectUnbuffered(proxied);
    const direct = await observe(`${s.pair.ollama.url}/api/chat`, CHAT, "\n");
    expect(proxied.records.length).toBe(TOKENS + 1);
    expect(proxied.records.length).toBe(direct.records.length);
    expect(proxied.records.map(keysOf)).toEqual(direct.records.map(keysOf));
    const last = JSON.parse(proxied.records.at(-1) as string);
    expect(last).toMatchObject({ done: true, done_reason: "stop", message: { role: "assistant", content: "" } });
    expect(typeof last.eval_count).toBe("number");
  });

  test("/v1/chat/completions SSE: the first event arrives long before the last; same events as direct", async () => {
    const proxied = await observe(`${s.t.ollamaUrl}/v1/chat/completions`, OPENAI, "\n\n");
    expectUnbuffered(proxied);
    const direct = await observe(`${s.pair.ollama.url}/v1/chat/completions`, OPENAI, "\n\n");
    expect(proxied.records.length).toBe(direct.records.length);
    expect(proxied.records.at(-1)).toBe("data: [DONE]");
    const data = (r: string) => (r === "data: [DONE]" ? ["[DONE]"] : keysOf(r.replace(/^data: /, "")));
    expect(proxied.records.map(data)).toEqual(direct.records.map(data));
    const finish = JSON.parse((proxied.records.at(-2) as string).replace(/^data: /, ""));
    expect(finish.choices[0].finish_reason).toBe("stop");
  });
});

/**
 * The request log tells the truth about each answer: its `<--` line is written when the body has
 * ended, with the whole answer's duration and size, and an answer the upstream broke off is a
 * warning, not a quiet `<-- 200`.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { formatBytes } from "../../../src/observe/request-log.ts";
import { startTestTurnstile } from "../../support/turnstile.ts";
import { postJson, type Stack, startStack, until } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  s = await startStack({ LOGLEVEL: "info" });
});
afterAll(async () => {
  await s.stop();
});
let offs: (() => void)[] = [];
beforeEach(() => {
  for (const off of offs) off();
  offs = [];
});

const enc = new TextEncoder();

/** An upstream answer of `pieces` NDJSON lines, `gapMs` apart. */
function ndjson(pieces: number, gapMs: number): Response {
  let n = 0;
  const body = new ReadableStream<Uint8Array>({
    async pull(c) {
      if (n > 0) await Bun.sleep(gapMs);
      c.enqueue(enc.encode(`${JSON.stringify({ n, done: n === pieces - 1 })}\n`));
      if (++n === pieces) c.close();
    },
  });
  return new Response(body, { headers: { "content-type": "application/x-ndjson" } });
}

function lines(match: string): string[] {
  return s.t.logLines.filter((l) => l.includes(match));
}

describe("the <-- line", () => {
  test("is written when a 1 s stream ends, with its whole duration and the bytes sent", async () => {
    offs.push(s.pair.ollama.override("POST", "/api/chat", () => ndjson(6, 200)));
    const res = await postJson(`${s.t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: [] });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    // The head left long ago; the answer has not ended, so neither has the request.
    expect(lines("<-- 200 POST /api/chat")).toEqual([]);
    let size = first.value!.length;
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      size += r.value.length;
    }
    await until(() => lines("<-- 200 POST /api/chat").length === 1, "the <-- line");
    const line = lines("<-- 200 POST /api/chat")[0]!;
    const m = /<-- 200 POST \/api\/chat (\d+\.\d+)s (\S+)/.exec(line);
    expect(m).not.toBeNull();
    expect(Number(m![1])).toBeGreaterThanOrEqual(0.99);
    expect(m![2]).toBe(formatBytes(size));
  });

  test("a pass-through answer collected whole logs its size", async () => {
    const res = await fetch(`${s.t.ollamaUrl}/api/tags`);
    const size = (await res.arrayBuffer()).byteLength;
    await until(() => lines("<-- 200 GET /api/tags").length === 1, "the <-- line");
    expect(lines("<-- 200 GET /api/tags")[0]).toMatch(new RegExp(`<-- 200 GET /api/tags \\S+ ${formatBytes(size)} `));
  });
});

describe("an answer the upstream broke off", () => {
  test("is logged at warn with what happened, and the client's connection is cut, not ended", async () => {
    // A raw upstream: a chunked answer, one chunk, then the connection closes (a crashed runner).
    const raw = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        data(sock) {
          sock.write('HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{"n":0}\r\n\r\n');
          sock.end();
        },
      },
    });
    const t = startTestTurnstile({ OLLAMA_URL: `http://127.0.0.1:${raw.port}`, COMFY_URL: "", LOGLEVEL: "info" });
    try {
      const res = await postJson(`${t.ollamaUrl}/api/generate`, { model: "llama3.2", prompt: "hi" });
      expect(res.status).toBe(200);
      await expect(res.text()).rejects.toThrow();
      const cut = () => t.logLines.filter((l) => l.includes("answer cut off by the upstream"));
      await until(() => cut().length === 1, "the warn line");
      expect(cut()[0]).toContain("WARN");
      expect(cut()[0]).toContain('request="POST /api/generate"');
      expect(cut()[0]).toContain("status=200");
      expect(cut()[0]).toContain("sent=9B");
      expect(cut()[0]).toMatch(/reason=.*closed/);
    } finally {
      await t.close();
      raw.stop(true);
    }
  });

  test("a client that leaves is no warning", async () => {
    offs.push(s.pair.ollama.override("POST", "/api/chat", () => ndjson(50, 20)));
    const ac = new AbortController();
    const res = await postJson(`${s.t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: [] }, {}, ac.signal);
    await res.body!.getReader().read();
    ac.abort();
    await until(() => s.t.lock.snapshot().llmInflight === 0, "slot released");
    await until(() => lines("<-- 200 POST /api/chat").length === 2, "the <-- line");
    expect(lines("answer cut off by the upstream")).toEqual([]);
  });
});

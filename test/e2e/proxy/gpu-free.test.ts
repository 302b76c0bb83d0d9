/**
 * Requests that use no local GPU pass while an image job holds it (issue 19, api-facts S1): cloud
 * models on every route, unloads, web search. Whatever would load a model — a load request, an
 * "unload" that carries a prompt, a local model in a zstd body — still waits for the job's /free.
 */
import { describe, expect, test } from "bun:test";
import { sampleValue } from "../../support/prom-parse.ts";
import { arrivedAt, lastFreeAt, postJson, probedStackForFile, scrape, startImageJob, startStack, until } from "./helpers.ts";

const s = probedStackForFile();

const CHAT = [{ role: "user", content: "hi" }];
const TAG = "x-e2e-free";

const freeAt = () => lastFreeAt(s());
const arrived = (tag: string) => arrivedAt(s(), TAG, tag);

function postZstd(url: string, body: Uint8Array, tag: string): Promise<Response> {
  return fetch(url, { method: "POST", body: body as BodyInit, headers: { "content-type": "application/json", "content-encoding": "zstd", [TAG]: tag } });
}

describe("during an image job", () => {
  test("cloud models, unloads and web search are answered at once; loads and work wait for /free", async () => {
    const via = s().t.ollamaUrl;
    await startImageJob(s().t, 600);
    expect(s().t.lock.state).toBe("image");

    const codex = Bun.zstdCompressSync(JSON.stringify({ model: "gpt-oss:120b-cloud", input: "hi" }));
    const free: [string, () => Promise<Response>][] = [
      ["cloud chat", () => postJson(`${via}/api/chat`, { model: "gpt-oss:120b-cloud", messages: CHAT, stream: false }, { [TAG]: "cloud chat" })],
      ["cloud openai", () => postJson(`${via}/v1/chat/completions`, { messages: CHAT, model: "kimi-k2:1t-cloud" }, { [TAG]: "cloud openai" })],
      ["cloud zstd responses", () => postZstd(`${via}/v1/responses`, codex, "cloud zstd responses")],
      ["unload", () => postJson(`${via}/api/generate`, { model: "llama3.2", keep_alive: 0 }, { [TAG]: "unload" })],
      ["unload chat", () => postJson(`${via}/api/chat`, { model: "llama3.2", messages: [], keep_alive: "0s" }, { [TAG]: "unload chat" })],
      ["web search", () => postJson(`${via}/api/experimental/web_search`, { query: "sky" }, { [TAG]: "web search" })],
    ];
    const answers = await Promise.all(free.map(async ([name, send]) => ({ name, status: (await send()).status, lockWas: s().t.lock.state })));
    expect(answers).toEqual(free.map(([name]) => ({ name, status: 200, lockWas: "image" })));

    const held: [string, () => Promise<Response>][] = [
      ["load", () => postJson(`${via}/api/generate`, { model: "llama3.2", keep_alive: -1 }, { [TAG]: "load" })],
      ["unload with PROMPT", () => fetch(`${via}/api/generate`, { method: "POST", body: '{"model":"llama3.2","keep_alive":0,"PROMPT":"write"}', headers: { [TAG]: "unload with PROMPT" } })],
      ["unload on /v1", () => postJson(`${via}/v1/chat/completions`, { model: "llama3.2", messages: CHAT, keep_alive: 0 }, { [TAG]: "unload on /v1" })],
      ["local zstd", () => postZstd(`${via}/v1/responses`, Bun.zstdCompressSync(JSON.stringify({ model: "llama3.2", input: "hi" })), "local zstd")],
    ];
    const waiting = held.map(async ([name, send]) => ({ name, status: (await send()).status }));
    await until(() => s().t.lock.snapshot().llmWaiting === held.length, "the loads waiting at the lock");
    // The zstd body was read inflated: a waiting request shows its model.
    const models = s().t.status.snapshot(false).llm.requests.map((r) => r.model);
    expect(models).toContain("llama3.2");
    expect(models.filter((m) => m === null)).toEqual([]);
    expect(await Promise.all(waiting)).toEqual(held.map(([name]) => ({ name, status: 200 })));

    const at = await freeAt();
    for (const [name] of free) expect({ name, beforeFree: arrived(name) < at }).toEqual({ name, beforeFree: true });
    for (const [name] of held) expect({ name, afterFree: arrived(name) >= at }).toEqual({ name, afterFree: true });
    // Forwarded as sent: the compressed bytes, with their encoding.
    const codexCall = s().pair.ollama.calls.find((c) => c.headers[TAG] === "cloud zstd responses")!;
    expect(codexCall.headers["content-encoding"]).toBe("zstd");
    expect(codexCall.headers["content-length"]).toBe(String(codex.length));
    expect(s().pair.gpu.overlaps()).toEqual([]);

    const m = await scrape(via);
    expect(sampleValue(m, "gpu_turnstile_llm_no_gpu_total", { reason: "cloud" })).toBe(3);
    expect(sampleValue(m, "gpu_turnstile_llm_no_gpu_total", { reason: "unload" })).toBe(2);
  });
});

describe("zstd bodies the turnstile refuses itself", () => {
  test("a bomb gets 413 and a corrupt frame 400, in the client's dialect, and Ollama never sees them", async () => {
    const bomb = Bun.zstdCompressSync(new Uint8Array(64 << 20));
    const big = await postZstd(`${s().t.ollamaUrl}/v1/responses`, bomb, "bomb");
    expect(big.status).toBe(413);
    expect(((await big.json()) as { error: { type: string; message: string } }).error.message).toContain("20 MiB");
    const bad = await postZstd(`${s().t.ollamaUrl}/v1/chat/completions`, new TextEncoder().encode("not zstd at all"), "corrupt");
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { type: string } }).error.type).toBe("invalid_request_error");
    // Cut short: zlib alone inflates what there is without an error (issue 26), Ollama refuses it.
    const whole = Bun.zstdCompressSync(JSON.stringify({ model: "gpt-oss:120b-cloud", input: "x".repeat(100_000) }), { level: 19 });
    const cut = await postZstd(`${s().t.ollamaUrl}/v1/responses`, whole.subarray(0, whole.length - 4), "cut");
    expect(cut.status).toBe(400);
    expect(((await cut.json()) as { error: { message: string } }).error.message).toBe("gpu-turnstile: the zstd request body is cut short");
    expect(s().pair.ollama.calls.filter((c) => c.headers[TAG] === "bomb" || c.headers[TAG] === "corrupt" || c.headers[TAG] === "cut")).toEqual([]);
    expect(s().t.lock.state).toBe("idle");
  });

  test("a native route does not inflate (nor does Ollama there): the bytes go on unread, and Ollama answers", async () => {
    const res = await postZstd(`${s().t.ollamaUrl}/api/chat`, Bun.zstdCompressSync(JSON.stringify({ model: "llama3.2", messages: [] })), "native zstd");
    expect(res.status).toBe(400);
    expect(s().pair.ollama.calls.filter((c) => c.headers[TAG] === "native zstd")).toHaveLength(1);
  });
});

describe("an Ollama older than the rules", () => {
  test("before 0.3.11 an unload loads the model first: it waits like a load", async () => {
    const old = await startStack({}, { ollama: { version: "0.3.10" } });
    try {
      await old.t.probed;
      await startImageJob(old.t, 300);
      const res = postJson(`${old.t.ollamaUrl}/api/generate`, { model: "llama3.2", keep_alive: 0 });
      await until(() => old.t.lock.snapshot().llmWaiting === 1, "the old-style unload waiting at the lock");
      expect((await res).status).toBe(200);
    } finally {
      await old.stop();
    }
  });
});

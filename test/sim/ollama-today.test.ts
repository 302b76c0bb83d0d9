/**
 * The simulated Ollama since the SPEC (api-facts S1, S2): cloud models load nothing, web search
 * answers, /v1 inflates zstd bodies, and a model that does not fit in the free VRAM lands partly
 * on the CPU (size_vram < size in /api/ps; the ledger holds only the VRAM part).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { SimGpu } from "../../src/sim/gpu.ts";
import { type OllamaSim, startOllamaSim } from "../../src/sim/ollama.ts";
import { post } from "./helpers.ts";

let sim: OllamaSim | undefined;
afterEach(async () => {
  await sim?.stop();
  sim = undefined;
});

async function start(opts: Parameters<typeof startOllamaSim>[0] = {}): Promise<OllamaSim> {
  sim = await startOllamaSim({ loadMs: 10, unloadMs: 10, tokenDelayMs: 2, ...opts });
  return sim;
}

describe("cloud models", () => {
  test.each([
    ["/api/chat", { model: "gpt-oss:120b-cloud", messages: [{ role: "user", content: "hi" }], stream: false }],
    ["/api/generate", { model: "kimi-k2:1t-cloud", prompt: "hi", stream: false }],
    ["/v1/chat/completions", { model: "gpt-oss:120b-cloud", messages: [{ role: "user", content: "hi" }] }],
    ["/v1/responses", { model: "gpt-oss:20b:cloud", input: "hi" }],
  ])("%s answers without loading anything locally", async (path, body) => {
    const s = await start();
    const res = await post(`${s.url}${path}`, body);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("Rayleigh");
    expect(s.loadedModels()).toEqual([]);
    expect(s.gpu.ledger).toEqual([]);
  });

  test("Ollama's own word: remote_model and remote_host in /api/show and (once pulled) /api/tags; none for a local copy under a cloud name", async () => {
    const s = await start({ models: [{ name: "llama3.2", size: 2_000_000_000, family: "llama", capabilities: ["completion"] }, { name: "gpt-oss:120b-cloud", size: 384, family: "gptoss", capabilities: ["completion"], cloud: true }] });
    const show = async (model: string) => (await (await post(`${s.url}/api/show`, { model })).json()) as Record<string, unknown>;
    expect(await show("gpt-oss:120b-cloud")).toMatchObject({ remote_model: "gpt-oss:120b", remote_host: "https://ollama.com:443" });
    // Not pulled: still answered by ollama.com (no stub needed since v0.17.6).
    expect(await show("kimi-k2:1t:cloud")).toMatchObject({ remote_model: "kimi-k2:1t", remote_host: "https://ollama.com:443" });
    expect((await post(`${s.url}/api/copy`, { source: "llama3.2", destination: "llama3.2:8b-cloud" })).status).toBe(200);
    expect(await show("llama3.2:8b-cloud")).not.toHaveProperty("remote_host");
    const tags = ((await (await fetch(`${s.url}/api/tags`)).json()) as { models: Record<string, unknown>[] }).models;
    expect(tags.find((m) => m.name === "gpt-oss:120b-cloud")).toMatchObject({ model: "gpt-oss:120b-cloud", remote_model: "gpt-oss:120b", remote_host: "https://ollama.com:443" });
    expect(tags.find((m) => m.name === "llama3.2:8b-cloud")).not.toHaveProperty("remote_host");
    // The copy is local: it loads onto the card.
    expect((await post(`${s.url}/api/chat`, { model: "llama3.2:8b-cloud", messages: [{ role: "user", content: "hi" }], stream: false })).status).toBe(200);
    expect(s.gpu.ledger.length).toBeGreaterThan(0);
    expect((await fetch(`${s.url}/api/delete`, { method: "DELETE", body: JSON.stringify({ model: "llama3.2:8b-cloud" }) })).status).toBe(200);
    expect((await fetch(`${s.url}/api/delete`, { method: "DELETE", body: JSON.stringify({ model: "llama3.2:8b-cloud" }) })).status).toBe(404);
    expect((await post(`${s.url}/api/copy`, { source: "nope", destination: "x" })).status).toBe(404);
    // A copy of a cloud model is remote under any name, and says where it runs.
    expect((await post(`${s.url}/api/copy`, { source: "gpt-oss:120b-cloud", destination: "my-assistant" })).status).toBe(200);
    expect(await show("my-assistant")).toMatchObject({ remote_model: "gpt-oss:120b", remote_host: "https://ollama.com:443" });
  });

  test("a local model with -cloud in its name but no tag is not a cloud model", async () => {
    const s = await start();
    const res = await post(`${s.url}/api/chat`, { model: "mymodel-cloud", messages: [] });
    expect(res.status).toBe(404);
  });
});

describe("web search", () => {
  test("web_search and web_fetch answer from ollama.com, loading nothing", async () => {
    const s = await start();
    const search = await post(`${s.url}/api/experimental/web_search`, { query: "why is the sky blue" });
    expect(search.status).toBe(200);
    expect(((await search.json()) as { results: unknown[] }).results.length).toBe(1);
    const fetched = await post(`${s.url}/api/experimental/web_fetch`, { url: "https://ollama.com" });
    expect(fetched.status).toBe(200);
    expect((await post(`${s.url}/api/experimental/web_search`, "")).status).toBe(400);
    expect(s.gpu.ledger).toEqual([]);
  });
});

describe("zstd request bodies", () => {
  const body = JSON.stringify({ model: "llama3.2", input: "hi" });
  const postZstd = (url: string, bytes: Uint8Array | string) => fetch(url, { method: "POST", body: bytes as BodyInit, headers: { "content-encoding": "zstd" } });

  test("/v1 inflates them (Codex CLI to /v1/responses)", async () => {
    const s = await start();
    const res = await postZstd(`${s.url}/v1/responses`, Bun.zstdCompressSync(body));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { object: string }).object).toBe("response");
    expect(s.loadedModels()).toEqual(["llama3.2:latest"]);
  });

  test("the native routes do not: their JSON binding fails", async () => {
    const s = await start();
    const res = await postZstd(`${s.url}/api/chat`, Bun.zstdCompressSync(body));
    expect(res.status).toBe(400);
    expect(s.loadedModels()).toEqual([]);
  });

  test("corrupt or oversized: 400", async () => {
    const s = await start();
    expect((await postZstd(`${s.url}/v1/responses`, "not zstd")).status).toBe(400);
    const bomb = Bun.zstdCompressSync(new Uint8Array(21 << 20));
    const res = await postZstd(`${s.url}/v1/responses`, bomb);
    expect(res.status).toBe(400);
    expect(await res.text()).toContain("too large");
  });
});

describe("VRAM short at load", () => {
  test("the model lands partly on the CPU: size_vram < size, and the ledger holds only the VRAM part", async () => {
    const gpu = new SimGpu({ vramBytes: 3_000_000_000 });
    const other = gpu.acquire("comfy", "left over", 1_000_000_000);
    const s = await start({ gpu });
    expect((await post(`${s.url}/api/generate`, { model: "llama3.2", prompt: "", keep_alive: -1 })).status).toBe(200);
    const ps = (await (await fetch(`${s.url}/api/ps`)).json()) as { models: { size: number; size_vram: number }[] };
    expect(ps.models[0]).toMatchObject({ size: 3_735_225_344, size_vram: 2_000_000_000 });
    expect(gpu.active("ollama").map((h) => h.bytes)).toEqual([2_000_000_000]);
    expect(gpu.oversubscriptions).toEqual([]);
    gpu.release(other);
  });

  test("with nothing free it sits wholly on the CPU: no VRAM held, no overlap", async () => {
    const gpu = new SimGpu({ vramBytes: 1_000_000_000 });
    const comfy = gpu.acquire("comfy", "job", 1_000_000_000);
    const s = await start({ gpu });
    expect((await post(`${s.url}/api/generate`, { model: "llama3.2", prompt: "", keep_alive: -1 })).status).toBe(200);
    const ps = (await (await fetch(`${s.url}/api/ps`)).json()) as { models: { size_vram: number }[] };
    expect(ps.models[0]!.size_vram).toBe(0);
    expect(gpu.overlaps()).toEqual([]);
    gpu.release(comfy);
  });
});

describe("the nested mark", () => {
  test("a model loaded for a marked request is recorded as nested; the overlap is excused only against memory already held", async () => {
    const gpu = new SimGpu();
    const job = gpu.acquire("comfy", "job-1", 5_000_000_000);
    const s = await start({ gpu });
    const res = await post(`${s.url}/api/generate`, { model: "llama3.2", prompt: "", keep_alive: -1 }, { "x-gpu-turnstile-nested": "1" });
    expect(res.status).toBe(200);
    expect(gpu.active("ollama")[0]!.nested).toBe(true);
    expect(gpu.overlaps().length).toBe(1);
    expect(gpu.overlaps({ excuseNested: true })).toEqual([]);
    gpu.release(job);
    // The next job's memory comes after the nested model loaded: the turnstile should have emptied Ollama.
    const next = gpu.acquire("comfy", "job-2", 5_000_000_000);
    expect(gpu.overlaps({ excuseNested: true }).map((o) => o.comfy)).toEqual(["job-2"]);
    gpu.release(next);
  });

  test("an unmarked load is never excused", async () => {
    const gpu = new SimGpu();
    const job = gpu.acquire("comfy", "job-1", 5_000_000_000);
    const s = await start({ gpu });
    await post(`${s.url}/api/generate`, { model: "llama3.2", prompt: "", keep_alive: -1 });
    expect(gpu.overlaps({ excuseNested: true }).length).toBe(1);
    gpu.release(job);
  });
});

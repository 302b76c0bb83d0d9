/**
 * The llama-server, llama-swap, LM Studio and vLLM simulators against the protocol facts of
 * ../shared/api/tenants.md: their listings and status enums, release replies, and the lying modes
 * (a release answered with success that frees nothing; a refusal while a request is in flight).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { SimGpu } from "../../src/sim/gpu.ts";
import { startLlamaServerSim } from "../../src/sim/llama-server.ts";
import { startLlamaSwapSim } from "../../src/sim/llama-swap.ts";
import type { LlmSim } from "../../src/sim/llm-server.ts";
import { startLmStudioSim } from "../../src/sim/lmstudio.ts";
import { startVllmSim } from "../../src/sim/vllm.ts";
import { waitFor } from "./helpers.ts";

const FAST = { loadMs: 30, unloadMs: 20, tokenDelayMs: 5 };
const sims: LlmSim[] = [];
async function track<T extends LlmSim>(p: Promise<T>): Promise<T> {
  const s = await p;
  sims.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.stop()));
});

async function getJson(url: string, headers: Record<string, string> = {}): Promise<any> {
  const res = await fetch(url, { headers });
  expect(res.status).toBe(200);
  return res.json();
}
function post(url: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
}
function chat(url: string, model: string, stream = false, headers: Record<string, string> = {}): Promise<Response> {
  return post(`${url}/v1/chat/completions`, { model, stream, messages: [{ role: "user", content: "why is the sky blue?" }] }, headers);
}
/** Starts a streamed chat and waits for its first chunk, so it is in flight. */
async function inFlight(url: string, model: string, headers: Record<string, string> = {}): Promise<ReadableStreamDefaultReader<Uint8Array>> {
  const res = await chat(url, model, true, headers);
  expect(res.status).toBe(200);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  return reader;
}
async function drain(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<string> {
  let text = "";
  const dec = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text;
    text += dec.decode(value);
  }
}

describe("simulated llama-server (router mode)", () => {
  const M = "qwen2.5-7b-instruct";
  test("status goes unloaded → loading → loaded on /models/load, and back on /models/unload; the ledger follows", async () => {
    const s = await track(startLlamaServerSim({ ...FAST, loadMs: 200 }));
    const status = async (): Promise<string> => (await getJson(`${s.url}/models`)).data.find((m: any) => m.id === M).status.value;
    expect(await status()).toBe("unloaded");
    expect(await (await post(`${s.url}/models/load`, { model: M })).json()).toEqual({ success: true });
    expect(await status()).toBe("loading");
    expect(s.gpu.holding("ollama")).toBe(true);
    await waitFor(async () => (await status()) === "loaded", "loaded");
    expect(await (await post(`${s.url}/models/unload`, { model: M })).json()).toEqual({ success: true });
    // Memory is held until the listing says unloaded, never after.
    await waitFor(async () => (await status()) === "unloaded", "unloaded");
    expect(s.gpu.holding("ollama")).toBe(false);
  });

  test("autoload: a chat naming an unloaded model loads it; ?autoload=false refuses instead", async () => {
    const s = await track(startLlamaServerSim(FAST));
    const refused = await post(`${s.url}/v1/chat/completions?autoload=false`, { model: M, messages: [{ role: "user", content: "hi" }] });
    expect(refused.status).toBe(400);
    expect(s.resident()).toEqual([]);
    const res = await chat(s.url, M);
    expect(res.status).toBe(200);
    expect((await res.json()).choices[0].message.content).toContain("sky");
    expect(s.resident()).toEqual([M]);
  });

  test("GET /props?model= autoloads too unless autoload=false (a status read must pass it)", async () => {
    const s = await track(startLlamaServerSim(FAST));
    expect((await fetch(`${s.url}/props?model=${M}&autoload=false`)).status).toBe(400);
    expect(s.resident()).toEqual([]);
    expect((await getJson(`${s.url}/props?model=${M}`)).default_generation_settings.n_ctx).toBe(32_768);
    expect(s.resident()).toEqual([M]);
  });

  test("--fit: with the card partly taken, a model loads smaller (less context, fewer bytes) and says so in /props", async () => {
    const gpu = new SimGpu({ vramBytes: 8_000_000_000 });
    const other = gpu.acquire("comfy", "checkpoint", 4_000_000_000);
    const s = await track(startLlamaServerSim({ ...FAST, gpu }));
    await post(`${s.url}/models/load`, { model: M });
    const props = await getJson(`${s.url}/props?model=${M}&autoload=false`);
    expect(props.default_generation_settings.n_ctx).toBeLessThan(32_768);
    const args: string[] = (await getJson(`${s.url}/models`)).data.find((m: any) => m.id === M).status.args;
    expect(args[args.indexOf("--ctx-size") + 1]).toBe("32768");
    expect(gpu.oversubscriptions).toEqual([]);
    gpu.release(other);
  });

  test("SSE: a streamed chat is OpenAI chunks ending in [DONE]", async () => {
    const s = await track(startLlamaServerSim(FAST));
    const text = await (await chat(s.url, M, true)).text();
    const events = text.split("\n\n").filter((e) => e !== "");
    expect(events.at(-1)).toBe("data: [DONE]");
    const first = JSON.parse((events[0] as string).slice(6));
    expect(first.object).toBe("chat.completion.chunk");
    expect(first.choices[0].delta.role).toBe("assistant");
  });

  test("--sleep-idle-seconds: an idle model gives its memory back and shows sleeping; /props does not wake it, a chat does", async () => {
    const s = await track(startLlamaServerSim({ ...FAST, sleepIdleMs: 40 }));
    const status = async (): Promise<string> => (await getJson(`${s.url}/models`)).data.find((m: any) => m.id === M).status.value;
    expect((await chat(s.url, M)).status).toBe(200);
    await waitFor(async () => (await status()) === "sleeping", "sleeping");
    expect(s.gpu.holding("ollama")).toBe(false);
    expect((await fetch(`${s.url}/props?model=${M}`)).status).toBe(503);
    expect(await status()).toBe("sleeping");
    expect((await post(`${s.url}/v1/chat/completions?autoload=false`, { model: M, messages: [{ role: "user", content: "hi" }] })).status).toBe(200);
    expect(s.gpu.holding("ollama")).toBe(true);
  });

  test("lying: an unload answered {success:true} frees nothing", async () => {
    const s = await track(startLlamaServerSim({ ...FAST, releaseFreesNothing: true }));
    await post(`${s.url}/models/load`, { model: M });
    expect(await (await post(`${s.url}/models/unload`, { model: M })).json()).toEqual({ success: true });
    expect(s.resident()).toEqual([M]);
    expect((await getJson(`${s.url}/models`)).data.find((m: any) => m.id === M).status.value).not.toBe("unloaded");
  });

  test("lying: an unload while a request is processing is refused; /slots shows it busy", async () => {
    const s = await track(startLlamaServerSim({ ...FAST, tokenDelayMs: 50, refuseWhileBusy: true }));
    const reader = await inFlight(s.url, M);
    expect((await getJson(`${s.url}/slots?model=${M}&autoload=false`))[0].is_processing).toBe(true);
    expect((await post(`${s.url}/models/unload`, { model: M })).status).toBe(409);
    expect(s.resident()).toEqual([M]);
    await drain(reader);
    expect((await post(`${s.url}/models/unload`, { model: M })).status).toBe(200);
  });
});

describe("simulated llama-swap", () => {
  const A = "qwen2.5-7b-instruct";
  const B = "llama-3.2-3b-instruct";
  test("/running lists the process; a request for another model swaps; /api/models/unload empties /running", async () => {
    const s = await track(startLlamaSwapSim(FAST));
    expect(await getJson(`${s.url}/running`)).toEqual({ running: [] });
    expect((await chat(s.url, A)).status).toBe(200);
    expect((await getJson(`${s.url}/running`)).running.map((r: any) => [r.model, r.state])).toEqual([[A, "ready"]]);
    expect((await chat(s.url, B)).status).toBe(200);
    expect((await getJson(`${s.url}/running`)).running.map((r: any) => r.model)).toEqual([B]);
    expect(s.gpu.overlaps()).toEqual([]);
    expect((await post(`${s.url}/api/models/unload`)).status).toBe(200);
    await waitFor(async () => (await getJson(`${s.url}/running`)).running.length === 0, "running empty");
    expect(s.gpu.holding("ollama")).toBe(false);
  });

  test("GET /unload and /api/models/unload/{model} release too; the Ollama API is refused", async () => {
    const s = await track(startLlamaSwapSim(FAST));
    await chat(s.url, A);
    expect((await post(`${s.url}/api/models/unload/${A}`)).status).toBe(200);
    await waitFor(() => s.resident().length === 0, "unloaded one");
    await chat(s.url, A);
    expect((await fetch(`${s.url}/unload`)).status).toBe(200);
    await waitFor(() => s.resident().length === 0, "unloaded all");
    expect((await post(`${s.url}/api/chat`, { model: A })).status).toBe(404);
  });

  test("lying: unload answered OK keeps the process; busy refusal while streaming", async () => {
    const s = await track(startLlamaSwapSim({ ...FAST, releaseFreesNothing: true }));
    await chat(s.url, A);
    expect((await post(`${s.url}/api/models/unload`)).status).toBe(200);
    expect((await getJson(`${s.url}/running`)).running.length).toBe(1);
    const s2 = await track(startLlamaSwapSim({ ...FAST, tokenDelayMs: 50, refuseWhileBusy: true }));
    const reader = await inFlight(s2.url, A);
    expect((await post(`${s2.url}/api/models/unload`)).status).toBe(409);
    expect(s2.resident()).toEqual([A]);
    await drain(reader);
  });
});

describe("simulated LM Studio (REST v1)", () => {
  const K = "qwen2.5-7b-instruct";
  const auth = { Authorization: "Bearer sk-lm-secret" };
  test("a token is required when set: 401 without it", async () => {
    const s = await track(startLmStudioSim({ ...FAST, token: "sk-lm-secret" }));
    expect((await fetch(`${s.url}/api/v1/models`)).status).toBe(401);
    expect((await fetch(`${s.url}/api/v1/models`, { headers: { Authorization: "Bearer wrong" } })).status).toBe(401);
    expect((await getJson(`${s.url}/api/v1/models`, auth)).models.map((m: any) => m.key)).toContain(K);
  });

  test("two loads make instances key and key:2; unloading by base key unloads the first only", async () => {
    const s = await track(startLmStudioSim({ ...FAST, token: "sk-lm-secret" }));
    const a = await (await post(`${s.url}/api/v1/models/load`, { model: K }, auth)).json();
    expect(a).toMatchObject({ type: "llm", instance_id: K, status: "loaded" });
    const b = await (await post(`${s.url}/api/v1/models/load`, { model: K }, auth)).json();
    expect(b.instance_id).toBe(`${K}:2`);
    const listed = async (): Promise<string[]> =>
      (await getJson(`${s.url}/api/v1/models`, auth)).models.find((m: any) => m.key === K).loaded_instances.map((i: any) => i.id);
    expect(await listed()).toEqual([K, `${K}:2`]);
    expect(await (await post(`${s.url}/api/v1/models/unload`, { instance_id: K }, auth)).json()).toEqual({ instance_id: K });
    await waitFor(async () => (await listed()).length === 1, "first gone");
    expect(await listed()).toEqual([`${K}:2`]);
    expect(s.gpu.holding("ollama")).toBe(true);
    await post(`${s.url}/api/v1/models/unload`, { instance_id: `${K}:2` }, auth);
    await waitFor(async () => (await listed()).length === 0, "all gone");
    expect(s.gpu.holding("ollama")).toBe(false);
    expect((await getJson(`${s.url}/api/v0/models`, auth)).data.find((m: any) => m.id === K).state).toBe("not-loaded");
  });

  test("JIT: a chat loads the model; lying unload answers {instance_id} and keeps it", async () => {
    const s = await track(startLmStudioSim({ ...FAST, releaseFreesNothing: true }));
    expect((await chat(s.url, K)).status).toBe(200);
    expect(s.resident()).toEqual([K]);
    expect((await post(`${s.url}/api/v1/models/unload`, { instance_id: K })).status).toBe(200);
    expect((await getJson(`${s.url}/api/v1/models`)).models.find((m: any) => m.key === K).loaded_instances).toHaveLength(1);
  });

  test("refusal while busy", async () => {
    const s = await track(startLmStudioSim({ ...FAST, tokenDelayMs: 50, refuseWhileBusy: true }));
    const reader = await inFlight(s.url, K);
    expect((await post(`${s.url}/api/v1/models/unload`, { instance_id: K })).status).toBe(409);
    await drain(reader);
    expect((await post(`${s.url}/api/v1/models/unload`, { instance_id: K })).status).toBe(200);
  });
});

describe("simulated vLLM (sleep mode)", () => {
  const M = "qwen2.5-7b-instruct";
  test("loaded at start; /sleep frees the memory and /is_sleeping says so; /wake_up loads it again", async () => {
    const s = await track(startVllmSim(FAST));
    expect(s.gpu.holding("ollama")).toBe(true);
    expect(await getJson(`${s.url}/is_sleeping`)).toEqual({ is_sleeping: false });
    expect((await post(`${s.url}/sleep?level=1`)).status).toBe(200);
    expect(await getJson(`${s.url}/is_sleeping`)).toEqual({ is_sleeping: true });
    expect(s.gpu.holding("ollama")).toBe(false);
    expect((await chat(s.url, M)).status).toBe(503);
    expect((await post(`${s.url}/wake_up`)).status).toBe(200);
    expect(await getJson(`${s.url}/is_sleeping`)).toEqual({ is_sleeping: false });
    expect((await chat(s.url, M)).status).toBe(200);
  });

  test("the default sleep aborts a request in flight: its stream ends without [DONE]; /metrics showed it running", async () => {
    const s = await track(startVllmSim({ ...FAST, tokenDelayMs: 50 }));
    await waitFor(async () => (await chat(s.url, M)).status === 200, "ready");
    const reader = await inFlight(s.url, M);
    const m = await (await fetch(`${s.url}/metrics`)).text();
    expect(m).toMatch(/^vllm:num_requests_running\{[^}]*\} 1\.0$/m);
    expect(m).toMatch(/^vllm:num_requests_waiting\{[^}]*\} 0\.0$/m);
    await post(`${s.url}/sleep?level=1`);
    expect(await drain(reader)).not.toContain("[DONE]");
    expect(s.aborted()).toBe(1);
  });

  test("lying: /sleep answered 200 leaves it awake; busy refusal", async () => {
    const s = await track(startVllmSim({ ...FAST, releaseFreesNothing: true }));
    expect((await post(`${s.url}/sleep`)).status).toBe(200);
    expect(await getJson(`${s.url}/is_sleeping`)).toEqual({ is_sleeping: false });
    expect(s.gpu.holding("ollama")).toBe(true);
    const b = await track(startVllmSim({ ...FAST, tokenDelayMs: 50, refuseWhileBusy: true }));
    const reader = await inFlight(b.url, M);
    expect((await post(`${b.url}/sleep`)).status).toBe(409);
    await drain(reader);
    expect(b.aborted()).toBe(0);
  });

  test("without sleep mode the routes do not exist", async () => {
    const s = await track(startVllmSim({ ...FAST, sleepMode: false }));
    expect((await post(`${s.url}/sleep`)).status).toBe(404);
    expect((await fetch(`${s.url}/is_sleeping`)).status).toBe(404);
  });
});

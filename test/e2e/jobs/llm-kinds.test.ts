/**
 * Each LLM kind other than Ollama (llama-server, llama-swap, LM Studio, vLLM) paired with ComfyUI
 * through the real turnstile, on one simulated GPU: chats and image jobs interleaved, and the
 * ledger shows no moment both sides held memory. Plus each kind's trap end to end: llama-server's
 * autoloading chat waits at the turnstile during an image job; vLLM is woken before the first
 * chat after an image turn; a tenant that answers its release with a 200 and frees nothing is not
 * believed: the image job waits the whole UNLOAD_TIMEOUT and the log names the lie (then, as with
 * Ollama, the job runs: the bound ends the wait either way).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { now } from "../../../src/sim/clock.ts";
import { startComfySim, SimGpu, type ComfySim } from "../../../src/sim/index.ts";
import { startLlamaServerSim } from "../../../src/sim/llama-server.ts";
import { startLlamaSwapSim } from "../../../src/sim/llama-swap.ts";
import type { LlmSim, LlmSimOptions } from "../../../src/sim/llm-server.ts";
import { startLmStudioSim } from "../../../src/sim/lmstudio.ts";
import { startVllmSim, type VllmSim } from "../../../src/sim/vllm.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { FAST_COMFY, newPromptId, postJson, promptBody, settledAt, submit, waitFor, warnLines } from "./helpers.ts";

const MODEL = "qwen2.5-7b-instruct";
const TOKEN = "sk-lm-0123456789abcdef";
const FAST: LlmSimOptions = { loadMs: 10, unloadMs: 20, tokenDelayMs: 2, tokens: 5 };

interface LlmKindCase {
  kind: string;
  start(o: LlmSimOptions): Promise<LlmSim>;
  env?: Record<string, string>;
  headers?: Record<string, string>;
}

const LLM_KIND_CASES: LlmKindCase[] = [
  { kind: "llama-server", start: startLlamaServerSim },
  { kind: "llama-swap", start: startLlamaSwapSim },
  { kind: "lmstudio", start: (o) => startLmStudioSim({ ...o, token: TOKEN }), env: { LMSTUDIO_TOKEN: TOKEN }, headers: { Authorization: `Bearer ${TOKEN}` } },
  { kind: "vllm", start: startVllmSim },
];

interface KindStack {
  gpu: SimGpu;
  llm: LlmSim;
  comfy: ComfySim;
  t: TestTurnstile;
  stop(): Promise<void>;
}

let stack: KindStack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

async function startKind(c: LlmKindCase, llm: LlmSimOptions = {}, env: Record<string, string> = {}): Promise<KindStack> {
  const gpu = new SimGpu();
  const sim = await c.start({ ...FAST, ...llm, gpu });
  const comfy = await startComfySim({ ...FAST_COMFY, gpu });
  const t = startTestTurnstile({ OLLAMA_URL: sim.url, COMFY_URL: comfy.url, LLM_KIND: c.kind, ...c.env, ...env });
  await t.probed;
  return {
    gpu,
    llm: sim,
    comfy,
    t,
    async stop() {
      await t.close();
      await Promise.all([sim.stop(), comfy.stop()]);
    },
  };
}

function chat(s: KindStack, c: LlmKindCase, stream = false): Promise<Response> {
  return fetch(`${s.t.ollamaUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...c.headers },
    body: JSON.stringify({ model: MODEL, stream, messages: [{ role: "user", content: "hi" }] }),
  });
}

/** Submits one image job and waits until ComfyUI has run it to the end. */
async function imageJob(s: KindStack): Promise<string> {
  const id = newPromptId();
  const res = await submit(s.t, promptBody(id));
  expect(res.status).toBe(200);
  await res.text();
  await waitFor(() => s.comfy.jobs().find((j) => j.id === id && j.state === "done"), `job ${id} done`, 10_000);
  return id;
}

for (const c of LLM_KIND_CASES) {
  describe(`LLM_KIND=${c.kind} with ComfyUI`, () => {
    test("chats and image jobs interleaved: every one answered, the ledger shows no overlap", async () => {
      const s = (stack = await startKind(c));
      for (let round = 0; round < 3; round++) {
        const chats = await Promise.all([chat(s, c), chat(s, c, true), chat(s, c)]);
        for (const r of chats) {
          expect(r.status).toBe(200);
          expect(await r.text()).toContain("sky");
        }
        expect(s.gpu.holding("ollama")).toBe(true);
        await imageJob(s);
      }
      const last = await chat(s, c);
      expect(last.status).toBe(200);
      await last.text();
      expect(s.gpu.ledger.filter((h) => h.tenant === "comfy").length).toBeGreaterThanOrEqual(3);
      expect(s.gpu.overlaps()).toEqual([]);
    });

    test("a release answered as done that frees nothing is not believed: the image job waits UNLOAD_TIMEOUT and the log names the lie", async () => {
      const s = (stack = await startKind(c, { releaseFreesNothing: true }, { UNLOAD_TIMEOUT: "300ms", UNLOAD_POLL_INTERVAL: "20ms" }));
      const r = await chat(s, c);
      expect(r.status).toBe(200);
      await r.text();
      const t0 = now();
      const res = await submit(s.t, promptBody(newPromptId()));
      await res.text();
      const prompt = await waitFor(() => s.comfy.calls.find((x) => x.path === "/prompt"), "the job at ComfyUI");
      expect(prompt.at - t0).toBeGreaterThanOrEqual(300);
      expect(s.llm.resident().length).toBeGreaterThan(0);
      await waitFor(() => warnLines(s.t, "answered the release as done but still reports memory held").length > 0, "the warning");
    });
  });
}

test("llama-server: a chat that would autoload a model waits at the turnstile while an image job holds the card", async () => {
  const c = LLM_KIND_CASES[0] as LlmKindCase;
  const s = (stack = await startKind(c));
  const id = newPromptId();
  const res = await postJson(`${s.t.comfyUrl}/prompt`, promptBody(id, { sim_job_ms: 300 }));
  expect(res.status).toBe(200);
  await res.text();
  await waitFor(() => s.comfy.runningJob(), "job running");
  const answered = settledAt(chat(s, c).then((r) => r.text()));
  await waitFor(() => s.comfy.jobs().find((j) => j.id === id && j.state === "done"), "job done", 10_000);
  await waitFor(() => answered.done(), "chat answered", 10_000);
  expect(s.gpu.overlaps()).toEqual([]);
  // The chat reached llama-server (where it would have autoloaded the model) only after the job ended.
  const endedAt = s.comfy.jobs().find((j) => j.id === id)?.endedAt as number;
  const chats = s.llm.calls.filter((cl) => cl.path === "/v1/chat/completions");
  expect(chats).toHaveLength(1);
  expect(chats[0]!.at).toBeGreaterThanOrEqual(endedAt);
});

test("vLLM: asleep after an image turn, it is woken before the first chat, which is answered", async () => {
  const c = LLM_KIND_CASES[3] as LlmKindCase;
  const s = (stack = await startKind(c));
  await imageJob(s);
  const v = s.llm as VllmSim;
  expect(v.sleeping()).toBe(true);
  const r = await chat(s, c);
  expect(r.status).toBe(200);
  await r.text();
  const paths = s.llm.calls.map((cl) => cl.path);
  expect(paths.indexOf("/wake_up")).toBeGreaterThan(paths.indexOf("/sleep"));
  expect(paths.lastIndexOf("/wake_up")).toBeLessThan(paths.lastIndexOf("/v1/chat/completions"));
  expect(s.gpu.overlaps()).toEqual([]);
});

// A client's own /sleep through the turnstile used to reach vLLM: it aborted the answers in flight
// and left vLLM asleep until the next image turn (503 ModelSleepingError for every chat meanwhile).
test("vLLM: a client's own /sleep is refused in its dialect and vLLM stays awake; its /wake_up is harmless; the next chat is answered", async () => {
  const c = LLM_KIND_CASES[3] as LlmKindCase;
  const s = (stack = await startKind(c));
  const v = s.llm as VllmSim;
  for (const path of ["/sleep?level=1", "/sleep?level=2&mode=abort", "/sleep/"]) {
    const r = await fetch(`${s.t.ollamaUrl}${path}`, { method: "POST" });
    expect(r.status).toBe(409);
    expect(((await r.json()) as { error: string }).error).toStartWith("gpu-turnstile: vLLM's sleep and wake are managed by the turnstile");
  }
  expect(v.sleeping()).toBe(false);
  expect(s.llm.calls.filter((cl) => cl.path.startsWith("/sleep"))).toEqual([]);
  const woken = await fetch(`${s.t.ollamaUrl}/wake_up`, { method: "POST" });
  expect(woken.status).toBe(200);
  await woken.text();
  const r = await chat(s, c);
  expect(r.status).toBe(200);
  await r.text();
  expect(s.t.logLines.some((l) => l.includes("/sleep") && l.includes("409"))).toBe(true);
  expect(s.gpu.overlaps()).toEqual([]);
});

test("llama-server: a model --fit squeezed into what was left after an image turn is reported at warn, like Ollama's partial offload", async () => {
  const c = LLM_KIND_CASES[0] as LlmKindCase;
  const gpu = new SimGpu({ vramBytes: 9_000_000_000 });
  // Another program on the card keeps 4 GB through the hand-off: what --fit squeezes around.
  const leftover = gpu.acquire("ollama", "another program", 4_000_000_000);
  const sim = await c.start({ ...FAST, gpu });
  const comfy = await startComfySim({ ...FAST_COMFY, gpu, modelBytes: 2_000_000_000 });
  const t = startTestTurnstile({ OLLAMA_URL: sim.url, COMFY_URL: comfy.url, LLM_KIND: c.kind });
  const s = (stack = {
    gpu,
    llm: sim,
    comfy,
    t,
    async stop() {
      await t.close();
      await Promise.all([sim.stop(), comfy.stop()]);
    },
  });
  await t.probed;
  await imageJob(s);
  const r = await chat(s, c);
  expect(r.status).toBe(200);
  await r.text();
  const line = await waitFor(() => warnLines(t, "--fit squeezed it")[0], "the --fit warning");
  expect(line).toMatch(/qwen2\.5-7b-instruct loaded with \d+% of its context \(\d+ of 32768 tokens\)/);
  gpu.release(leftover);
}, 15_000);

test("vLLM: a request sent around the turnstile is drained before /sleep, never cut; the image job runs after it", async () => {
  const c = LLM_KIND_CASES[3] as LlmKindCase;
  const s = (stack = await startKind(c, { tokenDelayMs: 30, tokens: 10 }));
  // A client talking to vLLM directly: the turnstile's lock does not count it, vLLM's /metrics does.
  const direct = fetch(`${s.llm.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: "user", content: "hi" }] }),
  }).then((r) => r.text());
  await waitFor(() => s.llm.inflight() > 0, "the direct request running");
  const id = await imageJob(s);
  expect(await direct).toContain("data: [DONE]");
  expect((s.llm as VllmSim).aborted()).toBe(0);
  expect(s.llm.calls.some((cl) => cl.path === "/sleep")).toBe(true);
  expect(s.comfy.jobs().find((j) => j.id === id)).toBeDefined();
  expect(s.gpu.overlaps()).toEqual([]);
});

// Probe (issue 29): GET routes that name their model in `?model=` load it as surely as a chat does.
// llama-server's router proxies GET /lora-adapters like /props and /slots (server.cpp: proxy_get,
// autoload on); llama-swap starts the process for GET /v1/audio/voices and /sdapi/v1/loras
// (proxymanager.go: proxyGETModelHandler). Passed without the lock, they loaded the model on the
// card while an image job ran.
const MODEL_GETS: [LlmKindCase, string][] = [
  [LLM_KIND_CASES[0] as LlmKindCase, `/lora-adapters?model=${MODEL}`],
  [LLM_KIND_CASES[1] as LlmKindCase, `/v1/audio/voices?model=${MODEL}`],
  [LLM_KIND_CASES[1] as LlmKindCase, `/sdapi/v1/loras?model=${MODEL}`],
];
for (const [c, target] of MODEL_GETS) {
  test(`${c.kind}: GET ${target} (it loads the model) waits at the turnstile while an image job holds the card`, async () => {
    const s = (stack = await startKind(c));
    const id = newPromptId();
    const res = await postJson(`${s.t.comfyUrl}/prompt`, promptBody(id, { sim_job_ms: 300 }));
    expect(res.status).toBe(200);
    await res.text();
    await waitFor(() => s.comfy.runningJob(), "job running");
    const answered = settledAt(fetch(`${s.t.ollamaUrl}${target}`).then((r) => r.text()));
    await waitFor(() => s.comfy.jobs().find((j) => j.id === id && j.state === "done"), "job done", 10_000);
    await waitFor(() => answered.done(), "GET answered", 10_000);
    expect(s.gpu.overlaps()).toEqual([]);
    const endedAt = s.comfy.jobs().find((j) => j.id === id)?.endedAt as number;
    const gets = s.llm.calls.filter((cl) => cl.method === "GET" && target.startsWith(cl.path));
    expect(gets).toHaveLength(1);
    expect(gets[0]!.at).toBeGreaterThanOrEqual(endedAt);
  });
}

test("LM Studio: its SDK's websocket namespaces (/llm, /embedding load and run models) are refused, not relayed without the lock", async () => {
  const c = LLM_KIND_CASES[2] as LlmKindCase;
  const s = (stack = await startKind(c));
  const upgrade = { upgrade: "websocket", connection: "Upgrade", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" };
  for (const ns of ["/llm", "/embedding"]) {
    const res = await fetch(`${s.t.ollamaUrl}${ns}`, { headers: upgrade });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("runs GPU work over a websocket");
  }
  expect(s.llm.calls.filter((cl) => cl.path === "/llm" || cl.path === "/embedding")).toEqual([]);
  // The SDK's other namespaces (listings, downloads) stay relayed.
  expect((await fetch(`${s.t.ollamaUrl}/system`, { headers: upgrade })).status).not.toBe(403);
});

// Probe 2: with LLM_KIND=vllm, a nested LLM request (LISTEN_OLLAMA_NESTED: a ComfyUI node that
// calls the LLM mid-job) reached a vLLM the session's opening had put to sleep and was never woken
// (proxy/app.ts skipped `restored()` under a nested slot): vLLM's 503 for the whole image turn.
test("vLLM: a nested LLM request during an image job is answered (vLLM woken under the job's slot), not refused as asleep", async () => {
  const c = LLM_KIND_CASES[3] as LlmKindCase;
  const s = (stack = await startKind(c, {}, { LISTEN_OLLAMA_NESTED: "127.0.0.1:0" }));
  const id = newPromptId();
  const res = await postJson(`${s.t.comfyUrl}/prompt`, promptBody(id, { sim_job_ms: 600 }));
  expect(res.status).toBe(200);
  await res.text();
  await waitFor(() => s.comfy.runningJob(), "job running");
  expect((s.llm as VllmSim).sleeping()).toBe(true);
  const nested = await fetch(`${s.t.listener("nested")!.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }),
  });
  expect(nested.status).toBe(200);
  expect(await nested.text()).toContain("sky");
});

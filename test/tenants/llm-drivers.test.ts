/**
 * Contract tests of the llama-server, llama-swap, LM Studio and vLLM drivers against their
 * simulators, through the core's hand-over loop (tenants/hand-over.ts): an honest release is
 * proven from the tenant's own report; a 200 that frees nothing is never taken as released (the
 * hand-over waits its bound, says the tenant lied, and fails closed); a refusal while busy is not
 * released either; and each driver's own trap.
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { Config } from "../../src/config/types.ts";
import { describeConfig, loadConfig } from "../../src/config/load.ts";
import { SimGpu } from "../../src/sim/gpu.ts";
import { startLlamaServerSim } from "../../src/sim/llama-server.ts";
import { startLlamaSwapSim } from "../../src/sim/llama-swap.ts";
import type { LlmSim, LlmSimOptions } from "../../src/sim/llm-server.ts";
import { startLmStudioSim } from "../../src/sim/lmstudio.ts";
import { startVllmSim, type VllmSim } from "../../src/sim/vllm.ts";
import { handOver } from "../../src/tenants/hand-over.ts";
import { askedContext, LlamaServerTenant } from "../../src/tenants/llama-server.ts";
import { LlamaSwapTenant } from "../../src/tenants/llama-swap.ts";
import { lmStudioDriver, LmStudioTenant } from "../../src/tenants/lmstudio.ts";
import { LLM_DRIVERS } from "../../src/tenants/registry.ts";
import type { LlmTenant } from "../../src/tenants/types.ts";
import { requestsInFlight, VllmTenant } from "../../src/tenants/vllm.ts";
import { waitFor } from "../sim/helpers.ts";

const FAST = { loadMs: 30, unloadMs: 20, tokenDelayMs: 5 };
const BOUND = { timeoutMs: 400, pollMs: 20, callTimeoutMs: 300 };
const A = "qwen2.5-7b-instruct";
const B = "llama-3.2-3b-instruct";
const TOKEN = "sk-lm-0123456789abcdef";

const sims: LlmSim[] = [];

afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.stop()));
});

interface Kind {
  name: string;
  start(o: LlmSimOptions): Promise<LlmSim>;
  tenant(url: string, local?: boolean): LlmTenant;
  /** Puts something on the card the way a client would. */
  occupy(s: LlmSim): Promise<void>;
}

function post(url: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
}
async function chatOk(url: string, model: string, headers: Record<string, string> = {}): Promise<void> {
  const res = await post(`${url}/v1/chat/completions`, { model, messages: [{ role: "user", content: "hi" }] }, headers);
  expect(res.status).toBe(200);
  await res.text();
}
/** A streamed chat read up to its first chunk; drain() reads the rest. */
async function streaming(url: string, model: string, headers: Record<string, string> = {}) {
  const res = await post(`${url}/v1/chat/completions`, { model, stream: true, messages: [{ role: "user", content: "hi" }] }, headers);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  return {
    async drain(): Promise<string> {
      let t = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return t;
        t += new TextDecoder().decode(value);
      }
    },
  };
}

const KINDS: Kind[] = [
  {
    name: "llama-server",
    start: (o) => startLlamaServerSim(o),
    tenant: (u, local = false) => new LlamaServerTenant(new URL(u), local),
    async occupy(s) {
      await chatOk(s.url, A);
      await post(`${s.url}/models/load`, { model: B });
    },
  },
  {
    name: "llama-swap",
    start: (o) => startLlamaSwapSim(o),
    tenant: (u, local = false) => new LlamaSwapTenant(new URL(u), local),
    occupy: (s) => chatOk(s.url, A),
  },
  {
    name: "lmstudio",
    start: (o) => startLmStudioSim({ ...o, token: TOKEN }),
    tenant: (u, local = false) => new LmStudioTenant(new URL(u), TOKEN, local),
    async occupy(s) {
      const auth = { Authorization: `Bearer ${TOKEN}` };
      await post(`${s.url}/api/v1/models/load`, { model: A }, auth);
      await post(`${s.url}/api/v1/models/load`, { model: A }, auth);
    },
  },
  {
    name: "vllm",
    start: (o) => startVllmSim(o),
    tenant: (u, local = false) => new VllmTenant(new URL(u), local),
    occupy: (s) => chatOk(s.url, A),
  },
];

async function started(k: Kind, o: LlmSimOptions = {}): Promise<LlmSim> {
  const s = await k.start({ ...FAST, ...o });
  sims.push(s);
  return s;
}

test("the registry builds each of the four kinds", () => {
  for (const k of ["llama-server", "llama-swap", "lmstudio", "vllm"] as const) {
    const t = LLM_DRIVERS[k]?.create({ base: new URL("http://127.0.0.1:1"), config: { lmstudioToken: "" } as Config, local: true });
    expect(t?.kind).toBe(k);
    expect(t?.side).toBe("llm");
  }
});

for (const k of KINDS) {
  describe(`${k.name} driver`, () => {
    test("release + verify: the hand-over is proven from the tenant's own report and the card is empty", async () => {
      const s = await started(k);
      await k.occupy(s);
      const t = k.tenant(s.url);
      expect((await t.verify({ signal: AbortSignal.timeout(1000) })).held).toBe(true);
      const r = await handOver(t, BOUND);
      expect(r).toMatchObject({ released: true });
      expect(r.lied).toBeUndefined();
      expect(s.gpu.holding("ollama")).toBe(false);
      expect(await t.resident({ signal: AbortSignal.timeout(1000) })).toEqual([]);
    });

    test("lying: a release answered as done that frees nothing is not taken as released; the hand-over waits its bound and says so", async () => {
      const s = await started(k, { releaseFreesNothing: true });
      await k.occupy(s);
      const t0 = performance.now();
      const r = await handOver(k.tenant(s.url), BOUND);
      expect(r.released).toBe(false);
      expect(r.lied).toBe(true);
      expect(r.error).toContain("answered the release as done but still reports memory held");
      expect(performance.now() - t0).toBeGreaterThanOrEqual(BOUND.timeoutMs - 5);
      expect(s.gpu.holding("ollama")).toBe(true);
    });

    test("lying: a release refused while a request is in flight is not released either (and not a lie)", async () => {
      const s = await started(k, { refuseWhileBusy: true });
      await k.occupy(s);
      // Only the stream below must outlast the bound by far; the chat that occupied the card need not.
      s.setTiming({ tokenDelayMs: 50, tokens: 30 });
      const auth: Record<string, string> = k.name === "lmstudio" ? { Authorization: `Bearer ${TOKEN}` } : {};
      const stream = await streaming(s.url, A, auth);
      const r = await handOver(k.tenant(s.url), BOUND);
      expect(r.released).toBe(false);
      expect(r.lied).toBeUndefined();
      expect(s.gpu.holding("ollama")).toBe(true);
      expect(await stream.drain()).toContain("data: [DONE]");
    });

    test("unreadable report: a tenant elsewhere that does not answer counts as holding; one on this machine that refuses holds nothing", async () => {
      const s = await started(k);
      const url = s.url;
      await s.stop();
      const far = await k.tenant(url).verify({ signal: AbortSignal.timeout(1000) });
      expect(far.held).toBe(true);
      expect(far.unreadable).toBeDefined();
      const near = await k.tenant(url, true).verify({ signal: AbortSignal.timeout(1000) });
      expect(near).toMatchObject({ held: false });
      expect(near.notRunning).toBeDefined();
    });
  });
}

describe("llama-server traps", () => {
  const t = new LlamaServerTenant(new URL("http://127.0.0.1:1"), false);
  test("classify: any POST naming a model may autoload it (LLM work), and so may the GET routes that take ?model=; listings pass", () => {
    for (const p of ["/v1/chat/completions", "/completion", "/v1/embeddings", "/tokenize", "/infill", "/models/load", "/v1/messages"]) {
      expect(t.classify("POST", p)).toBe("llm");
    }
    for (const p of ["/props", "/slots", "/metrics", "/lora-adapters"]) expect(t.classify("GET", p)).toBe("llm");
    expect(t.classify("POST", "/models/unload")).toBe("pass");
    for (const p of ["/models", "/v1/models", "/health"]) expect(t.classify("GET", p)).toBe("pass");
  });

  test("release unloads every loaded and loading model (no unload-all), each by name", async () => {
    const s = await started(KINDS[0] as Kind, { loadMs: 300 });
    await chatOk(s.url, A);
    await post(`${s.url}/models/load`, { model: B }); // still loading
    const r = await handOver(new LlamaServerTenant(new URL(s.url), false), { ...BOUND, timeoutMs: 2000 });
    expect(r.released).toBe(true);
    expect(r.tried.sort()).toEqual([A, B].sort());
    expect(s.calls.filter((c) => c.path === "/models/unload").map((c) => JSON.parse(c.bodyText).model).sort()).toEqual([A, B].sort());
    expect(s.gpu.holding("ollama")).toBe(false);
  });

  test("a model asleep (--sleep-idle-seconds) holds nothing: the hand-over is proven without unloading it", async () => {
    const s = await startLlamaServerSim({ ...FAST, sleepIdleMs: 20 });
    sims.push(s);
    await chatOk(s.url, A);
    await waitFor(() => !s.gpu.holding("ollama"), "the model asleep");
    const r = await handOver(new LlamaServerTenant(new URL(s.url), false), BOUND);
    expect(r).toMatchObject({ released: true, tried: [] });
    expect(s.calls.some((c) => c.path === "/models/unload")).toBe(false);
  });

  test("--fit: a model squeezed into what was free is reported with its context against the one asked for; the reading autoloads nothing", async () => {
    const gpu = new SimGpu({ vramBytes: 8_000_000_000 });
    const leftover = gpu.acquire("comfy", "checkpoint still held", 4_000_000_000);
    const s = await started(KINDS[0] as Kind, { gpu });
    await chatOk(s.url, A);
    const tenant = new LlamaServerTenant(new URL(s.url), false);
    const warnings = await tenant.afterLoad({ signal: AbortSignal.timeout(1000) });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^qwen2\.5-7b-instruct loaded with \d+% of its context \(\d+ of 32768 tokens\): llama-server's --fit squeezed it/);
    expect(s.resident()).toEqual([A]); // B was not autoloaded by the reading
    gpu.release(leftover);
    expect(askedContext(["llama-server", "-c", "4096"])).toBe(4096);
  });

  test("--fit: a model that had the whole card is not reported", async () => {
    const s = await started(KINDS[0] as Kind);
    await chatOk(s.url, A);
    expect(await new LlamaServerTenant(new URL(s.url), false).afterLoad({ signal: AbortSignal.timeout(1000) })).toEqual([]);
  });
});

describe("llama-swap traps", () => {
  test("classify: its OpenAI routes and /upstream/ start a process; the unload routes and listings pass", () => {
    const t = new LlamaSwapTenant(new URL("http://127.0.0.1:1"), false);
    expect(t.classify("POST", "/v1/chat/completions")).toBe("llm");
    expect(t.classify("GET", "/upstream/qwen/props")).toBe("llm");
    for (const p of ["/v1/audio/voices", "/sdapi/v1/loras"]) expect(t.classify("GET", p)).toBe("llm");
    expect(t.classify("GET", "/v1/models")).toBe("pass");
    expect(t.classify("POST", "/api/models/unload")).toBe("pass");
    expect(t.classify("POST", "/api/models/unload/qwen")).toBe("pass");
    expect(t.classify("GET", "/running")).toBe("pass");
  });
});

describe("LM Studio traps", () => {
  test("every instance id is unloaded, not the base key only", async () => {
    const s = await started(KINDS[2] as Kind);
    await (KINDS[2] as Kind).occupy(s);
    const r = await handOver(new LmStudioTenant(new URL(s.url), TOKEN, false), BOUND);
    expect(r.released).toBe(true);
    expect(r.tried).toEqual([A, `${A}:2`]);
    expect(s.gpu.holding("ollama")).toBe(false);
  });

  test("without the token the listing is refused: unreadable, so held (fail closed); LMSTUDIO_TOKEN reaches the driver", async () => {
    const s = await started(KINDS[2] as Kind);
    const h = await new LmStudioTenant(new URL(s.url), "", false).verify({ signal: AbortSignal.timeout(1000) });
    expect(h.held).toBe(true);
    expect(h.unreadable).toContain("401");
    const { config } = loadConfig({ env: { OLLAMA_URL: s.url, LLM_KIND: "lmstudio", LMSTUDIO_TOKEN: TOKEN }, execPath: "/nonexistent/gpu-turnstile", readFile: () => null });
    const t = lmStudioDriver.create({ base: new URL(s.url), config, local: false });
    expect((await t.verify({ signal: AbortSignal.timeout(1000) })).held).toBe(false);
  });

  test("LMSTUDIO_TOKEN is masked in the startup description", () => {
    const { config } = loadConfig({ env: { OLLAMA_URL: "http://127.0.0.1:1234", LMSTUDIO_TOKEN: TOKEN }, execPath: "/nonexistent/gpu-turnstile", readFile: () => null });
    const lines = describeConfig(config);
    expect(lines).toContain("LMSTUDIO_TOKEN=***");
    expect(lines.join("\n")).not.toContain(TOKEN);
  });

  test("classify: completions may JIT-load (LLM work); unload and download pass", () => {
    const t = new LmStudioTenant(new URL("http://127.0.0.1:1"), "", false);
    expect(t.classify("POST", "/v1/chat/completions")).toBe("llm");
    expect(t.classify("POST", "/api/v1/chat")).toBe("llm");
    expect(t.classify("POST", "/api/v1/models/load")).toBe("llm");
    expect(t.classify("POST", "/api/v1/models/unload")).toBe("pass");
    expect(t.classify("GET", "/api/v1/models")).toBe("pass");
    // The SDK's websocket namespaces that load and run models (refused as websockets by the proxy).
    for (const p of ["/llm", "/embedding"]) expect(t.classify("GET", p)).toBe("llm");
    expect(t.classify("GET", "/system")).toBe("pass");
  });
});

describe("vLLM traps", () => {
  const vllm = async (o: LlmSimOptions = {}): Promise<VllmSim> => {
    const s = await startVllmSim({ ...FAST, ...o });
    sims.push(s);
    return s;
  };

  test("a client's own /sleep is the turnstile's to refuse (409); /wake_up, the unloads of the other kinds and everything else are not", () => {
    const t = new VllmTenant(new URL("http://127.0.0.1:1"), true);
    for (const p of ["/sleep", "/sleep/"]) expect(t.refuse("POST", p)).toMatchObject({ status: 409, type: "managed_by_turnstile" });
    expect(t.refuse("POST", "/sleep")!.message).toContain("gpu-turnstile lease");
    for (const [m, p] of [["POST", "/wake_up"], ["POST", "/collective_rpc"], ["GET", "/is_sleeping"], ["POST", "/v1/chat/completions"], ["GET", "/sleep"]] as const) expect(t.refuse(m, p)).toBeUndefined();
    for (const k of ["llama-server", "llama-swap", "lmstudio"] as const) {
      const other = LLM_DRIVERS[k]!.create({ base: new URL("http://127.0.0.1:1"), config: { lmstudioToken: "" } as Config, local: true });
      expect(other.refuse).toBeUndefined();
    }
  });

  test("a request in flight is drained BEFORE /sleep: it ends whole, and only then does the engine sleep", async () => {
    const s = await vllm({ tokenDelayMs: 20, tokens: 10 });
    await chatOk(s.url, A);
    const stream = await streaming(s.url, A);
    const r = await handOver(new VllmTenant(new URL(s.url), false), { ...BOUND, timeoutMs: 3000 });
    expect(r.released).toBe(true);
    expect(await stream.drain()).toContain("data: [DONE]");
    expect(s.aborted()).toBe(0);
    const sleep = s.calls.find((c) => c.path === "/sleep");
    expect(sleep?.query).toBe("level=1");
  });

  test("a request that outlasts the bound is never cut: no /sleep is sent and the hand-over fails closed", async () => {
    const s = await vllm();
    await chatOk(s.url, A);
    s.setTiming({ tokenDelayMs: 50, tokens: 20 });
    const stream = await streaming(s.url, A);
    const r = await handOver(new VllmTenant(new URL(s.url), false), { ...BOUND, timeoutMs: 200 });
    expect(r.released).toBe(false);
    expect(r.error).toContain("/sleep would abort them");
    expect(s.calls.some((c) => c.path === "/sleep")).toBe(false);
    expect(s.gpu.holding("ollama")).toBe(true);
    expect(await stream.drain()).toContain("data: [DONE]");
    expect(s.aborted()).toBe(0);
  });

  test("restore wakes it: /wake_up, then /is_sleeping false and a chat answers", async () => {
    const s = await vllm();
    const t = new VllmTenant(new URL(s.url), false);
    expect((await handOver(t, BOUND)).released).toBe(true);
    expect(s.sleeping()).toBe(true);
    await t.restore({ signal: AbortSignal.timeout(1000) });
    expect(s.sleeping()).toBe(false);
    await chatOk(s.url, A);
  });

  test("without sleep mode, verify says what to enable", async () => {
    const s = await vllm({ sleepMode: false } as LlmSimOptions);
    const h = await new VllmTenant(new URL(s.url), false).verify({ signal: AbortSignal.timeout(1000) });
    expect(h.held).toBe(true);
    expect(h.unreadable).toContain("VLLM_SERVER_DEV_MODE=1");
  });

  test("/metrics: running and waiting are summed over every line", () => {
    const text = 'vllm:num_requests_running{engine="0",model_name="m"} 2.0\nvllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n# vllm:num_requests_running 9\n';
    expect(requestsInFlight(text)).toBe(3);
  });

  test("classify: every POST but /sleep is LLM work (/wake_up loads the model)", () => {
    const t = new VllmTenant(new URL("http://127.0.0.1:1"), false);
    expect(t.classify("POST", "/v1/chat/completions")).toBe("llm");
    expect(t.classify("POST", "/wake_up")).toBe("llm");
    expect(t.classify("POST", "/sleep")).toBe("pass");
    expect(t.classify("GET", "/metrics")).toBe("pass");
  });
});

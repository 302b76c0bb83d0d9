import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { goJson } from "../../src/sim/gojson.ts";
import { type OllamaSim, startOllamaSim } from "../../src/sim/ollama.ts";
import { isDict, parsePy, type PyValue } from "../../src/sim/pyjson.ts";
import { expectSameShape, fixture, fixtureLines, fixtureText, post, readChunks, waitFor } from "./helpers.ts";

const JSON_CT = "application/json; charset=utf-8";
/** keep_alive -1 is Go's MaxInt64 duration: about 292 years from now (2318 when the fixtures were taken). */
const FOREVER_YEAR = new Date(Date.now() + 9223372036854.775).getFullYear();
let sim: OllamaSim;

beforeEach(async () => {
  sim = await startOllamaSim({ loadMs: 20, unloadMs: 40, tokenDelayMs: 5 });
});
afterEach(async () => {
  await sim.stop();
});

/** Replaces the default simulator with one using other timings. */
async function useSim(opts: Parameters<typeof startOllamaSim>[0]): Promise<void> {
  await sim.stop();
  sim = await startOllamaSim(opts);
}

async function ps(): Promise<string[]> {
  const body = (await (await fetch(`${sim.url}/api/ps`)).json()) as { models: { name: string }[] };
  return body.models.map((m) => m.name);
}

/** Body text parsed with key order preserved; also checks it is Go-compact JSON. */
async function goBody(res: Response): Promise<PyValue> {
  const text = await res.text();
  expect(goJson(JSON.parse(text))).toBe(text);
  return parsePy(text);
}

describe("simulated Ollama: read-only routes", () => {
  test("GET and HEAD / say Ollama is running", async () => {
    const res = await fetch(`${sim.url}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/plain; charset=utf-8");
    expect(await res.text()).toBe("Ollama is running");
    const head = await fetch(`${sim.url}/`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
  });

  test("/api/version is the fixture, byte for byte", async () => {
    const res = await fetch(`${sim.url}/api/version`);
    expect(res.headers.get("content-type")).toBe(JSON_CT);
    expect(await res.text()).toBe(goJson(JSON.parse(fixtureText("ollama-version.json"))));
  });

  test("/api/tags has the fixture's shape and the default catalog", async () => {
    const res = await fetch(`${sim.url}/api/tags`);
    expect(res.headers.get("content-type")).toBe(JSON_CT);
    const body = await goBody(res);
    expectSameShape(body, fixture("ollama-tags.json"));
    const names = (JSON.parse(goJson(JSON.parse(await (await fetch(`${sim.url}/api/tags`)).text()))) as { models: { name: string; capabilities: string[] }[] }).models;
    expect(names.map((m) => m.name)).toEqual(["llama3.2:latest", "qwen2.5:7b", "nomic-embed-text:latest"]);
    expect(names.find((m) => m.name === "nomic-embed-text:latest")?.capabilities).toEqual(["embedding"]);
  });

  test("/api/ps is empty with nothing loaded, and lists a model with the fixture's shape", async () => {
    const empty = await fetch(`${sim.url}/api/ps`);
    expect(await empty.text()).toBe(goJson(JSON.parse(fixtureText("ollama-ps-empty.json"))));
    await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: -1 });
    await post(`${sim.url}/api/generate`, { model: "nomic-embed-text", keep_alive: -1 }).then((r) => r.text());
    await post(`${sim.url}/api/embed`, { model: "nomic-embed-text", input: "x", keep_alive: -1 }).then((r) => r.text());
    await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: "10m" }).then((r) => r.text());
    const body = await goBody(await fetch(`${sim.url}/api/ps`));
    expectSameShape(body, fixture("ollama-ps.json"));
    const models = JSON.parse(await (await fetch(`${sim.url}/api/ps`)).text()).models as { name: string; expires_at: string; size_vram: number }[];
    // Sorted by expires_at, latest first: keep_alive -1 is about 292 years away.
    expect(models.map((m) => m.name)).toEqual(["nomic-embed-text:latest", "llama3.2:latest"]);
    expect(models[0]?.expires_at.startsWith(`${FOREVER_YEAR}-`)).toBe(true);
    expect(models[0]?.size_vram).toBe(590557184);
  });

  test("unknown path is gin's 404 text, wrong method gin's 405", async () => {
    const nf = await fetch(`${sim.url}/api/nope`);
    expect(nf.status).toBe(404);
    expect(nf.headers.get("content-type")).toBe("text/plain");
    expect(await nf.text()).toBe("404 page not found");
    const na = await fetch(`${sim.url}/api/generate`);
    expect(na.status).toBe(405);
    expect(await na.text()).toBe("405 method not allowed");
    expect((await fetch(`${sim.url}/api/ps`, { method: "POST" })).status).toBe(405);
  });
});

describe("simulated Ollama: load and unload (O2, O3, O6)", () => {
  test("empty prompt loads the model and answers done_reason load", async () => {
    const res = await post(`${sim.url}/api/generate`, { model: "llama3.2" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe(JSON_CT);
    const body = await goBody(res);
    expectSameShape(body, fixture("ollama-generate-load.json"));
    expect(isDict(body) && body.get("done_reason")).toBe("load");
    expect(await ps()).toEqual(["llama3.2:latest"]);
  });

  test("keep_alive 0 answers unload at once; /api/ps lists the model until the async unload completes", async () => {
    // A long unload, so that "still listed right after the reply" holds on a loaded machine.
    await useSim({ loadMs: 5, unloadMs: 400 });
    await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: -1 });
    const res = await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: 0 });
    const body = await goBody(res);
    expectSameShape(body, fixture("ollama-generate-unload.json"));
    expect(isDict(body) && body.get("model")).toBe("llama3.2"); // echoes the request's name
    expect(isDict(body) && body.get("done_reason")).toBe("unload");
    // The reply does not wait for the unload: the model is still listed and still holds VRAM.
    expect(await ps()).toEqual(["llama3.2:latest"]);
    expect(sim.gpu.vramUsed("ollama")).toBeGreaterThan(0);
    await waitFor(async () => (await ps()).length === 0, "model to leave /api/ps");
    expect(sim.gpu.vramUsed("ollama")).toBe(0);
    const hold = sim.gpu.ledger.at(-1);
    expect(hold?.end).not.toBeNull();
  });

  test("chat with no messages and keep_alive 0 answers the chat-shaped unload", async () => {
    const body = await goBody(await post(`${sim.url}/api/chat`, { model: "llama3.2", messages: [], keep_alive: 0 }));
    expectSameShape(body, fixture("ollama-chat-unload.json"));
  });

  test("unloading a model that is not loaded is a 200 no-op; an unknown model is 404", async () => {
    const ok = await post(`${sim.url}/api/generate`, { model: "qwen2.5:7b", keep_alive: 0 });
    expect(ok.status).toBe(200);
    expect(sim.gpu.ledger).toEqual([]);
    const nf = await post(`${sim.url}/api/generate`, { model: "llama9", keep_alive: 0 });
    expect(nf.status).toBe(404);
    expect(await nf.text()).toBe(goJson(JSON.parse(fixtureText("ollama-error-404.json"))));
  });

  test("a model in use unloads only after its last request finishes", async () => {
    // A slow answer (about 1 s) and a quick unload: the unload can only be waiting for the stream.
    await useSim({ loadMs: 5, unloadMs: 10, tokenDelayMs: 100 });
    const stream = await post(`${sim.url}/api/generate`, { model: "llama3.2", prompt: "why is the sky blue?" });
    const reader = (stream.body as ReadableStream<Uint8Array>).getReader();
    await reader.read(); // generating now
    await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: 0 });
    await Bun.sleep(60); // far longer than unloadMs: it would be gone if the unload ignored the request
    expect(sim.inflight()).toBe(1);
    expect(await ps()).toEqual(["llama3.2:latest"]);
    while (!(await reader.read()).done) {}
    await waitFor(async () => (await ps()).length === 0, "unload after the stream ended");
  });

  test("a request without keep_alive keeps the runner's existing keep-alive (-1 stays forever)", async () => {
    await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: -1 });
    await (await post(`${sim.url}/api/generate`, { model: "llama3.2", prompt: "hi", stream: false })).text();
    const models = JSON.parse(await (await fetch(`${sim.url}/api/ps`)).text()).models as { expires_at: string }[];
    expect(models[0]?.expires_at.startsWith(`${FOREVER_YEAR}-`)).toBe(true);
  });

  test("the default keep-alive is 5 minutes and a short one expires by itself", async () => {
    await post(`${sim.url}/api/generate`, { model: "llama3.2" });
    const models = JSON.parse(await (await fetch(`${sim.url}/api/ps`)).text()).models as { expires_at: string }[];
    const expires = Date.parse((models[0]?.expires_at ?? "").replace(/\.(\d{3})\d*/, ".$1"));
    expect(expires - Date.now()).toBeGreaterThan(4 * 60_000);
    expect(expires - Date.now()).toBeLessThan(5 * 60_000 + 5000);
    await post(`${sim.url}/api/generate`, { model: "qwen2.5:7b", keep_alive: "30ms" });
    await waitFor(async () => !(await ps()).includes("qwen2.5:7b"), "keep-alive expiry");
  });
});

describe("simulated Ollama: embedding-only models", () => {
  test("generate and chat are refused with the fixtures' 400s", async () => {
    const gen = await post(`${sim.url}/api/generate`, { model: "nomic-embed-text", prompt: "hi" });
    expect(gen.status).toBe(400);
    expect(await gen.text()).toBe(goJson(JSON.parse(fixtureText("ollama-error-400-no-generate.json"))));
    const chat = await post(`${sim.url}/api/chat`, { model: "nomic-embed-text", messages: [{ role: "user", content: "hi" }] });
    expect(chat.status).toBe(400);
    expect(await chat.text()).toBe(goJson(JSON.parse(fixtureText("ollama-error-400-no-chat.json"))));
    expect(sim.gpu.ledger).toEqual([]);
  });

  test("but the generate unload shortcut works for them", async () => {
    await post(`${sim.url}/api/embed`, { model: "nomic-embed-text", input: "x", keep_alive: -1 });
    const res = await post(`${sim.url}/api/generate`, { model: "nomic-embed-text", keep_alive: 0 });
    expect(res.status).toBe(200);
    await waitFor(async () => (await ps()).length === 0, "embedding model unloaded");
  });

  test("legacyUnload: like Ollama before v0.3.11 the shortcut refuses them, /api/embed still unloads", async () => {
    await useSim({ loadMs: 5, unloadMs: 10, legacyUnload: true });
    await post(`${sim.url}/api/embed`, { model: "nomic-embed-text", input: "x", keep_alive: -1 });
    const res = await post(`${sim.url}/api/generate`, { model: "nomic-embed-text", keep_alive: 0 });
    expect(res.status).toBe(400);
    expect(await ps()).toEqual(["nomic-embed-text:latest"]);
    expect((await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: 0 })).status).toBe(200);
    await post(`${sim.url}/api/embed`, { model: "nomic-embed-text", input: "x", keep_alive: 0 });
    await waitFor(async () => (await ps()).length === 0, "unloaded through /api/embed");
  });

  test("/api/embed loads the model, embeds, and with keep_alive 0 unloads it afterwards", async () => {
    const res = await post(`${sim.url}/api/embed`, { model: "nomic-embed-text", input: ["a", "b"], keep_alive: 0 });
    expect(res.status).toBe(200);
    const body = JSON.parse(await res.text()) as { model: string; embeddings: number[][] };
    expect(body.model).toBe("nomic-embed-text");
    expect(body.embeddings).toHaveLength(2);
    expect(body.embeddings[0]).toHaveLength(768);
    expect(sim.gpu.ledger).toHaveLength(1);
    await waitFor(() => sim.gpu.ledger[0]?.end !== null, "embed model released");
    expect(await ps()).toEqual([]);
  });

  test("/api/embed with empty input still loads the model (fixture reply)", async () => {
    const res = await post(`${sim.url}/api/embed`, { model: "nomic-embed-text", input: [] });
    expect(await res.text()).toBe(goJson(JSON.parse(fixtureText("ollama-embed-empty.json"))));
    expect(await ps()).toEqual(["nomic-embed-text:latest"]);
  });

  test("embed errors: unknown model 404, bad input 400, legacy /api/embeddings", async () => {
    const nf = await post(`${sim.url}/api/embed`, { model: "llama9", input: "x" });
    expect(nf.status).toBe(404);
    expect(JSON.parse(await nf.text())).toEqual({ error: 'model "llama9" not found, try pulling it first' });
    expect((await post(`${sim.url}/api/embed`, { model: "nomic-embed-text", input: [1] })).status).toBe(400);
    const legacy = JSON.parse(await (await post(`${sim.url}/api/embeddings`, { model: "nomic-embed-text", prompt: "" })).text());
    expect(legacy).toEqual({ embedding: [] });
  });
});

describe("simulated Ollama: inference streams", () => {
  test("/api/generate streams NDJSON lines incrementally, shaped like the fixture", async () => {
    await useSim({ loadMs: 5, tokenDelayMs: 40 }); // slow enough that chunks are seen mid-answer
    const res = await post(`${sim.url}/api/generate`, { model: "llama3.2", prompt: "Why is the sky blue?" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/x-ndjson");
    const seenWhileGenerating: number[] = [];
    const chunks = await readChunks(res, () => {
      seenWhileGenerating.push(sim.inflight());
    });
    // The first chunk arrived while the answer was still being generated: it was streamed.
    expect(seenWhileGenerating[0]).toBe(1);
    expect(chunks.length).toBeGreaterThan(3);
    const lines = chunks.join("").split("\n").filter((l) => l !== "");
    const expected = fixtureLines("ollama-generate-stream.ndjson");
    expect(lines).toHaveLength(expected.length);
    for (const l of lines) expect(goJson(JSON.parse(l))).toBe(l);
    expectSameShape(parsePy(lines[0] as string), expected[0] as PyValue);
    expectSameShape(parsePy(lines.at(-1) as string), expected.at(-1) as PyValue);
    expect(lines.map((l) => JSON.parse(l).response).join("")).toBe("The sky appears blue because of Rayleigh scattering.");
    expect(sim.inflight()).toBe(0);
  });

  test("/api/chat streams message chunks like the fixture; stream:false gives one object", async () => {
    const res = await post(`${sim.url}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
    const lines = (await res.text()).split("\n").filter((l) => l !== "");
    const expected = fixtureLines("ollama-chat-stream.ndjson");
    expectSameShape(parsePy(lines[0] as string), expected[0] as PyValue);
    expectSameShape(parsePy(lines.at(-1) as string), expected.at(-1) as PyValue);
    const one = await post(`${sim.url}/api/chat`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false });
    expect(one.headers.get("content-type")).toBe(JSON_CT);
    const body = JSON.parse(await one.text());
    expect(body.message.content).toBe("The sky appears blue because of Rayleigh scattering.");
    expect(body.done_reason).toBe("stop");
  });

  test("a client abort mid-stream stops generation and releases the model", async () => {
    await useSim({ loadMs: 5, unloadMs: 10, tokenDelayMs: 100 });
    const ac = new AbortController();
    const res = await fetch(`${sim.url}/api/chat`, {
      method: "POST",
      body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], keep_alive: 0 }),
      signal: ac.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    expect(sim.inflight()).toBe(1);
    ac.abort();
    await waitFor(() => sim.inflight() === 0, "in-flight count back to 0");
    // keep_alive 0 made the runner unload when its last request let go.
    await waitFor(async () => (await ps()).length === 0, "model unloaded after abort");
  });

  test("a client that gives up while the model loads is no longer in flight; the load completes", async () => {
    // A full answer would take 20 s: only giving up on the client's behalf ends it sooner.
    await useSim({ loadMs: 300, unloadMs: 10, tokenDelayMs: 2000 });
    const ac = new AbortController();
    const pending = fetch(`${sim.url}/api/generate`, { method: "POST", body: JSON.stringify({ model: "llama3.2", prompt: "hi" }), signal: ac.signal }).catch(
      (e: unknown) => e,
    );
    await waitFor(() => sim.inflight() === 1, "request waiting for the load");
    ac.abort();
    expect(await pending).toBeInstanceOf(Error);
    await waitFor(() => sim.inflight() === 0, "in-flight count back to 0");
    expect(await ps()).toEqual(["llama3.2:latest"]); // Ollama finishes a load it started
  });

  test("a missing body is 400 missing request body; broken JSON is 400 too", async () => {
    const res = await fetch(`${sim.url}/api/generate`, { method: "POST" });
    expect(res.status).toBe(400);
    expect(await res.text()).toBe('{"error":"missing request body"}');
    const bad = await post(`${sim.url}/api/chat`, "{nope");
    expect(bad.status).toBe(400);
    expect(JSON.parse(await bad.text()).error).toContain("invalid character");
  });

  test("/api/pull streams the progress sequence of O8", async () => {
    const res = await post(`${sim.url}/api/pull`, { model: "llama3.2" });
    expect(res.headers.get("content-type")).toBe("application/x-ndjson");
    const lines = (await res.text()).split("\n").filter((l) => l !== "").map((l) => parsePy(l));
    const expected = fixtureLines("ollama-pull-stream.ndjson");
    expect(lines).toHaveLength(expected.length);
    lines.forEach((l, i) => expectSameShape(l, expected[i] as PyValue));
    const last = await post(`${sim.url}/api/pull`, { model: "llama3.2", stream: false });
    expect(await last.text()).toBe('{"status":"success"}');
  });
});

describe("simulated Ollama: OpenAI-compatible routes (O4)", () => {
  function events(text: string): string[] {
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    return text.split("\n\n").filter((e) => e !== "");
  }

  test("SSE chunks: role only first, separate finish chunk, pinned created — like the fixture", async () => {
    const res = await post(`${sim.url}/v1/chat/completions`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: true });
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const evs = events(await res.text());
    const expected = fixtureText("openai-chat-stream.sse").split("\n\n").filter((e) => e !== "");
    expect(evs).toHaveLength(expected.length);
    for (const [i, e] of evs.entries()) {
      expect(e.startsWith("data: ")).toBe(true);
      if (e === "data: [DONE]") continue;
      expectSameShape(parsePy(e.slice(6)), parsePy((expected[i] as string).slice(6)));
    }
    const chunks = evs.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
    expect(new Set(chunks.map((c) => c.created)).size).toBe(1);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks[0].id).toMatch(/^chatcmpl-\d{1,3}$/);
    expect(chunks.at(-1).choices[0]).toEqual({ index: 0, delta: {}, finish_reason: "stop" });
  });

  test("stream_options.include_usage adds a usage chunk with no choices", async () => {
    const res = await post(`${sim.url}/v1/chat/completions`, {
      model: "llama3.2",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const evs = events(await res.text());
    const expected = fixtureText("openai-chat-stream-usage.sse").split("\n\n").filter((e) => e !== "");
    expect(evs).toHaveLength(expected.length);
    expectSameShape(parsePy((evs.at(-2) as string).slice(6)), parsePy((expected.at(-2) as string).slice(6)));
    expect(JSON.parse((evs.at(-2) as string).slice(6)).usage.completion_tokens).toBe(10);
  });

  test("non-streaming chat completion and OpenAI error shapes", async () => {
    const ok = await post(`${sim.url}/v1/chat/completions`, { model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
    expect(ok.headers.get("content-type")).toBe("application/json");
    const body = JSON.parse(await ok.text());
    expect(body.object).toBe("chat.completion");
    expect(body.choices[0].message).toEqual({ role: "assistant", content: "The sky appears blue because of Rayleigh scattering." });
    const nf = await post(`${sim.url}/v1/chat/completions`, { model: "llama9", messages: [{ role: "user", content: "hi" }] });
    expect(nf.status).toBe(404);
    expect(await nf.text()).toBe(goJson(JSON.parse(fixtureText("openai-error-404.json"))) + "\n");
    const empty = await post(`${sim.url}/v1/chat/completions`, { model: "llama3.2", messages: [] });
    expect(empty.status).toBe(400);
    expect(JSON.parse(await empty.text()).error).toEqual({ message: "[] is too short - 'messages'", type: "invalid_request_error", param: null, code: null });
    const embedOnly = await post(`${sim.url}/v1/chat/completions`, { model: "nomic-embed-text", messages: [{ role: "user", content: "x" }] });
    expect(embedOnly.status).toBe(400);
  });

  test("/v1/completions, /v1/embeddings and /v1/models", async () => {
    const comp = await post(`${sim.url}/v1/completions`, { model: "llama3.2", prompt: "hi", stream: true });
    const evs = events(await comp.text());
    const first = JSON.parse((evs[0] as string).slice(6));
    expect(Object.keys(first)).toEqual(["id", "object", "created", "choices", "model", "system_fingerprint"]);
    const emb = JSON.parse(await (await post(`${sim.url}/v1/embeddings`, { model: "nomic-embed-text", input: ["a"] })).text());
    expect(Object.keys(emb)).toEqual(["object", "data", "model", "usage"]);
    expect(emb.data[0].embedding).toHaveLength(768);
    const models = JSON.parse(await (await fetch(`${sim.url}/v1/models`)).text());
    expect(models.data.map((m: { id: string }) => m.id)).toContain("llama3.2:latest");
    expect((await fetch(`${sim.url}/v1/models/llama9`)).status).toBe(404);
    expect((await fetch(`${sim.url}/v1/models/llama3.2:latest`)).status).toBe(200);
  });
});

describe("simulated Ollama: Host check (O5), overrides, restart", () => {
  test("a Host Ollama would refuse gets 403 with an empty body", async () => {
    for (const host of ["evil.example.com", "example.com:11434", "8.8.8.8"]) {
      const res = await fetch(`${sim.url}/api/version`, { headers: { host } });
      expect({ host, status: res.status }).toEqual({ host, status: 403 });
      expect(await res.text()).toBe("");
    }
    for (const host of ["localhost:11434", "127.0.0.1", "192.168.1.5:11434", "gpu.internal", "box.local", "[::1]:11434", "10.0.0.2"]) {
      const res = await fetch(`${sim.url}/api/version`, { headers: { host } });
      expect({ host, status: res.status }).toEqual({ host, status: 200 });
    }
  });

  test("checkHost:false accepts any Host", async () => {
    const open = await startOllamaSim({ checkHost: false });
    try {
      expect((await fetch(`${open.url}/api/version`, { headers: { host: "evil.example.com" } })).status).toBe(200);
    } finally {
      await open.stop();
    }
  });

  test("a cross-origin request from an unknown origin is refused; localhost origins pass", async () => {
    expect((await fetch(`${sim.url}/api/version`, { headers: { origin: "https://evil.example.com" } })).status).toBe(403);
    const ok = await fetch(`${sim.url}/api/version`, { headers: { origin: "http://localhost:3000" } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("access-control-allow-origin")).toBe("http://localhost:3000");
  });

  test("calls are recorded and overrides inject failures, then can be removed", async () => {
    const remove = sim.override("POST", "/api/generate", () => new Response("boom", { status: 500 }));
    const failed = await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: 0 });
    expect(failed.status).toBe(500);
    remove();
    expect((await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: 0 })).status).toBe(200);
    // An override returning undefined only observes.
    let seen = "";
    sim.override("*", "/api/ps", async (req) => {
      seen = req.method;
      return undefined;
    });
    expect((await fetch(`${sim.url}/api/ps`)).status).toBe(200);
    expect(seen).toBe("GET");
    const gen = sim.calls.filter((c) => c.path === "/api/generate");
    expect(gen).toHaveLength(2);
    expect(JSON.parse(gen[0]?.bodyText ?? "")).toEqual({ model: "llama3.2", keep_alive: 0 });
    expect(gen[0]?.headers.host).toBe(`127.0.0.1:${sim.port}`);
    sim.clearCalls();
    expect(sim.calls).toHaveLength(0);
  });

  test("recordCalls:false keeps no call log (for benchmarks)", async () => {
    await useSim({ recordCalls: false });
    await fetch(`${sim.url}/api/version`);
    expect(sim.calls).toHaveLength(0);
  });

  test("stop refuses connections; a new sim on the same port comes back", async () => {
    const port = sim.port;
    await post(`${sim.url}/api/generate`, { model: "llama3.2", keep_alive: -1 });
    await sim.stop();
    // A stopped Ollama no longer holds GPU memory.
    expect(sim.gpu.vramUsed()).toBe(0);
    const err = await fetch(`${sim.url}/api/version`).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    sim = await startOllamaSim({ port });
    expect(sim.port).toBe(port);
    expect((await fetch(`${sim.url}/api/version`)).status).toBe(200);
  });
});

describe("simulated Ollama: routes match the percent-decoded path, as gin's do", () => {
  test("POST /api/%63hat and /v1/chat%2Fcompletions run inference (a model is loaded)", async () => {
    const messages = [{ role: "user", content: "hi" }];
    const chat = await post(`${sim.url}/api/%63hat`, { model: "llama3.2", messages, stream: false });
    expect(chat.status).toBe(200);
    expect(((await chat.json()) as { message: { role: string } }).message.role).toBe("assistant");
    const openai = await post(`${sim.url}/v1/chat%2Fcompletions`, { model: "llama3.2", messages });
    expect(openai.status).toBe(200);
    await openai.text();
    // The call log keeps the path as it arrived.
    expect(sim.calls.map((c) => c.path)).toEqual(["/api/%63hat", "/v1/chat%2Fcompletions"]);
    expect(await ps()).toEqual(["llama3.2:latest"]);
  });

  test("an invalid encoding is a 400", async () => {
    expect((await fetch(`${sim.url}/api/%zztags`)).status).toBe(400);
  });
});

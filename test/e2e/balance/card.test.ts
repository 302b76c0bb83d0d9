/**
 * One card as a load balancer sees it (issue 20): /readyz, X-Turnstile-Wait: 0, the agent-check
 * port, ComfyUI's queue counters with what the turnstile holds, and CARD_NAME — each a view of the
 * lock's state, on a real turnstile in front of the simulators.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { hostname } from "node:os";
import { BindError } from "../../../src/turnstile.ts";
import { startTestTurnstile } from "../../support/turnstile.ts";
import { callsTo, chat, postJson, promptBody, newPromptId, startStack, submit, until, type Stack } from "../jobs/helpers.ts";
import { rawHttp, scrape } from "../proxy/helpers.ts";
import { sampleValue } from "../../support/prom-parse.ts";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

interface Readyz {
  status: number;
  retryAfter: string | null;
  body: { state: string; class: string; reason: string; queue: number; retry_after_s: number; card: string };
}

async function readyz(base: string, cls?: string): Promise<Readyz> {
  const res = await fetch(`${base}/readyz${cls ? `?class=${cls}` : ""}`);
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body: (await res.json()) as Readyz["body"] };
}

/** One agent-check exchange: connect, read the line, the agent closes. */
function agentLine(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = "";
    Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: { data: (_s, d) => void (got += d.toString()), close: () => resolve(got), error: (_s, e) => reject(e) },
    }).catch(reject);
  });
}

/** A long job (sim_job_ms), started and seen running. */
async function longJob(s: Stack, ms = 600): Promise<Response> {
  const res = await submit(s.t, promptBody(newPromptId(), { sim_job_ms: ms }));
  expect(res.status).toBe(200);
  await until(() => s.t.lock.state === "image", "the image job holds the GPU");
  return res;
}

describe("/readyz", () => {
  test("ready while idle, on both listeners, for any Host; each listener's own class without ?class", async () => {
    stack = await startStack({ env: { CARD_NAME: "gpu-a" } });
    const { t } = stack;
    for (const base of [t.ollamaUrl, t.comfyUrl]) {
      for (const cls of ["llm", "image"]) {
        expect(await readyz(base, cls)).toEqual({ status: 200, retryAfter: null, body: { state: "idle", class: cls, reason: "ready", queue: 0, retry_after_s: 0, card: "gpu-a" } });
      }
    }
    expect((await readyz(t.ollamaUrl)).body.class).toBe("llm");
    expect((await readyz(t.comfyUrl)).body.class).toBe("image");
    // A loopback listener refuses a foreign Host on proxied paths (DNS rebinding), but a balancer's check names whatever it likes.
    const foreign = await rawHttp(t.ollamaUrl, "GET /readyz?class=llm HTTP/1.1\r\nHost: balancer.example\r\nConnection: close\r\n\r\n");
    expect(foreign.status).toBe(200);
    expect((await rawHttp(t.ollamaUrl, "GET /api/tags HTTP/1.1\r\nHost: balancer.example\r\nConnection: close\r\n\r\n")).status).toBe(403);
    const none = await rawHttp(t.comfyUrl, "GET /readyz HTTP/1.0\r\n\r\n");
    expect(none.status).toBe(200);
    const bad = await fetch(`${t.ollamaUrl}/readyz?class=video`);
    expect(bad.status).toBe(400);
  });

  test("429 with the busy answers' Retry-After during an image job; 503 for a side that is not there", async () => {
    stack = await startStack({ env: { CARD_NAME: "gpu-a", BUSY_RETRY_AFTER: "7" } });
    const { t } = stack;
    await longJob(stack);
    for (const cls of ["llm", "image"]) {
      const r = await readyz(t.ollamaUrl, cls);
      expect(r).toEqual({ status: 429, retryAfter: "7", body: { state: "image", class: cls, reason: "image_job", queue: 1, retry_after_s: 7, card: "gpu-a" } });
    }
    await t.settled();
    expect((await readyz(t.comfyUrl, "image")).status).toBe(200);
  });

  test("an Ollama-only turnstile is not ready for images (503, disabled)", async () => {
    stack = await startStack({ comfy: false });
    const r = await readyz(stack.t.ollamaUrl, "image");
    expect([r.status, r.body.reason]).toEqual([503, "disabled"]);
    expect((await readyz(stack.t.ollamaUrl, "llm")).status).toBe(200);
  });
});

describe("X-Turnstile-Wait: 0", () => {
  test("a chat that would wait gets LLM_BUSY_STATUS at once, in its dialect, and reaches no upstream", async () => {
    stack = await startStack({ env: { LLM_BUSY_STATUS: "429", BUSY_RETRY_AFTER: "4" } });
    const { t, ollama } = stack;
    await longJob(stack);
    ollama!.clearCalls();
    // Without the header the chat waits (LLM_BUSY_MODE=wait): it is still pending while the job runs.
    const waiting = fetch(`${t.ollamaUrl}/api/generate`, { method: "POST", body: JSON.stringify({ model: "llama3.2", prompt: "x", stream: false }) });
    const fast = await fetch(`${t.ollamaUrl}/api/chat`, {
      method: "POST",
      headers: { "x-turnstile-wait": "0" },
      body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(fast.status).toBe(429);
    expect(fast.headers.get("retry-after")).toBe("4");
    expect(((await fast.json()) as { error: string }).error).toContain("busy with an image job");
    const openai = await fetch(`${t.ollamaUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "X-Turnstile-Wait": "0" },
      body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(openai.status).toBe(429);
    expect(((await openai.json()) as { error: { type: string } }).error.type).toBe("gpu_busy");
    expect(callsTo(ollama!.calls, /^\/(api\/chat|v1\/)/)).toEqual([]);
    expect(t.lock.state).toBe("image");
    expect((await waiting).status).toBe(200);
  });

  test("a /prompt that cannot start now gets the busy answer in ComfyUI's shape; ComfyUI never sees it", async () => {
    stack = await startStack({ env: { BUSY_RETRY_AFTER: "3" } });
    const { t, comfy } = stack;
    await longJob(stack);
    const before = callsTo(comfy!.calls, "/prompt", "POST").length;
    const res = await fetch(`${t.comfyUrl}/prompt`, { method: "POST", headers: { "x-turnstile-wait": "0" }, body: promptBody(newPromptId()) });
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("3");
    const body = (await res.json()) as { error: { type: string }; node_errors: object };
    expect(body.error.type).toBe("gpu_busy");
    expect(body.node_errors).toEqual({});
    expect(callsTo(comfy!.calls, "/prompt", "POST").length).toBe(before);
  });

  test("when the card is free the request goes through, without the header", async () => {
    stack = await startStack();
    const { t, ollama, comfy } = stack;
    const res = await fetch(`${t.ollamaUrl}/api/chat`, {
      method: "POST",
      headers: { "x-turnstile-wait": "0" },
      body: JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(200);
    await res.text();
    const job = await fetch(`${t.comfyUrl}/prompt`, { method: "POST", headers: { "x-turnstile-wait": "0" }, body: promptBody(newPromptId()) });
    expect(job.status).toBe(200);
    await t.settled();
    const sent = [...callsTo(ollama!.calls, "/api/chat"), ...callsTo(comfy!.calls, "/prompt", "POST")];
    expect(sent.length).toBe(2);
    for (const c of sent) expect(Object.keys(c.headers)).not.toContain("x-turnstile-wait");
  });
});

describe("what the turnstile holds shows in ComfyUI's own queue counters", () => {
  test("an image job waiting behind a lease is a pending entry of /queue and counts in GET /prompt, on both spellings", async () => {
    stack = await startStack({ env: { AGENT_LISTEN: "127.0.0.1:0" } });
    const { t, comfy } = stack;
    const agent = t.agentPort!;
    expect(await agentLine(agent)).toBe("up ready\n");
    const lease = await postJson(`${t.comfyUrl}/turnstile/lease`, { holder: "test", ttl: "1m" });
    expect(lease.status).toBe(200);
    const { id } = (await lease.json()) as { id: string };
    expect(await agentLine(agent)).toBe("drain\n");
    expect((await readyz(t.comfyUrl, "image")).body.reason).toBe("lease");
    const promptId = newPromptId();
    const body = JSON.parse(promptBody(promptId)) as { prompt: unknown; client_id: string };
    const job = submit(t, promptBody(promptId));
    await until(() => t.lock.snapshot().imageWaiting === 1, "the job waits behind the lease");
    for (const prefix of ["", "/api"]) {
      const q = (await (await fetch(`${t.comfyUrl}${prefix}/queue`)).json()) as { queue_running: unknown[]; queue_pending: unknown[][] };
      expect(q.queue_running).toEqual([]);
      // As ComfyUI will queue it: its own id and workflow, after every job ComfyUI has had (none).
      expect(q.queue_pending).toEqual([[0, promptId, body.prompt, { client_id: body.client_id }, []]]);
      expect(await (await fetch(`${t.comfyUrl}${prefix}/prompt`)).json()).toEqual({ exec_info: { queue_remaining: 1 } });
    }
    // ComfyUI itself knows nothing of it.
    expect(await (await fetch(`${comfy!.url}/prompt`)).json()).toEqual({ exec_info: { queue_remaining: 0 } });
    expect((await readyz(t.comfyUrl, "llm")).body.queue).toBe(1);
    expect((await fetch(`${t.comfyUrl}/turnstile/lease/${id}`, { method: "DELETE" })).status).toBe(200);
    expect((await job).status).toBe(200);
    await t.settled();
    expect(await (await fetch(`${t.comfyUrl}/prompt`)).json()).toEqual({ exec_info: { queue_remaining: 0 } });
    expect(await agentLine(agent)).toBe("up ready\n");
  });
});

describe("ComfyUI's queue answer cut off while the turnstile holds a job", () => {
  test("the client gets a 502 in ComfyUI's shape and the request is logged, not left hanging", async () => {
    stack = await startStack({ env: { LOGLEVEL: "info" } });
    const { t, comfy } = stack;
    const lease = await postJson(`${t.comfyUrl}/turnstile/lease`, { holder: "test", ttl: "1m" });
    const { id } = (await lease.json()) as { id: string };
    const job = submit(t, promptBody(newPromptId()));
    await until(() => t.lock.snapshot().imageWaiting === 1, "the job waits behind the lease");
    // Half of ComfyUI's answer, then the connection drops.
    const cut = {
      type: "direct",
      async pull(c: { write(s: string): unknown; flush(): unknown; close(err?: Error): void }) {
        c.write('{"queue_running": [], "queue_pending": [');
        await c.flush();
        // ComfyUI goes away mid-answer: its connections drop (a stream closed with an error would
        // do the same, but Bun prints that error's stack in the test output).
        await comfy!.crash();
        await comfy!.revive();
      },
    };
    const remove = comfy!.override("GET", "/queue", () => new Response(new ReadableStream(cut as unknown as UnderlyingDefaultSource<Uint8Array>), { headers: { "content-type": "application/json" } }));
    const res = await fetch(`${t.comfyUrl}/queue`);
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe("upstream_unreachable");
    await until(() => t.logLines.some((l) => l.includes("<-- 502 GET /queue")), "the request logged");
    remove();
    expect((await fetch(`${t.comfyUrl}/turnstile/lease/${id}`, { method: "DELETE" })).status).toBe(200);
    expect((await job).status).toBe(200);
    await t.settled();
  });
});

describe("CARD_NAME and AGENT_LISTEN", () => {
  test("the card is named in /turnstile/status, on every metric and in the page's title", async () => {
    stack = await startStack({ env: { CARD_NAME: "gpu-b" } });
    const { t } = stack;
    expect(((await (await fetch(`${t.ollamaUrl}/turnstile/status`)).json()) as { card: string }).card).toBe("gpu-b");
    const m = await scrape(t.ollamaUrl);
    for (const f of m.families.values()) for (const s of f.samples) expect(`${s.name} ${s.labels.card}`).toBe(`${s.name} gpu-b`);
    expect(sampleValue(m, "gpu_turnstile_state", { state: "idle", card: "gpu-b" })).toBe(1);
    expect(await (await fetch(`${t.comfyUrl}/turnstile/`)).text()).toContain("<title>gpu-b · gpu-turnstile</title>");
    await chat(t).then((r) => r.text());
  });

  test("without CARD_NAME the card is the host name", async () => {
    stack = await startStack({ comfy: false });
    expect(stack.t.card).toBe(hostname());
    expect((await readyz(stack.t.ollamaUrl)).body.card).toBe(hostname());
  });

  test("an agent port that is taken refuses the start, naming AGENT_LISTEN", async () => {
    stack = await startStack({ env: { AGENT_LISTEN: "127.0.0.1:0" } });
    const port = stack.t.agentPort!;
    let err: unknown;
    try {
      startTestTurnstile({ OLLAMA_URL: stack.ollama!.url, AGENT_LISTEN: `127.0.0.1:${port}` }).close();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(BindError);
    expect((err as Error).message).toBe(`AGENT_LISTEN 127.0.0.1:${port} is already in use (another gpu-turnstile?)`);
    expect(await agentLine(port)).toBe("up ready\n");
  });
});

/**
 * LISTEN_OLLAMA_NESTED (issue 19, api-facts S4): a ComfyUI workflow whose prompt-enhancer node
 * calls Ollama mid-job. On the ordinary listener that call waits for the job that waits for it;
 * on the nested listener it is served at once, as part of the job — listed under the job, logged
 * and counted — and the GPU ledger records the overlap as nested, never as a violation.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { enhancerWorkflow } from "../../../src/demo/workflow.ts";
import { sampleValue, parseExposition } from "../../support/prom-parse.ts";
import { connect } from "node:net";
import { callsTo, newPromptId, promptBody, type Stack, startStack, submit, until, waitFor, warnLines } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

const NESTED = { LISTEN_OLLAMA_NESTED: "127.0.0.1:0" };

/** A workflow whose prompt-enhancer asks Ollama at `url`, under a fresh prompt_id. */
function enhancerJob(url: string): { id: string; body: string } {
  const id = newPromptId();
  const w = enhancerWorkflow("a lighthouse", 1, "e2e-nested", url, "llama3.2") as Record<string, unknown>;
  return { id, body: JSON.stringify({ ...w, prompt_id: id }) };
}

async function history(stack: Stack, id: string): Promise<string | undefined> {
  const h = (await (await fetch(`${stack.comfy!.url}/history/${id}`)).json()) as Record<string, { status: { status_str: string } }>;
  return h[id]?.status.status_str;
}

async function metric(stack: Stack, name: string): Promise<number | undefined> {
  return sampleValue(parseExposition(await (await fetch(`${stack.t.ollamaUrl}/metrics`)).text()), name);
}

describe("a prompt-enhancer node calling Ollama mid-job", () => {
  test("on the nested listener: served during the job, listed under it, logged and counted; the overlap is the operator's choice only", async () => {
    s = await startStack({ env: { ...NESTED, LOGLEVEL: "warn" }, ollama: { tokenDelayMs: 30, tokens: 8 }, comfy: { jobMs: 300 } });
    const nestedUrl = s.t.listener("nested")!.url;
    const job = enhancerJob(nestedUrl);
    expect((await submit(s.t, job.body)).status).toBe(200);

    // While the node's call runs, the job holds the card and the call is listed under the job.
    const view = await waitFor(() => s!.t.status.snapshot(false).image.running?.nested?.[0], "the nested request under the running job");
    expect(view).toMatchObject({ path: "/api/generate", model: "llama3.2", waiting: false });
    expect(s.t.lock.state).toBe("image");
    expect(s.t.lock.snapshot().llmInflight).toBe(0);
    expect(s.t.status.snapshot(false).llm.requests).toEqual([]);

    await s.t.settled();
    expect(await history(s, job.id)).toBe("success");
    const generate = callsTo(s.ollama!.calls, "/api/generate")[0]!;
    expect(generate.headers["x-gpu-turnstile-nested"]).toBe("1");
    expect(generate.at).toBeLessThan(callsTo(s.comfy!.calls, "/free")[0]!.at);

    // The card was shared by design: the ledger shows it, tagged; no other overlap.
    expect(s.gpu.overlaps().length).toBe(1);
    expect(s.gpu.overlaps({ excuseNested: true })).toEqual([]);
    expect(await metric(s, "gpu_turnstile_nested_requests_total")).toBe(1);
    expect(s.t.logLines.filter((l) => l.includes("nested LLM request served during an image job"))).toHaveLength(1);

    // The next job empties Ollama first, as always: the nested model is not excused against it.
    const next = enhancerJob(nestedUrl);
    expect((await submit(s.t, next.body)).status).toBe(200);
    await s.t.settled();
    expect(await history(s, next.id)).toBe("success");
    expect(s.gpu.overlaps({ excuseNested: true })).toEqual([]);
    expect(await metric(s, "gpu_turnstile_nested_requests_total")).toBe(2);
  });

  test("on the ordinary listener the same call waits for the job that waits for it (the deadlock the nested listener ends)", async () => {
    s = await startStack({ env: { ...NESTED, LLM_WAIT_TIMEOUT: "300ms" } });
    const job = enhancerJob(s.t.ollamaUrl);
    expect((await submit(s.t, job.body)).status).toBe(200);
    await s.t.settled();
    // The node got the turnstile's 503 after LLM_WAIT_TIMEOUT; Ollama never saw the call during the job.
    expect(await history(s, job.id)).toBe("error");
    expect(callsTo(s.ollama!.calls, "/api/generate")).toEqual([]);
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("outside image jobs the nested listener is an ordinary LLM listener: it takes an LLM slot and carries no mark", async () => {
    s = await startStack({ env: NESTED, ollama: { tokenDelayMs: 30, tokens: 8 } });
    const nestedUrl = s.t.listener("nested")!.url;
    const chat = fetch(`${nestedUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false }) });
    await until(() => s!.t.lock.snapshot().llmInflight === 1, "the chat holding an LLM slot");
    expect(s.t.lock.state).toBe("llm");
    expect((await chat).status).toBe(200);
    expect(callsTo(s.ollama!.calls, "/api/chat")[0]!.headers["x-gpu-turnstile-nested"]).toBeUndefined();
    expect(await metric(s, "gpu_turnstile_nested_requests_total")).toBe(0);
  });

  test("a client cannot forge the nested mark on the ordinary listener", async () => {
    s = await startStack({ env: NESTED });
    const res = await fetch(`${s.t.ollamaUrl}/api/chat`, {
      method: "POST",
      headers: { "x-gpu-turnstile-nested": "1" },
      body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false }),
    });
    expect(res.status).toBe(200);
    expect(callsTo(s.ollama!.calls, "/api/chat")[0]!.headers["x-gpu-turnstile-nested"]).toBeUndefined();
    expect(s.gpu.ledger.filter((h) => h.nested)).toEqual([]);
  });

  test("a nested request still running when its job ends holds the session's end up to FREE_TIMEOUT, then is cut", async () => {
    s = await startStack({ env: { ...NESTED, FREE_TIMEOUT: "300ms" }, ollama: { tokenDelayMs: 50, tokens: 1000 }, comfy: { jobMs: 150 } });
    const nestedUrl = s.t.listener("nested")!.url;
    const id = newPromptId();
    expect((await submit(s.t, JSON.stringify({ ...(JSON.parse(enhancerJob(nestedUrl).body) as object), prompt: plainPrompt(), prompt_id: id }))).status).toBe(200);
    // Issued by hand once ComfyUI runs the job: a call its workflow made and then abandoned.
    await until(() => s!.t.status.snapshot(false).image.running?.phase === "running", "the job running");
    const stream = await fetch(`${nestedUrl}/api/generate`, { method: "POST", body: JSON.stringify({ model: "llama3.2", prompt: "go on forever" }) });
    expect(stream.status).toBe(200);
    const body = stream.text().then(
      () => "ended",
      () => "cut",
    );
    await s.t.settled();
    expect(await body).toBe("cut");
    expect(await metric(s, "gpu_turnstile_nested_cut_total")).toBe(1);
    expect(warnLines(s.t, "nested LLM request(s) still running")).toHaveLength(1);
    // The /free came after the cut, not before: the card was not handed on with the answer in flight.
    expect(s.ollama!.inflight()).toBe(0);
    expect(s.gpu.overlaps({ excuseNested: true })).toEqual([]);
  });
});

describe("nested requests that use nothing of the job's card", () => {
  test("a cloud model or a refused body on the nested listener mid-job is not counted as nested and holds up no session's end", async () => {
    // A session's end that waited FREE_TIMEOUT for these would outlast the test's own timeout.
    s = await startStack({ env: { ...NESTED, FREE_TIMEOUT: "30s" }, comfy: { jobMs: 300 } });
    const nestedUrl = s.t.listener("nested")!.url;
    const id = newPromptId();
    expect((await submit(s.t, JSON.stringify({ prompt: plainPrompt(), prompt_id: id }))).status).toBe(200);
    await until(() => s!.t.status.snapshot(false).image.running?.phase === "running", "the job running");
    const cloud = await fetch(`${nestedUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "gpt-oss:120b-cloud", messages: [{ role: "user", content: "hi" }], stream: false }) });
    expect(cloud.status).toBe(200);
    const bomb = await fetch(`${nestedUrl}/v1/responses`, { method: "POST", body: Bun.zstdCompressSync(new Uint8Array(32 << 20)) as BodyInit, headers: { "content-encoding": "zstd" } });
    expect(bomb.status).toBe(413);
    await s.t.settled();
    expect(await metric(s, "gpu_turnstile_nested_requests_total")).toBe(0);
    expect(await metric(s, "gpu_turnstile_nested_cut_total")).toBe(0);
  });
});

/** The plain fixture workflow (no enhancer node), for a job whose nested call is made by hand. */
function plainPrompt(): unknown {
  const w = enhancerWorkflow("x", 1, "e2e", "", "llama3.2") as { prompt: Record<string, { inputs: Record<string, unknown> }> };
  delete w.prompt["10"];
  w.prompt["6"]!.inputs.text = "a plain prompt";
  return w.prompt;
}

describe("a nested request that outlives its job before it is sent", () => {
  test("its body still arriving when the job ended: it goes through the lock, not under the next job", async () => {
    s = await startStack({ env: { ...NESTED, FREE_TIMEOUT: "300ms", LOGLEVEL: "warn" }, comfy: { jobMs: 150 } });
    expect((await submit(s.t, promptBody(newPromptId()))).status).toBe(200);
    await until(() => s!.t.status.snapshot(false).image.running?.phase === "running", "the first job running");
    // Headers and a piece of the body on the nested listener during the job; the rest comes much later.
    const body = JSON.stringify({ model: "llama3.2", prompt: "hi", stream: false });
    const sock = connect(s.t.listener("nested")!.port, "127.0.0.1");
    let answer = "";
    sock.on("data", (d) => (answer += d.toString()));
    sock.write(`POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 10)}`);
    await until(() => s!.t.status.snapshot(false).image.running?.nested?.length === 1, "the request listed under the job");
    await until(() => s!.t.lock.state === "idle", "the first job's session ended");
    // The next job holds ComfyUI's memory when the body's end arrives.
    expect((await submit(s.t, promptBody(newPromptId(), { sim_job_ms: 600 }))).status).toBe(200);
    await until(() => s!.comfy!.runningJob() !== undefined, "the second job running in ComfyUI");
    sock.write(body.slice(10));
    await until(() => answer.includes("\r\n\r\n{"), "the answer");
    sock.destroy();
    expect(answer).toStartWith("HTTP/1.1 200");
    expect(callsTo(s.ollama!.calls, "/api/generate")[0]!.headers["x-gpu-turnstile-nested"]).toBeUndefined();
    await s.t.settled();
    expect(s.gpu.overlaps()).toEqual([]);
  });
});

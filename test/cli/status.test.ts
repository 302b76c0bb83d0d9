import { afterEach, expect, test } from "bun:test";
import { findInstance, instanceUrl, renderStatus, statusCommand } from "../../src/cli/status.ts";
import type { StatusDoc } from "../../src/status/model.ts";
import { startTestTurnstile, type TestTurnstile } from "../support/turnstile.ts";
import { normalizeArgv } from "../../src/cli/argv.ts";
import { newPromptId, promptBody, startStack, submit, until, type Stack } from "../e2e/jobs/helpers.ts";

let stack: Stack | undefined;
let again: TestTurnstile | undefined;
afterEach(async () => {
  await again?.close();
  await stack?.stop();
  stack = again = undefined;
});

/** Runs `f` with stderr captured. */
async function stderrOf<T>(f: () => Promise<T>): Promise<{ value: T; err: string }> {
  const err: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((s: string) => (err.push(s), true)) as typeof process.stderr.write;
  try {
    return { value: await f(), err: err.join("") };
  } finally {
    process.stderr.write = write;
  }
}

test("the instance is found from LISTEN_*: the Ollama listener, else ComfyUI's, wildcards become loopback", () => {
  expect(instanceUrl({ ollamaUrl: "http://x:11435", listenOllama: ":11434", listenComfy: ":8188" })).toBe("http://127.0.0.1:11434");
  expect(instanceUrl({ ollamaUrl: "", listenOllama: ":11434", listenComfy: "192.168.1.2:8188" })).toBe("http://192.168.1.2:8188");
  expect(instanceUrl({ ollamaUrl: "x", listenOllama: "[::]:11434", listenComfy: ":8188" })).toBe("http://127.0.0.1:11434");
  expect(instanceUrl({ ollamaUrl: "x", listenOllama: "[::1]:11434", listenComfy: ":8188" })).toBe("http://[::1]:11434");
});

test("status, --json and --watch against a running turnstile: which card, and its upstreams in a table with their masked URLs", async () => {
  stack = await startStack({ comfy: { jobMs: 300 }, env: { CARD_NAME: "desk-4090" } });
  const { t } = stack;
  const env = { OLLAMA_URL: "http://127.0.0.1:1" };
  let text = "";
  expect(await statusCommand({ url: t.comfyUrl, json: false, watch: false, env, out: (s) => (text += s) })).toBe(0);
  expect(text.split("\n")[0]).toBe("card: desk-4090   (gpu-turnstile v0.0.0-test)");
  expect(text).toContain("GPU: idle for");
  expect(text).toMatch(/^ {2}upstream +state +version +url +reason$/m);
  expect(text).toMatch(new RegExp(`^ {2}Ollama +up +\\S+ +${stack.ollama!.url.replaceAll(".", "\\.")} +–$`, "m"));
  expect(text).toMatch(new RegExp(`^ {2}ComfyUI +up +\\S+ +${stack.comfy!.url.replaceAll(".", "\\.")} +–$`, "m"));

  let json = "";
  expect(await statusCommand({ url: t.comfyUrl, json: true, watch: false, env, out: (s) => (json += s) })).toBe(0);
  expect(JSON.parse(json)).toMatchObject({ state: "idle", version: "v0.0.0-test" });

  const stop = new AbortController();
  let watched = "";
  const watching = statusCommand({ url: t.comfyUrl, json: false, watch: true, env, out: (s) => (watched += s), signal: stop.signal });
  await until(() => watched.includes("GPU: idle"), "the first snapshot");
  const p = newPromptId();
  await (await submit(t, promptBody(p))).text();
  await until(() => watched.includes(`(${p}): done completed`), "the job's end");
  expect(watched).toContain("GPU idle -> image");
  expect(watched).toContain(`(${p}): running`);
  stop.abort();
  expect(await watching).toBe(0);
}, 15_000);

test("status with nothing listening says so, --watch too (at once: nothing was ever there to wait for)", async () => {
  for (const watch of [false, true]) {
    const { value, err } = await stderrOf(() => statusCommand({ url: "http://127.0.0.1:1", json: false, watch, env: { OLLAMA_URL: "http://127.0.0.1:1" } }));
    expect(value).toBe(1);
    expect(err).toContain("no turnstile answers at http://127.0.0.1:1");
  }
});

test("a password in --url is not printed when the instance does not answer, --watch too", async () => {
  for (const watch of [false, true]) {
    const { value, err } = await stderrOf(() => statusCommand({ url: "http://admin:s3cret@127.0.0.1:1", json: false, watch, env: { OLLAMA_URL: "http://127.0.0.1:1" } }));
    expect(value).toBe(1);
    expect(err).toContain("no turnstile answers at http://***@127.0.0.1:1");
    expect(err).not.toContain("s3cret");
  }
});

test("status accepts its flags", () => {
  expect(normalizeArgv(["status", "--json", "--watch", "--url", "http://h:1"])).toEqual({ command: "status", args: ["--json", "--watch", "--url", "http://h:1"], help: false, named: true });
});

test("status --watch rides out a turnstile restart like the page: no exit, one line lost, one back, nothing printed twice", async () => {
  stack = await startStack({ comfy: false });
  const { t } = stack;
  const port = new URL(t.ollamaUrl).port;
  const stop = new AbortController();
  let watched = "";
  const err: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((s: string) => (err.push(s), true)) as typeof process.stderr.write;
  try {
    const watching = statusCommand({ url: t.ollamaUrl, json: false, watch: true, env: {}, out: (s) => (watched += s), signal: stop.signal });
    await until(() => watched.includes("GPU: idle"), "the first snapshot");
    await t.close();
    await until(() => err.join("").includes("lost the event stream"), "the loss said");
    again = startTestTurnstile({ OLLAMA_URL: stack.ollama!.url, COMFY_URL: "", LISTEN_OLLAMA: `127.0.0.1:${port}` });
    await until(() => watched.includes("back: GPU idle"), "the stream back", 10_000);
    stop.abort();
    expect(await watching).toBe(0);
  } finally {
    process.stderr.write = write;
  }
  expect(watched.match(/GPU: idle for/g)).toHaveLength(1);
  expect(err.join("").match(/lost the event stream/g)).toHaveLength(1);
  const lines = watched.trim().split("\n").map((l) => l.replace(/^\d\d:\d\d:\d\d /, ""));
  expect(lines.filter((l, i) => l.startsWith("llm ") && l === lines[i - 1])).toEqual([]);
}, 20_000);

test("status --url without a scheme gets the config's hint", async () => {
  const { value, err } = await stderrOf(() => statusCommand({ url: "127.0.0.1:11434", json: false, watch: false, env: {} }));
  expect(value).toBe(1);
  expect(err).toContain('--url: expected an absolute http:// or https:// URL (did you mean "http://127.0.0.1:11434"?)');
});

test("status shows every job with its queue time apart from its run, every waiter with its reason, and the card", () => {
  const now = 1_000_000;
  const job = { job: 2, prompt_id: "p-2", phase: "running" as const, since: now - 9000, phase_since: now - 2000, waited_ms: 40, queued_since: now - 8000, running_since: now - 2000, queue_ms: 6000, progress: { value: 7, max: 20 }, client: "10.0.0.9", client_id: "tab-1", age_ms: 9000 };
  const doc = {
    version: "v1",
    state: "image",
    state_since: new Date(now - 9000).toISOString(),
    now,
    models: [{ name: "llama3.2:latest", size: 4 * 2 ** 30, size_vram: 3 * 2 ** 30, expires_at: new Date(now + 240_000).toISOString() }],
    models_at: now - 1000,
    comfy_memory: { used: 6 * 2 ** 30, total: 24 * 2 ** 30, torch_reserved: 5 * 2 ** 30, at: now },
    waiting: [{ kind: "llm", id: 9, since: now - 3000, reason: "behind image job 2", retry_after_s: 12, client: "10.0.0.5" }],
    llm: { inflight: 0, waiting: 1, oldest_wait_ms: 3000, requests: [] },
    image: { running: job, queued: 0, waiting: 0, retrying: 0, session: { jobs: [job] }, jobs: [job] },
    lease: null,
    upstreams: {},
    recent: [],
    history: [],
  } as unknown as StatusDoc;
  const text = renderStatus(doc);
  expect(text).toContain("image: job 2 prompt p-2 running, step 7 of 20, waited 40ms, in ComfyUI's queue 6.0s, running 2.0s, from 10.0.0.9 client_id tab-1");
  expect(text).toContain("waiting: chat 9 behind image job 2, for 3.0s, estimate 12s, from 10.0.0.5");
  expect(text).toContain("ollama models (as /api/ps said 1.0s ago):\n  model            size     processor        until\n  llama3.2:latest  4.0 GiB  25%/75% CPU/GPU  4m00s from now\n");
  expect(text).toContain("comfy memory: 6.0 GiB of 24.0 GiB in use (torch 5.0 GiB)");
  // A ComfyUI on cpu/mps reports the machine's RAM: shown as shared, not as 23.5 GiB "in use" (issue 27).
  const shared = renderStatus({ ...doc, comfy_memory: { used: 2 * 2 ** 30, total: 23.5 * 2 ** 30, torch_reserved: 23.5 * 2 ** 30, shared: "mps", at: now } } as StatusDoc);
  expect(shared).toContain("comfy memory: shared with the system (mps: not measured)");
  expect(shared).not.toContain("in use");
});

test("the config's ADMIN_TOKEN goes only to its own instance: loopback, its listen address or an ALLOWED_HOSTS name, never another --url", () => {
  const env = { OLLAMA_URL: "http://127.0.0.1:11435", LISTEN_OLLAMA: "192.168.7.7:11434", ADMIN_TOKEN: "s3cret-token-for-the-card", ALLOWED_HOSTS: "gpu.lan,*.cards.lan" };
  const bearer = { authorization: "Bearer s3cret-token-for-the-card" };
  expect(findInstance({ env })).toEqual({ base: "http://192.168.7.7:11434", headers: bearer });
  for (const url of ["http://127.0.0.1:11434", "http://localhost:11434", "http://[::1]:11434", "http://gpu.lan:11434", "http://b.cards.lan:11434"]) {
    expect(findInstance({ env, url })).toEqual({ base: url, headers: bearer });
  }
  for (const url of ["http://evil.example:11434", "http://192.0.2.1:11434", "http://gpu.lan.evil.example:11434"]) {
    expect(findInstance({ env, url })).toEqual({ base: url, headers: {} });
  }
});

/** A status document with nothing going on, for the renderings below. */
function idleDoc(now: number, extra: Partial<StatusDoc> = {}): StatusDoc {
  return {
    version: "v1",
    card: "desk-4090",
    state: "idle",
    state_since: new Date(now - 1000).toISOString(),
    now,
    models: null,
    models_at: null,
    comfy_memory: null,
    waiting: [],
    waiting_omitted: 0,
    llm: { inflight: 0, waiting: 0, oldest_wait_ms: 0, requests: [], requests_omitted: 0 },
    image: { running: null, queued: 0, waiting: 0, retrying: 0, session: null, jobs: [], jobs_omitted: 0 },
    lease: null,
    upstreams: {},
    recent: [],
    history: [],
    ...extra,
  };
}

test("chats alone: the LLM table comes first; with a lease, the lease (and its holder's address, for those who may see it) comes first", () => {
  const now = 2_000_000;
  const llm = { inflight: 1, waiting: 0, oldest_wait_ms: 0, requests: [{ id: 1, path: "/api/chat", model: "llama3.2", age_ms: 500, waiting: false, since: now - 500, client: "10.0.0.7" }], requests_omitted: 0 };
  const chats = renderStatus(idleDoc(now, { state: "llm", llm, models: [], models_at: now })).split("\n");
  expect(chats[2]).toBe("llm: 1 in flight, 0 waiting");
  expect(chats[3]).toBe("  holds /api/chat llama3.2 from 10.0.0.7 500ms");

  const lease = { id: "l-1", holder: "backup", since: now - 5000, age_ms: 5000, expires_at: new Date(now + 60_000).toISOString(), expires_in_ms: 60_000, client: "10.0.0.8" };
  const leased = renderStatus(idleDoc(now, { state: "lease", lease })).split("\n");
  expect(leased[2]).toBe("lease: backup (l-1) from 10.0.0.8, held 5.0s, ends in 1m00s unless renewed");
  expect(leased[3]).toStartWith("llm: ");
  // Without the token the document has no address, and nothing stands in for one.
  const { client: _c, ...open } = lease;
  expect(renderStatus(idleDoc(now, { state: "lease", lease: open })).split("\n")[2]).toBe("lease: backup (l-1), held 5.0s, ends in 1m00s unless renewed");
});

test("empty values in the tables are – for people, never - (JSON keeps null)", () => {
  const now = 3_000_000;
  const doc = idleDoc(now, {
    models: [{ name: "nomic-embed-text", size: 2 ** 30, size_vram: 2 ** 30, expires_at: null }],
    models_at: now,
    upstreams: { ollama: { up: null, version: null }, comfy: { up: false, version: null, reason: "connection refused", url: "http://***@gpu-box:8188" } },
  });
  const text = renderStatus(doc);
  expect(text).toMatch(/^ {2}nomic-embed-text +1\.0 GiB +100% GPU +–$/m);
  expect(text).toMatch(/^ {2}Ollama +not probed yet +– +– +–$/m);
  expect(text).toMatch(/^ {2}ComfyUI +down +– +http:\/\/\*\*\*@gpu-box:8188 +connection refused$/m);
  expect(text).not.toMatch(/(^| )-( |$)/m);
});

test("an upstream URL's credentials are masked in the status document and the table", async () => {
  again = startTestTurnstile({ OLLAMA_URL: "http://admin:s3cret@127.0.0.1:1", COMFY_URL: "", HEALTH_INTERVAL: "1h" });
  let text = "";
  let json = "";
  expect(await statusCommand({ url: again.ollamaUrl, json: false, watch: false, env: {}, out: (s) => (text += s) })).toBe(0);
  expect(await statusCommand({ url: again.ollamaUrl, json: true, watch: false, env: {}, out: (s) => (json += s) })).toBe(0);
  expect(JSON.parse(json).upstreams.ollama.url).toBe("http://***@127.0.0.1:1");
  expect(text).toMatch(/^ {2}Ollama +\S.* +http:\/\/\*\*\*@127\.0\.0\.1:1/m);
  expect(text + json).not.toContain("s3cret");
});

test("status --watch says in its own words that the connection was cut, not Bun's \"pass verbose: true\"", async () => {
  // A turnstile that dies mid-stream (kill -9, a network cut): the socket closes under the reader.
  const doc = JSON.stringify(idleDoc(Date.now()));
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: () => new Response(new ReadableStream({ start: (c) => c.enqueue(`event: status\ndata: ${doc}\n\n`) }), { headers: { "content-type": "text/event-stream" } }),
  });
  const stop = new AbortController();
  let watched = "";
  const err: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((s: string) => (err.push(s), true)) as typeof process.stderr.write;
  try {
    const watching = statusCommand({ url: `http://127.0.0.1:${server.port}`, json: false, watch: true, env: {}, out: (s) => (watched += s), signal: stop.signal });
    await until(() => watched.includes("GPU: idle"), "the first snapshot");
    server.stop(true);
    await until(() => err.join("").includes("lost the event stream"), "the loss said");
    stop.abort();
    expect(await watching).toBe(0);
  } finally {
    process.stderr.write = write;
    server.stop(true);
  }
  expect(err.join("")).toContain("lost the event stream (the connection was cut); reconnecting");
  expect(err.join("")).not.toContain("verbose");
});

test("status --watch shows a model loading and unloading as it happens, once each", async () => {
  stack = await startStack({ ollama: { loadMs: 100, unloadMs: 50 }, comfy: false, env: { HEALTH_INTERVAL: "1h" } });
  const { t } = stack;
  const stop = new AbortController();
  let watched = "";
  const watching = statusCommand({ url: t.ollamaUrl, json: false, watch: true, env: {}, out: (s) => (watched += s), signal: stop.signal });
  await until(() => watched.includes("GPU: idle"), "the first snapshot");
  const chat = await fetch(`${t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", keep_alive: "1s", stream: false, messages: [{ role: "user", content: "hi" }] }) });
  await chat.text();
  await until(() => watched.includes("ollama models: llama3.2:latest (100% GPU)\n"), "the load", 5000);
  await until(() => watched.includes("ollama models: none\n"), "the unload when its keep-alive ended", 10_000);
  stop.abort();
  expect(await watching).toBe(0);
  expect(watched.match(/ollama models: llama3\.2:latest/g)).toHaveLength(1);
}, 20_000);

test("names a client chose (a waiting chat's model, a job's client_id) reach the terminal without their control characters, in status and --watch", async () => {
  stack = await startStack({ comfy: { jobMs: 300 } });
  const { t } = stack;
  const env = { OLLAMA_URL: "http://127.0.0.1:1" };
  // Anyone who may send a chat or a prompt: no token needed.
  const job = submit(t, JSON.stringify({ ...JSON.parse(promptBody(newPromptId(), { sim_job_ms: 1500 })), client_id: "\u001b[41mCLIENT" }));
  await until(() => t.lock.state === "image", "the image job holding the card");
  const chat = fetch(`${t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "\u001b[2J\u001b]0;owned\u0007EVIL\u009b31m", messages: [{ role: "user", content: "hi" }], stream: false }) });
  await until(() => t.lock.snapshot().llmWaiting === 1, "the chat waiting");
  let text = "";
  expect(await statusCommand({ url: t.ollamaUrl, json: false, watch: false, env, out: (s) => (text += s) })).toBe(0);
  const stop = new AbortController();
  let watched = "";
  const watching = statusCommand({ url: t.ollamaUrl, json: false, watch: true, env, out: (s) => (watched += s), signal: stop.signal });
  await until(() => watched.includes("EVIL"), "the waiting chat in --watch's first snapshot");
  stop.abort();
  expect(await watching).toBe(0);
  await (await job).text();
  await (await chat).text();
  for (const shown of [text, watched]) {
    expect(shown).toContain("EVIL");
    expect(shown).toContain("CLIENT");
    // Only line ends: no escape, bell or C1 control that a terminal would act on.
    expect(shown.match(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g)).toBeNull();
  }
}, 15_000);

test("the place in line (issue 30): a table of each client's waiting image jobs and chats, position and estimate", () => {
  const now = 2_000_000;
  const line = [
    { client: "bob", class: "interactive", jobs: [{ job: 7, position: 1, estimate_s: 4 }], requests: [] },
    // Alice's chat goes when the card turns to llm after bob's job: before her own job of the same place.
    { client: "alice", class: "batch", jobs: [{ job: 3, position: 2, estimate_s: 9 }], requests: [{ request: 12, position: 2, estimate_s: 9 }] },
  ];
  const text = renderStatus({ ...idleDoc(now, { state: "image" }), line }).split("\n");
  const at = text.indexOf("place in line (by client):");
  expect(at).toBeGreaterThan(0);
  expect(text[at + 1]).toMatch(/^\s+client\s+class\s+waiting\s+position\s+estimate$/);
  expect(text[at + 2]).toMatch(/^\s+bob\s+interactive\s+image job 7\s+1\s+4s$/);
  expect(text[at + 3]).toMatch(/^\s+alice\s+batch\s+chat 12\s+2\s+9s$/);
  expect(text[at + 4]).toMatch(/^\s+alice\s+batch\s+image job 3\s+2\s+9s$/);
  expect(renderStatus(idleDoc(now))).not.toContain("place in line");
});

test("GPU seconds (issue 30): a table of each client's use in the window, its quota and its running work", () => {
  const now = 2_000_000;
  const gpu_use = [
    { client: "alice", class: "batch", used_s: 612.4, quota_s: 600, running: 1 },
    { client: "lab", class: "normal", used_s: 3, quota_s: 0, running: 0 },
  ];
  const text = renderStatus({ ...idleDoc(now), gpu_use }).split("\n");
  const at = text.indexOf("GPU seconds in QUOTA_GPU_WINDOW, by client:");
  expect(at).toBeGreaterThan(0);
  expect(text[at + 1]).toMatch(/^\s+client\s+class\s+used\s+quota\s+running$/);
  expect(text[at + 2]).toMatch(/^\s+alice\s+batch\s+612\.4s\s+600s\s+1$/);
  expect(text[at + 3]).toMatch(/^\s+lab\s+normal\s+3s\s+none\s+0$/);
  expect(renderStatus(idleDoc(now))).not.toContain("GPU seconds");
});

test("status --watch follows the place in line (issue 30): a line each time it moved, its estimate ageing while the job ahead runs", async () => {
  stack = await startStack({ comfy: { jobMs: 2000, freeDelayMs: 10 } });
  const { t } = stack;
  const stop = new AbortController();
  let watched = "";
  const watching = statusCommand({ url: t.comfyUrl, json: false, watch: true, env: {}, out: (s) => (watched += s), signal: stop.signal });
  await until(() => watched.includes("GPU: idle"), "the first snapshot");
  // One job run to its end: the estimate now counts down the running job's time left.
  await (await submit(t, promptBody(newPromptId()))).text();
  await t.settled();
  const fromAlice = () => submit(t, JSON.stringify({ ...JSON.parse(promptBody(newPromptId())), client_id: "alice-tab" }));
  const jobs = [fromAlice()];
  await until(() => t.status.snapshot(false).image.running !== null, "alice's first job running");
  jobs.push(fromAlice(), fromAlice());
  // Her next two wait at the lock (one job per client in ComfyUI at a time): places 1 and 2.
  const places = () => watched.split("\n").filter((l) => l.includes(" place in line: "));
  await until(() => places().some((l) => / #2 ~\d+s$/.test(l)), "two of alice's jobs in the line", 10_000);
  const [who, second, third] = /place in line: (comfy-[0-9a-f]{8}) \(normal\): job (\d+) #1 ~\d+s, job (\d+) #2 ~\d+s$/.exec(places().at(-1)!)!.slice(1);
  expect(who).toBeDefined();
  // The estimate ages while the first runs, nobody joining: a line each time, never growing.
  await until(() => places().some((l) => l.includes(`job ${second} #1 ~1s`)), "the estimate down to a second", 10_000);
  const estimates = places().flatMap((l) => new RegExp(`job ${third} #2 ~(\\d+)s$`).exec(l)?.[1] ?? []).map(Number);
  expect(estimates.length).toBeGreaterThan(1);
  for (let i = 1; i < estimates.length; i++) expect(estimates[i]!).toBeLessThan(estimates[i - 1]!);
  // Her first ends: the second goes, the third moves up to 1, then the line empties.
  await until(() => places().some((l) => new RegExp(`: job ${third} #1 ~\\d+s$`).test(l)), "the third job moved up", 10_000);
  await Promise.all(jobs.map(async (j) => (await j).text()));
  await until(() => places().at(-1)!.endsWith("place in line: none"), "the line empty", 10_000);
  stop.abort();
  expect(await watching).toBe(0);
}, 40_000);

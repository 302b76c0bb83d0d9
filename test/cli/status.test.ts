import { afterEach, expect, test } from "bun:test";
import { instanceUrl, statusCommand } from "../../src/cli/status.ts";
import { normalizeArgv } from "../../src/cli/argv.ts";
import { newPromptId, promptBody, startStack, submit, until, type Stack } from "../e2e/jobs/helpers.ts";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

test("the instance is found from LISTEN_*: the Ollama listener, else ComfyUI's, wildcards become loopback", () => {
  expect(instanceUrl({ ollamaUrl: "http://x:11435", listenOllama: ":11434", listenComfy: ":8188" })).toBe("http://127.0.0.1:11434");
  expect(instanceUrl({ ollamaUrl: "", listenOllama: ":11434", listenComfy: "192.168.1.2:8188" })).toBe("http://192.168.1.2:8188");
  expect(instanceUrl({ ollamaUrl: "x", listenOllama: "[::]:11434", listenComfy: ":8188" })).toBe("http://127.0.0.1:11434");
  expect(instanceUrl({ ollamaUrl: "x", listenOllama: "[::1]:11434", listenComfy: ":8188" })).toBe("http://[::1]:11434");
});

test("status, --json and --watch against a running turnstile", async () => {
  stack = await startStack({ comfy: { jobMs: 300 } });
  const { t } = stack;
  const env = { OLLAMA_URL: "http://127.0.0.1:1" };
  let text = "";
  expect(await statusCommand({ url: t.comfyUrl, json: false, watch: false, env, out: (s) => (text += s) })).toBe(0);
  expect(text).toContain("GPU: idle for");
  expect(text).toMatch(/^ollama: up \S+$/m);
  expect(text).toMatch(/^comfy: up \S+$/m);

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

test("status with nothing listening says so", async () => {
  const err: string[] = [];
  const write = process.stderr.write;
  process.stderr.write = ((s: string) => (err.push(s), true)) as typeof process.stderr.write;
  try {
    expect(await statusCommand({ url: "http://127.0.0.1:1", json: false, watch: false, env: { OLLAMA_URL: "http://127.0.0.1:1" } })).toBe(1);
  } finally {
    process.stderr.write = write;
  }
  expect(err.join("")).toContain("no turnstile answers at http://127.0.0.1:1");
});

test("status accepts its flags", () => {
  expect(normalizeArgv(["status", "--json", "--watch", "--url", "http://h:1"])).toEqual({ command: "status", args: ["--json", "--watch", "--url", "http://h:1"], help: false, named: true });
});

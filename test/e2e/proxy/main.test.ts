/**
 * The real entry point, as a user starts it: `bun src/main.ts` (process.execPath is the same bun
 * `npx bun` runs). Without any upstream it refuses to start with one clear line; with OLLAMA_URL
 * it starts, announces its listener, serves, and exits 0 on SIGTERM.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { rawHttp } from "./helpers.ts";
import { type ComfySim, type OllamaSim, startComfySim, startOllamaSim } from "../../../src/sim/index.ts";

const MAIN = join(import.meta.dir, "../../../src/main.ts");
// An empty working directory: no gpu-turnstile.env beside "the executable" can leak in.
let cwd: string;
let ollama: OllamaSim;
let comfy: ComfySim;
beforeAll(async () => {
  cwd = mkdtempSync(join(tmpdir(), "turnstile-main-"));
  ollama = await startOllamaSim();
  comfy = await startComfySim();
});
afterAll(async () => {
  await ollama.stop();
  await comfy.stop();
  rmSync(cwd, { recursive: true, force: true });
});

/** Only what a bare shell has, so nothing from the test runner's environment configures it. */
function env(extra: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? cwd, AUTO_UPDATE: "false", ...extra };
}

interface MainProcess {
  /** The URL its `<name> listener ready` line announced. */
  url(name: string): string;
  /** Everything it wrote to stderr so far. */
  stderr(): string;
  /** SIGTERM, then its exit code and whole stderr. */
  stop(): Promise<{ code: number; stderr: string }>;
  /** On a failure path: SIGTERM, and SIGKILL if that did not end it. */
  kill(): Promise<void>;
}

/** `bun src/main.ts` with `extra` as its whole configuration; resolves once every listener is ready. */
async function startMain(extra: Record<string, string>): Promise<MainProcess> {
  const p = Bun.spawn([process.execPath, MAIN], { cwd, env: env({ ...extra, NO_COLOR: "1" }), stdout: "pipe", stderr: "pipe" });
  const want = ["OLLAMA_URL", "COMFY_URL"].filter((k) => extra[k]).length;
  let text = "";
  const reader = p.stderr.getReader();
  const dec = new TextDecoder();
  const ready = () => [...text.matchAll(/(\w+) listener ready url=(http:\/\/\S+)/g)];
  while (ready().length < want) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`exited before its listeners were ready:\n${text}`);
    text += dec.decode(value, { stream: true });
  }
  const urls = new Map(ready().map((m) => [m[1]!, m[2]!]));
  const rest = (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      text += dec.decode(value, { stream: true });
    }
  })();
  const kill = async () => {
    // SIGTERM first, which the re-exec wrapper passes to the real server (a SIGKILL would orphan it).
    if (p.exitCode !== null || p.signalCode !== null) return;
    p.kill("SIGTERM");
    await Promise.race([p.exited, new Promise((r) => setTimeout(r, 3000))]);
    p.kill("SIGKILL");
  };
  return {
    url: (name) => urls.get(name) ?? "",
    stderr: () => text,
    async stop() {
      p.kill("SIGTERM");
      const code = await p.exited;
      await rest;
      return { code, stderr: text };
    },
    kill,
  };
}

/** A start expected to fail at once; one that is still running after 3 s is stopped and reported as such. */
async function runToExit(extra: Record<string, string>): Promise<{ code: number | "still running"; stderr: string; stdout: string }> {
  const p = Bun.spawn([process.execPath, MAIN], { cwd, env: env({ ...extra, NO_COLOR: "1" }), stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => p.kill("SIGKILL"), 3000);
  const [code, stderr, stdout] = await Promise.all([p.exited, new Response(p.stderr).text(), new Response(p.stdout).text()]);
  clearTimeout(timer);
  return { code: p.signalCode === "SIGKILL" ? "still running" : code, stderr, stdout };
}

describe("bun src/main.ts", () => {
  test("with neither OLLAMA_URL nor COMFY_URL: exits non-zero with one line naming both", async () => {
    const p = Bun.spawn([process.execPath, MAIN], { cwd, env: env({}), stdout: "pipe", stderr: "pipe" });
    const [code, stderr, stdout] = await Promise.all([p.exited, new Response(p.stderr).text(), new Response(p.stdout).text()]);
    expect(code).not.toBe(0);
    const lines = stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain("OLLAMA_URL");
    expect(lines[0]).toContain("COMFY_URL");
    expect(stdout).toBe("");
  });

  test("with OLLAMA_URL: logs its listener, serves through it, and exits 0 on SIGTERM", async () => {
    const p = await startMain({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: "127.0.0.1:0" });
    try {
      const url = p.url("ollama");
      // It really serves: a pass-through request and its own health endpoint.
      const tags = await fetch(`${url}/api/tags`);
      expect(tags.status).toBe(200);
      expect(await tags.text()).toBe(await (await fetch(`${ollama.url}/api/tags`)).text());
      expect(await (await fetch(`${url}/healthz`)).json()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });

      const { code, stderr } = await p.stop();
      expect(code).toBe(0);
      expect(stderr).toContain("shutting down");
      expect(stderr).toContain("stopped");
      expect(stderr).not.toContain("comfy listener");
    } finally {
      await p.kill();
    }
  });

  test("client mistakes at the front door: 4xx answers, and no stack trace or noise in the log at the default level", async () => {
    const p = await startMain({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: "127.0.0.1:0" });
    try {
      const base = p.url("ollama");
      const before = p.stderr();
      const statuses: number[] = [];
      for (const head of ["GET /api/tags HTTP/1.0\r\n", "GET /api/tags HTTP/1.1\r\nHost: a b\r\n", "GET /api/tags HTTP/1.1\r\nHost: [zz]\r\n", "GET /api/tags HTTP/1.1\r\nHost: x:99999\r\n"]) {
        statuses.push((await rawHttp(base, `${head}Connection: close\r\n\r\n`)).status);
      }
      statuses.push((await rawHttp(base, "GET /healthz HTTP/1.0\r\n\r\n")).status);
      statuses.push((await rawHttp(base, "POST /api/%zzat HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")).status);
      statuses.push((await rawHttp(base, "GET /api/tags HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")).status);
      expect(statuses).toEqual([400, 400, 400, 400, 200, 400, 403]);
      const { code, stderr } = await p.stop();
      expect(code).toBe(0);
      // No stack trace, no TypeError: between "ready" and "shutting down" it said one thing, the
      // refused Host, which an operator may need to allow.
      expect(stderr.slice(before.length)).not.toContain("Error");
      expect(stderr.slice(before.length).split("\n").filter((l) => l && !/shutting down|stopped/.test(l))).toEqual([
        expect.stringMatching(/WARN +ollama listener refused Host "evil.example": .*ALLOWED_HOSTS/),
      ]);
    } finally {
      await p.kill();
    }
  });

  test("a second instance on the same ports exits non-zero with one line; the first keeps serving", async () => {
    const first = await startMain({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: "127.0.0.1:0", COMFY_URL: comfy.url, LISTEN_COMFY: "127.0.0.1:0" });
    try {
      const listen = (name: string) => first.url(name).replace("http://", "");
      const second = await runToExit({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: listen("ollama"), COMFY_URL: comfy.url, LISTEN_COMFY: listen("comfy") });
      expect(second.code).not.toBe(0);
      expect(second.stderr).toBe(`gpu-turnstile: LISTEN_OLLAMA ${listen("ollama")} is already in use (another gpu-turnstile?)\n`);
      expect(second.stdout).toBe("");

      // Same ComfyUI port, another Ollama port: it is the ComfyUI setting that is named.
      const third = await runToExit({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: "127.0.0.1:0", COMFY_URL: comfy.url, LISTEN_COMFY: listen("comfy") });
      expect(third.code).not.toBe(0);
      expect(third.stderr).toBe(`gpu-turnstile: LISTEN_COMFY ${listen("comfy")} is already in use (another gpu-turnstile?)\n`);

      // Every new connection still reaches the first instance, and it logged nothing about it.
      const before = first.stderr();
      for (let i = 0; i < 20; i++) {
        const res = await fetch(`${first.url(i % 2 ? "ollama" : "comfy")}/healthz`, { headers: { connection: "close" } });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      }
      expect(first.stderr()).toBe(before);
      const { code: firstCode } = await first.stop();
      expect(firstCode).toBe(0);
    } finally {
      await first.kill();
    }
  });
});

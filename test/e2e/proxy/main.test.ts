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
/** A second card's upstreams on the same machine. */
let ollama2: OllamaSim;
let comfy2: ComfySim;
beforeAll(async () => {
  cwd = mkdtempSync(join(tmpdir(), "turnstile-main-"));
  [ollama, comfy, ollama2, comfy2] = await Promise.all([startOllamaSim(), startComfySim(), startOllamaSim(), startComfySim()]);
});
afterAll(async () => {
  await Promise.all([ollama.stop(), comfy.stop(), ollama2.stop(), comfy2.stop()]);
  rmSync(cwd, { recursive: true, force: true });
});

/** Only what a bare shell has, so nothing from the test runner's environment configures it. */
function env(extra: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? cwd, AUTO_UPDATE: "false", ...extra };
}

interface MainProcess {
  process: ReturnType<typeof Bun.spawn>;
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
    process: p,
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

  test("a listener whose port is taken exits non-zero with one line naming the setting; the first keeps serving", async () => {
    const first = await startMain({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: "127.0.0.1:0", COMFY_URL: comfy.url, LISTEN_COMFY: "127.0.0.1:0" });
    try {
      const listen = (name: string) => first.url(name).replace("http://", "");
      // Another card's upstreams (so no claim conflict), the first one's ports.
      const second = await runToExit({ OLLAMA_URL: ollama2.url, LISTEN_OLLAMA: listen("ollama"), COMFY_URL: comfy2.url, LISTEN_COMFY: listen("comfy") });
      expect(second.code).not.toBe(0);
      expect(second.stderr).toBe(`gpu-turnstile: LISTEN_OLLAMA ${listen("ollama")} is already in use (another gpu-turnstile?)\n`);
      expect(second.stdout).toBe("");

      // Same ComfyUI port, another Ollama port: it is the ComfyUI setting that is named.
      const third = await runToExit({ OLLAMA_URL: ollama2.url, LISTEN_OLLAMA: "127.0.0.1:0", COMFY_URL: comfy2.url, LISTEN_COMFY: listen("comfy") });
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

describe("one turnstile per card", () => {
  const both = (extra: Record<string, string> = {}) => ({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: "127.0.0.1:0", COMFY_URL: comfy.url, LISTEN_COMFY: "127.0.0.1:0", ...extra });

  test("a second instance for the same upstreams refuses on other ports and on [::1], naming the first", async () => {
    const first = await startMain(both());
    try {
      const listening = `${first.url("ollama")} and ${first.url("comfy")}`;
      // Other ports (0: any free one), the same URLs.
      const other = await runToExit(both());
      expect(other.code).not.toBe(0);
      expect(other.stderr).toMatch(new RegExp(`^gpu-turnstile: another gpu-turnstile \\(pid \\d+, listening on ${escape(listening)}\\) already guards http://127\\.0\\.0\\.1:\\d+\\n$`));
      const pid = /pid (\d+)/.exec(other.stderr)![1];

      // On [::1], with the upstreams spelled another way: still the same card.
      const v6 = await runToExit(both({ OLLAMA_URL: ollama.url.replace("127.0.0.1", "localhost"), LISTEN_OLLAMA: "[::1]:0", COMFY_URL: `${comfy.url}/`, LISTEN_COMFY: "[::1]:0" }));
      expect(v6.code).not.toBe(0);
      expect(v6.stderr.trimEnd().split("\n")).toHaveLength(1);
      expect(v6.stderr).toContain(`another gpu-turnstile (pid ${pid}, listening on ${listening}) already guards`);

      // Sharing only the ComfyUI is enough.
      const comfyOnly = await runToExit({ COMFY_URL: comfy.url, LISTEN_COMFY: "0.0.0.0:0" });
      expect(comfyOnly.code).not.toBe(0);
      expect(comfyOnly.stderr).toContain(`already guards ${comfy.url}\n`);

      // The first never noticed, and still serves.
      const res = await fetch(`${first.url("ollama")}/healthz`);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      expect((await first.stop()).code).toBe(0);
    } finally {
      await first.kill();
    }
  });

  test("after kill -9, a successor starts at once", async () => {
    const first = await startMain(both());
    const p = first.process;
    p.kill("SIGKILL");
    await p.exited;
    const successor = await startMain(both());
    try {
      const res = await fetch(`${successor.url("comfy")}/healthz`);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      expect((await successor.stop()).code).toBe(0);
    } finally {
      await successor.kill();
    }
  });

  test("two cards on one machine: instances guarding different upstreams run side by side", async () => {
    const a = await startMain(both());
    try {
      const b = await startMain({ OLLAMA_URL: ollama2.url, LISTEN_OLLAMA: "127.0.0.1:0", COMFY_URL: comfy2.url, LISTEN_COMFY: "127.0.0.1:0" });
      try {
        for (const [m, sim] of [[a, ollama], [b, ollama2]] as const) {
          const tags = await fetch(`${m.url("ollama")}/api/tags`);
          expect(await tags.text()).toBe(await (await fetch(`${sim.url}/api/tags`)).text());
        }
        expect((await b.stop()).code).toBe(0);
      } finally {
        await b.kill();
      }
      expect((await a.stop()).code).toBe(0);
    } finally {
      await a.kill();
    }
  });
});

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

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
import { MAIN, type MainProcess, mainEnv, startMain as startMainIn } from "../../support/main-process.ts";
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

/** `bun src/main.ts` with `extra` as its whole configuration. */
const env = (extra: Record<string, string>) => mainEnv(cwd, extra);
const startMain = (extra: Record<string, string>) => startMainIn(cwd, extra);
/** SIGTERM: its exit code and whole stderr. */
async function stop(p: MainProcess): Promise<{ code: number | string; stderr: string }> {
  const code = await p.kill("SIGTERM");
  return { code, stderr: p.stderr() };
}

/** A start expected to fail at once; one that is still running after 3 s is stopped and reported as such. */
async function runToExit(extra: Record<string, string>): Promise<{ code: number | "still running"; stderr: string; stdout: string }> {
  const p = Bun.spawn([process.execPath, MAIN], { cwd, env: env(extra), stdout: "pipe", stderr: "pipe" });
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

      const { code, stderr } = await stop(p);
      expect(code).toBe(0);
      expect(stderr).toContain("shutting down");
      expect(stderr).toContain("stopped");
      expect(stderr).not.toContain("comfy listener");
    } finally {
      await p.kill("SIGKILL");
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
      const { code, stderr } = await stop(p);
      expect(code).toBe(0);
      // No stack trace, no TypeError: between "ready" and "shutting down" it said one thing, the
      // refused Host, which an operator may need to allow (besides the start-up probe's "ollama is up").
      expect(stderr.slice(before.length)).not.toContain("Error");
      expect(stderr.slice(before.length).split("\n").filter((l) => l && !/shutting down|stopped|ollama is up/.test(l))).toEqual([
        expect.stringMatching(/WARN +ollama listener refused Host "evil.example": .*ALLOWED_HOSTS/),
      ]);
    } finally {
      await p.kill("SIGKILL");
    }
  });

  test("a listener host name that does not resolve is not called a port in use", async () => {
    const r = await runToExit({ OLLAMA_URL: ollama2.url, LISTEN_OLLAMA: "nosuchhost.invalid:0" });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toBe("gpu-turnstile: LISTEN_OLLAMA nosuchhost.invalid:0: cannot listen: the port is in use (another gpu-turnstile?) or nosuchhost.invalid is not an address of this machine\n");
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
      const { code: firstCode } = await stop(first);
      expect(firstCode).toBe(0);
    } finally {
      await first.kill("SIGKILL");
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
      expect((await stop(first)).code).toBe(0);
    } finally {
      await first.kill("SIGKILL");
    }
  });

  test("after kill -9, a successor starts at once", async () => {
    const first = await startMain(both());
    await first.kill("SIGKILL");
    const successor = await startMain(both());
    try {
      const res = await fetch(`${successor.url("comfy")}/healthz`);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      expect((await stop(successor)).code).toBe(0);
    } finally {
      await successor.kill("SIGKILL");
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
        expect((await stop(b)).code).toBe(0);
      } finally {
        await b.kill("SIGKILL");
      }
      expect((await stop(a)).code).toBe(0);
    } finally {
      await a.kill("SIGKILL");
    }
  });
});

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

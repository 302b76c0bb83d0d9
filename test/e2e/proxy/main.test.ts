/**
 * The real entry point, as a user starts it: `bun src/main.ts` (process.execPath is the same bun
 * `npx bun` runs). Without any upstream it refuses to start with one clear line; with OLLAMA_URL
 * it starts, announces its listener, serves, and exits 0 on SIGTERM.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type OllamaSim, startOllamaSim } from "../../../src/sim/index.ts";

const MAIN = join(import.meta.dir, "../../../src/main.ts");
// An empty working directory: no gpu-turnstile.env beside "the executable" can leak in.
let cwd: string;
let ollama: OllamaSim;
beforeAll(async () => {
  cwd = mkdtempSync(join(tmpdir(), "turnstile-main-"));
  ollama = await startOllamaSim();
});
afterAll(async () => {
  await ollama.stop();
  rmSync(cwd, { recursive: true, force: true });
});

/** Only what a bare shell has, so nothing from the test runner's environment configures it. */
function env(extra: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? cwd, AUTO_UPDATE: "false", ...extra };
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
    const p = Bun.spawn([process.execPath, MAIN], {
      cwd,
      env: env({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: "127.0.0.1:0", NO_COLOR: "1" }),
      stdout: "pipe",
      stderr: "pipe",
    });
    let stderr = "";
    try {
      const reader = p.stderr.getReader();
      const dec = new TextDecoder();
      let url: string | undefined;
      while (!url) {
        const { done, value } = await reader.read();
        if (done) throw new Error(`exited before its listener was ready:\n${stderr}`);
        stderr += dec.decode(value, { stream: true });
        url = /ollama listener ready url=(http:\/\/127\.0\.0\.1:\d+)/.exec(stderr)?.[1];
      }
      // It really serves: a pass-through request and its own health endpoint.
      const tags = await fetch(`${url}/api/tags`);
      expect(tags.status).toBe(200);
      expect(await tags.text()).toBe(await (await fetch(`${ollama.url}/api/tags`)).text());
      expect(await (await fetch(`${url}/healthz`)).json()).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });

      p.kill("SIGTERM");
      const rest = (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return;
          stderr += dec.decode(value, { stream: true });
        }
      })();
      expect(await p.exited).toBe(0);
      await rest;
      expect(stderr).toContain("shutting down");
      expect(stderr).toContain("stopped");
      expect(stderr).not.toContain("comfy listener");
    } finally {
      // On a failure path: SIGTERM first, which the re-exec wrapper passes to the real server (a
      // SIGKILL would orphan it), and SIGKILL only if that did not end it.
      if (p.exitCode === null && p.signalCode === null) {
        p.kill("SIGTERM");
        await Promise.race([p.exited, new Promise((r) => setTimeout(r, 3000))]);
        p.kill("SIGKILL");
      }
    }
  });
});

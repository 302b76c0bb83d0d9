/**
 * The command line as a new operator meets it: `bun src/main.ts …` with its output going to a
 * pipe, as in a script, a service log or `| less`. Help is there for the program and every
 * command, lists the settings, and no output carries ANSI colour unless a terminal (or
 * FORCE_COLOR) asks for it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { COMMANDS } from "../../src/cli/argv.ts";
import { parseEnvFile } from "../../src/config/envfile.ts";
import { SETTINGS } from "../../src/config/settings.ts";
import { type OllamaSim, startOllamaSim } from "../../src/sim/index.ts";

const MAIN = join(import.meta.dir, "../../src/main.ts");
const ESC = "\x1b[";

let cwd: string;
beforeAll(() => {
  // No gpu-turnstile.env beside "the executable" can leak in.
  cwd = mkdtempSync(join(tmpdir(), "turnstile-cli-"));
});
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

/** A bare shell's environment: no NO_COLOR, FORCE_COLOR, CI or TERM from the test runner. */
function env(extra: Record<string, string> = {}): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? cwd, AUTO_UPDATE: "false", ...extra };
}

async function cli(args: string[], extra?: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = Bun.spawn([process.execPath, MAIN, ...args], { cwd, env: env(extra), stdout: "pipe", stderr: "pipe" });
  const [code, stdout, stderr] = await Promise.all([p.exited, new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code, stdout, stderr };
}

describe("help", () => {
  test.each([["--help"], ["help"], ["-h"]])("%s: the commands, run's option, and where the settings are, plain", async (flag) => {
    const r = await cli([flag]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    for (const c of [...COMMANDS, "help"]) expect(r.stdout).toMatch(new RegExp(`^ +${c} +\\S`, "m"));
    expect(r.stdout).toContain("--config=<path>");
    expect(r.stdout).toContain("gpu-turnstile config --help lists every one");
    expect(r.stdout).not.toContain(ESC);
    expect(r.stdout).not.toMatch(/ $/m);
  });

  test.each([["run", "--help"], ["help", "run"]] as const)("%s %s: run's own usage and options", async (a, b) => {
    const r = await cli([a, b]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("USAGE gpu-turnstile run [OPTIONS]");
    expect(r.stdout).toContain("--config=<path>");
    expect(r.stdout).toContain("gpu-turnstile config --help lists every one");
    expect(r.stdout).not.toContain("install-service");
  });

  test("every command's --help is its own usage, plain, without the internal --elevated-log", async () => {
    const outs = await Promise.all(COMMANDS.map((c) => cli([c, "--help"])));
    COMMANDS.forEach((c, i) => {
      const r = outs[i]!;
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`USAGE gpu-turnstile ${c}`);
      expect(r.stdout).not.toContain(ESC);
      expect(r.stdout).not.toContain("elevated");
    });
    expect(outs[COMMANDS.indexOf("install-service")]!.stdout).toContain("--no-copy");
    expect(outs[COMMANDS.indexOf("demo")]!.stdout).toContain("--without-turnstile");
  });

  test("config --help and config list every setting with its default", async () => {
    const [help, list] = await Promise.all([cli(["config", "--help"]), cli(["config"])]);
    for (const r of [help, list]) {
      expect(r.code).toBe(0);
      for (const d of SETTINGS) expect(r.stdout).toMatch(new RegExp(`^  ${d.key}=`, "m"));
      expect(r.stdout).toMatch(/^ {2}JOB_TIMEOUT=15m\n {6}How long one image job \(a ComfyUI prompt, an a1111 or swarmui generation\n {6}request\) may run; past it, it is interrupted \(the watchdog\)\.$/m);
      expect(r.stdout).not.toContain(ESC);
    }
    expect(help.stdout).toContain("--sample");
  });

  test("config --sample is a config file that mentions every setting", async () => {
    const r = await cli(["config", "--sample"]);
    expect(r.code).toBe(0);
    expect(parseEnvFile(r.stdout, "sample").map((e) => e.key)).toEqual(["CFG_VER", "APP_VER"]);
    for (const d of SETTINGS.filter((x) => x.key !== "CFG_VER" && x.key !== "APP_VER")) expect(r.stdout).toContain(`\n# ${d.key}=`);
  });
});

describe("usage errors", () => {
  test("an unknown flag of a command names the flags a user may give and points at that command's help", async () => {
    const r = await cli(["remove-service", "--force"]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe(
      'gpu-turnstile: unknown flag "--force" for "remove-service"\nRun "gpu-turnstile remove-service --help" for usage.\n',
    );
  });

  test("help for an unknown command says so", async () => {
    const r = await cli(["help", "serve"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toStartWith('gpu-turnstile: no command "serve" (commands: run, ');
  });
});

describe("colour in the log", () => {
  let ollama: OllamaSim;
  beforeAll(async () => {
    ollama = await startOllamaSim();
  });
  afterAll(() => ollama.stop());

  /** Runs the turnstile to "listener ready", sends one request, stops it; all of stderr. */
  async function serveOnce(extra: Record<string, string>): Promise<string> {
    const p = Bun.spawn([process.execPath, MAIN], {
      cwd,
      env: env({ OLLAMA_URL: ollama.url, LISTEN_OLLAMA: "127.0.0.1:0", LOGLEVEL: "info", ...extra }),
      stdout: "pipe",
      stderr: "pipe",
    });
    try {
      const reader = p.stderr.getReader();
      const dec = new TextDecoder();
      let stderr = "";
      let url: string | undefined;
      while (!url) {
        const { done, value } = await reader.read();
        if (done) throw new Error(`exited before its listener was ready:\n${stderr}`);
        stderr += dec.decode(value, { stream: true });
        // Colour or not, the URL is the field's value.
        url = /ollama listener ready .*?(http:\/\/127\.0\.0\.1:\d+)/.exec(stderr)?.[1];
      }
      expect((await fetch(`${url}/api/tags`)).status).toBe(200);
      p.kill("SIGTERM");
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        stderr += dec.decode(value, { stream: true });
      }
      expect(await p.exited).toBe(0);
      return stderr;
    } finally {
      p.kill("SIGKILL");
    }
  }

  test("stderr to a pipe: no escape codes in any line, request lines included; FORCE_COLOR brings them back", async () => {
    // One after the other: a second turnstile for the same Ollama would refuse to start.
    const piped = await serveOnce({});
    const forced = await serveOnce({ FORCE_COLOR: "1" });
    expect(piped).toContain("GET /api/tags");
    expect(piped).not.toContain(ESC);
    expect(forced).toContain(ESC);
  }, 20_000);
});

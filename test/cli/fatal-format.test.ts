/**
 * Issue 28, point 6: a start that fails before the logger exists (a config error, an unopenable
 * LOG_FILE) or just after (the port taken) says so in the log's format. With LOG_FORMAT=json from
 * the environment or from the config file, every line on stderr is one JSON object, as the logger
 * writes them; a log shipper reading JSON would otherwise drop the one line that matters.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { earlyLogFormat } from "../../src/config/early-format.ts";

const MAIN = join(import.meta.dir, "../../src/main.ts");

let cwd: string;
beforeAll(() => {
  cwd = mkdtempSync(join(tmpdir(), "turnstile-fatal-"));
});
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

async function start(args: string[], extra: Record<string, string>): Promise<{ code: number; stderr: string }> {
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cwd, AUTO_UPDATE: "false", ...extra };
  const p = Bun.spawn([process.execPath, MAIN, ...args], { cwd, env, stdout: "pipe", stderr: "pipe" });
  const [code, stderr] = await Promise.all([p.exited, new Response(p.stderr).text()]);
  return { code, stderr };
}

/** Every line parsed as JSON (a line that is not fails the test, quoting it). */
function jsonLines(stderr: string): { time: string; level: string; msg: string }[] {
  return stderr
    .trimEnd()
    .split("\n")
    .map((line) => {
      try {
        return JSON.parse(line) as { time: string; level: string; msg: string };
      } catch {
        throw new Error(`not a JSON log line: ${line}`);
      }
    });
}

describe("fatal start errors in the log's format", () => {
  test("LOG_FORMAT=json in the environment, a config error: JSON lines at level error, credentials masked", async () => {
    const r = await start([], { LOG_FORMAT: "json", OLLAMA_URL: "http://admin:hunter2@127.0.0.1:11435", UNLOAD_TIMEOUT: "soon" });
    expect(r.code).toBe(1);
    const lines = jsonLines(r.stderr);
    expect(lines.length).toBeGreaterThan(0);
    for (const l of lines) {
      expect(l.level).toBe("error");
      expect(l.msg).toStartWith("gpu-turnstile cannot start: config error: ");
      expect(Number.isNaN(Date.parse(l.time))).toBe(false);
    }
    expect(lines.some((l) => l.msg.includes("UNLOAD_TIMEOUT"))).toBe(true);
    expect(r.stderr).not.toContain("hunter2");
  });

  test("LOG_FORMAT=json in the config file, the file's other setting wrong: JSON naming the file and line", async () => {
    const file = join(cwd, "bad.env");
    writeFileSync(file, "LOG_FORMAT=json\nOLLAMA_URL=http://127.0.0.1:11435\nLISTEN_OLLAMA=not-an-address:x\n");
    const r = await start(["--config", file], {});
    expect(r.code).toBe(1);
    const lines = jsonLines(r.stderr);
    expect(lines.some((l) => l.msg.includes(`${file}:3`) && l.msg.includes("LISTEN_OLLAMA"))).toBe(true);
  });

  test("LOG_FORMAT=json and a LOG_FILE that cannot be opened: JSON", async () => {
    writeFileSync(join(cwd, "a-file"), "");
    const r = await start([], { LOG_FORMAT: "json", OLLAMA_URL: "http://127.0.0.1:11435", LISTEN_OLLAMA: "127.0.0.1:0", LOG_FILE: join(cwd, "a-file", "x.log") });
    expect(r.code).toBe(1);
    expect(jsonLines(r.stderr).map((l) => l.msg)).toEqual([expect.stringMatching(/^gpu-turnstile cannot start: LOG_FILE: /)]);
  });

  test("LOG_FORMAT=json and the port taken (the logger exists, the line goes to stderr): JSON", async () => {
    const taken = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    try {
      const upstream = `http://127.0.0.1:${20000 + Math.floor(Math.random() * 20000)}`;
      const r = await start([], { LOG_FORMAT: "json", OLLAMA_URL: upstream, LISTEN_OLLAMA: `127.0.0.1:${taken.port}` });
      expect(r.code).toBe(1);
      const lines = jsonLines(r.stderr);
      expect(lines.at(-1)).toMatchObject({ level: "error", msg: expect.stringContaining(String(taken.port)) });
    } finally {
      taken.stop(true);
    }
  });

  test("text stays as it was: one plain line per problem", async () => {
    const r = await start([], { OLLAMA_URL: "http://127.0.0.1:11435", UNLOAD_TIMEOUT: "soon" });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^gpu-turnstile: config error: .*UNLOAD_TIMEOUT/);
  });
});

describe("earlyLogFormat: the format to fail in when the config did not load", () => {
  const files = (map: Record<string, string>) => (p: string) => map[p] ?? null;
  const at = { execPath: "/opt/g/gpu-turnstile", argvConfigPath: "/c.env" };
  test("the environment beats the file; an invalid value is skipped; an unparseable file means text", () => {
    expect(earlyLogFormat({ ...at, env: { LOG_FORMAT: "JSON" }, readFile: files({}) })).toBe("json");
    expect(earlyLogFormat({ ...at, env: { LOG_FORMAT: "text" }, readFile: files({ "/c.env": "LOG_FORMAT=json\n" }) })).toBe("text");
    expect(earlyLogFormat({ ...at, env: { LOG_FORMAT: "xml" }, readFile: files({ "/c.env": "LOG_FORMAT=json\n" }) })).toBe("json");
    expect(earlyLogFormat({ ...at, env: {}, readFile: files({ "/c.env": "LOG_FORMAT=text\nLOG_FORMAT=json\n" }) })).toBe("json");
    expect(earlyLogFormat({ ...at, env: {}, readFile: files({ "/c.env": "LOG_FORMAT=json\n'unterminated\n" }) })).toBe("text");
    expect(earlyLogFormat({ ...at, env: {}, readFile: files({}) })).toBe("text");
  });
});

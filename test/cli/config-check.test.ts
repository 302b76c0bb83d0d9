/** `gpu-turnstile config --config FILE`: a config checked without starting anything. */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { normalizeArgv } from "../../src/cli/argv.ts";
import { checkConfigCommand } from "../../src/cli/config.ts";

const dir = mkdtempSync(join(tmpdir(), "config-check-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function check(text: string, env: Record<string, string> = {}) {
  const path = join(dir, `${Math.random().toString(36).slice(2)}.env`);
  writeFileSync(path, text);
  let out = "";
  let err = "";
  const code = checkConfigCommand({ configPath: path, env, execPath: join(dir, "gpu-turnstile"), out: (s) => (out += s), err: (s) => (err += s) });
  return { code, out, err, path };
}

test("a valid config: every setting with its value and where it came from; secrets and credentials masked", () => {
  const r = check("# mine\nOLLAMA_URL=http://admin:S3cret@127.0.0.1:11435\nADMIN_TOKEN=hunter2hunter2hunter2\n", { LOG_LEVEL: "info" });
  expect(r.code).toBe(0);
  expect(r.err).toBe("");
  expect(r.out).toMatch(new RegExp(`^  OLLAMA_URL=http://\\*\\*\\*@127\\.0\\.0\\.1:11435 +# ${r.path.replace(/[.]/g, "\\.")}:2$`, "m"));
  expect(r.out).toMatch(/^ {2}LOGLEVEL=info +# environment \(LOG_LEVEL\)$/m);
  expect(r.out).toMatch(/^ {2}JOB_TIMEOUT=15m0s +# default$/m);
  // STATE_DIR left empty: the folder a start would use (beside the config file), not "".
  expect(r.out).toMatch(new RegExp(`^  STATE_DIR=${join(dir, "gpu-turnstile-state").replace(/[.]/g, "\\.")} +# default$`, "m"));
  expect(r.out).not.toContain("S3cret");
  expect(r.out).not.toContain("hunter2");
});

test("a broken config: every problem, the misspelt key's hint first, exit 1", () => {
  const r = check("OLAMA_URL=http://127.0.0.1:11435\n");
  expect(r.code).toBe(1);
  const lines = r.err.trim().split("\n");
  expect(lines[0]).toContain("unknown setting OLAMA_URL ignored (did you mean OLLAMA_URL?)");
  expect(lines[1]).toContain("neither OLLAMA_URL nor COMFY_URL is set");
});

test("config takes --config", () => {
  expect(normalizeArgv(["config", "--config", "x.env"])).toMatchObject({ command: "config", args: ["--config", "x.env"] });
});

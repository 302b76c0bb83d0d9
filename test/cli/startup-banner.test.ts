/**
 * The start-up banner: text lists every setting one line each; JSON gives them as one object on
 * one line (durations in ms, secrets masked, credentials out of URLs). Either way, one write.
 */
import { expect, test } from "bun:test";
import { buildConfig, describeConfig } from "../../src/config/load.ts";
import { SETTINGS } from "../../src/config/settings.ts";
import { logStartup, type Loaded } from "../../src/cli/serve.ts";
import { createLogger, type LogFormat } from "../../src/observe/log.ts";

function banner(format: LogFormat) {
  const env = { OLLAMA_URL: "http://user:pw@127.0.0.1:11435", ADMIN_TOKEN: "s3cret-token-0123456789", LLM_WAIT_TIMEOUT: "2m", LOG_FORMAT: format };
  const { config } = buildConfig({ entries: [], file: null, env, platform: { os: "linux", arch: "x64" } });
  const loaded: Loaded = { config, log: undefined!, describe: describeConfig(config), warnings: ["a warning"], source: "/etc/gpu-turnstile.env" };
  const writes: string[] = [];
  logStartup(loaded, createLogger({ level: "info", format, stream: { write: (s: string) => writes.push(s) } }));
  return writes;
}

test("text: one write, a line per setting, then the warnings", () => {
  const writes = banner("text");
  expect(writes).toHaveLength(1);
  const lines = writes[0]!.trimEnd().split("\n");
  expect(lines).toHaveLength(1 + SETTINGS.length + 1);
  expect(lines[0]).toMatch(/INFO  gpu-turnstile \S+ starting config=\/etc\/gpu-turnstile.env$/);
  expect(lines.filter((l) => / INFO {4}LLM_WAIT_TIMEOUT=2m0s$/.test(l))).toHaveLength(1);
  expect(lines.at(-1)).toMatch(/WARN  a warning$/);
  expect(writes[0]).not.toContain("s3cret-token-0123456789");
  expect(writes[0]).not.toContain(":pw@");
});

test("json: the settings are one object on the start line; durations are numbers in ms", () => {
  const writes = banner("json");
  expect(writes).toHaveLength(1);
  const lines = writes[0]!.trimEnd().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(lines).toHaveLength(2);
  const settings = lines[0]!.settings as Record<string, unknown>;
  expect(Object.keys(settings)).toEqual(SETTINGS.map((d) => d.key));
  expect(settings.LLM_WAIT_TIMEOUT).toBe(120_000);
  expect(settings.ADMIN_TOKEN).toBe("***");
  expect(settings.OLLAMA_URL).not.toContain("pw");
  expect(lines[1]).toMatchObject({ level: "warn", msg: "a warning" });
});

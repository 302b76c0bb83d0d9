/** The config example in the README must be a file the turnstile accepts as it stands. */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { buildConfig } from "../../src/config/load.ts";
import { parseEnvFile } from "../../src/config/envfile.ts";

test("the README's gpu-turnstile.env example parses and configures both upstreams", () => {
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  const block = /```sh\n(# gpu-turnstile\.env\n[\s\S]*?)```/.exec(readme)?.[1];
  expect(block).toBeDefined();
  const entries = parseEnvFile(block!, "README.md");
  const { config } = buildConfig({ entries, file: "README.md", env: {}, platform: { os: "linux", arch: "x64" } });
  expect(config.ollamaUrl).toBe("http://127.0.0.1:11435");
  expect(config.comfyUrl).toBe("http://127.0.0.1:8189");
});

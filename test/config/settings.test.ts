import { describe, expect, test } from "bun:test";
import { parseSetting } from "../../src/config/schema.ts";
import { defaultText, SETTINGS, updateAssetFor, type Platform } from "../../src/config/settings.ts";
import { renderSettingsMarkdownTable } from "../../src/config/table.ts";
import type { Config } from "../../src/config/types.ts";

/** tsc fails on this literal when Config gains, loses or renames a field; the tests below then catch SETTINGS. */
const FIELD_TYPES: Record<keyof Config, "string" | "number" | "boolean"> = {
  listenOllama: "string",
  listenComfy: "string",
  listenOllamaNested: "string",
  allowedHosts: "string",
  ollamaUrl: "string",
  comfyUrl: "string",
  llmKind: "string",
  lmstudioToken: "string",
  imageKind: "string",
  swarmuiSession: "string",
  swarmuiToken: "string",
  unloadTimeoutMs: "number",
  jobTimeoutMs: "number",
  imageSessionMaxMs: "number",
  fairTurns: "boolean",
  fairClasses: "string",
  fairChatsFirst: "string",
  quotaImageJobs: "number",
  quotaLlmRequests: "number",
  quotaGpuSeconds: "string",
  quotaGpuWindowMs: "number",
  clientsFile: "string",
  llmWaitTimeoutMs: "number",
  llmIdleTimeoutMs: "number",
  clientIdleTimeoutMs: "number",
  llmDrainTimeoutMs: "number",
  llmBusyMode: "string",
  llmBusyStatus: "number",
  busyRetryAfterS: "number",
  warmModel: "string",
  coexist: "boolean",
  coexistModels: "string",
  coexistMargin: "string",
  coexistPollIntervalMs: "number",
  logLevel: "string",
  logFormat: "string",
  logFile: "string",
  unloadPollIntervalMs: "number",
  historyPollIntervalMs: "number",
  freePollIntervalMs: "number",
  probeTimeoutMs: "number",
  healthIntervalMs: "number",
  freeTimeoutMs: "number",
  warmTimeoutMs: "number",
  shutdownTimeoutMs: "number",
  backoffInitialMs: "number",
  backoffMaxMs: "number",
  upstreamRetryTimeoutMs: "number",
  promptCaptureLimit: "number",
  retryBodyLimit: "number",
  autoUpdate: "boolean",
  updateIntervalMs: "number",
  updateRepo: "string",
  updateAsset: "string",
  leaseMaxTtlMs: "number",
  stateDir: "string",
  adminToken: "string",
  trustedProxies: "string",
  cardName: "string",
  agentListen: "string",
  appVer: "string",
  cfgVer: "string",
};

const KIND_TYPE = { duration: "number", int: "number", bool: "boolean", string: "string", url: "string", listen: "string", enum: "string" };

const PLATFORMS: Platform[] = [
  { os: "linux", arch: "x64" },
  { os: "linux", arch: "arm64" },
  { os: "win32", arch: "x64" },
];

describe("SETTINGS", () => {
  test("covers every field of Config exactly once", () => {
    const fields = SETTINGS.map((d) => d.field);
    expect(new Set(fields).size).toBe(fields.length);
    expect([...fields].sort() as string[]).toEqual(Object.keys(FIELD_TYPES).sort());
  });

  test("keys and aliases are unique and look like env names", () => {
    const keys = SETTINGS.flatMap((d) => [d.key, ...(d.aliases ?? [])]);
    expect(new Set(keys).size).toBe(keys.length);
    for (const k of keys) expect(k).toMatch(/^[A-Z][A-Z0-9_]*$/);
  });

  test("each kind produces the type its Config field has", () => {
    for (const d of SETTINGS) expect(`${d.key}: ${KIND_TYPE[d.kind]}`).toBe(`${d.key}: ${FIELD_TYPES[d.field]}`);
  });

  test("every default is valid on every platform (an empty default means unset)", () => {
    for (const p of PLATFORMS) {
      for (const d of SETTINGS) {
        const text = defaultText(d, p);
        if (text === "") {
          expect(`${d.key}: ${d.kind}`).toMatch(/: (string|url|listen)$/);
          continue;
        }
        const r = parseSetting(d, text);
        expect(`${d.key}=${text}: ${r.ok ? "ok" : r.message}`).toBe(`${d.key}=${text}: ok`);
      }
    }
  });

  test("enums carry values, ints carry bounds, every row carries a one-line doc", () => {
    for (const d of SETTINGS) {
      if (d.kind === "enum") expect(d.values?.length ?? 0).toBeGreaterThan(1);
      if (d.kind === "int") expect(typeof d.min === "number" && typeof d.max === "number").toBe(true);
      expect(d.doc.length).toBeGreaterThan(10);
      expect(d.doc).not.toContain("\n");
    }
  });

  test("the SPEC's defaults", () => {
    const linux = { os: "linux", arch: "x64" } as const;
    const defaults = Object.fromEntries(SETTINGS.map((d) => [d.key, defaultText(d, linux)]));
    expect(defaults).toMatchObject({
      LISTEN_OLLAMA: ":11434",
      LISTEN_COMFY: ":8188",
      OLLAMA_URL: "",
      COMFY_URL: "",
      UNLOAD_TIMEOUT: "60s",
      JOB_TIMEOUT: "15m",
      LLM_WAIT_TIMEOUT: "10m",
      LLM_BUSY_MODE: "wait",
      LLM_BUSY_STATUS: "503",
      BUSY_RETRY_AFTER: "auto",
      LOGLEVEL: "warn",
      LOG_FORMAT: "text",
      UNLOAD_POLL_INTERVAL: "500ms",
      HISTORY_POLL_INTERVAL: "1s",
      FREE_POLL_INTERVAL: "250ms",
      PROBE_TIMEOUT: "5s",
      HEALTH_INTERVAL: "30s",
      FREE_TIMEOUT: "30s",
      WARM_TIMEOUT: "2m",
      SHUTDOWN_TIMEOUT: "10s",
      BACKOFF_INITIAL: "1s",
      BACKOFF_MAX: "60s",
      PROMPT_CAPTURE_LIMIT: "65536",
      RETRY_BODY_LIMIT: "262144",
      AUTO_UPDATE: "true",
      UPDATE_INTERVAL: "6h",
      UPDATE_REPO: "https://git.rambossek.at/PUBLIC/gpu-turnstile",
      APP_VER: "stable",
      CFG_VER: "",
    });
  });

  test("UPDATE_ASSET depends on the platform", () => {
    expect(updateAssetFor({ os: "win32", arch: "x64" })).toBe("gpu-turnstile.exe");
    expect(updateAssetFor({ os: "linux", arch: "x64" })).toBe("gpu-turnstile-linux-x64");
    expect(updateAssetFor({ os: "linux", arch: "arm64" })).toBe("gpu-turnstile-linux-arm64");
  });
});

test("renderSettingsMarkdownTable has one row per setting, in table order", () => {
  const lines = renderSettingsMarkdownTable().trimEnd().split("\n");
  expect(lines[0]).toBe("| Var | Default | Meaning |");
  expect(lines[1]).toBe("|---|---|---|");
  expect(lines.slice(2).map((l) => /^\| `([A-Z_]+)` \|/.exec(l)?.[1])).toEqual(SETTINGS.map((d) => d.key));
  expect(lines).toContain("| `UNLOAD_TIMEOUT` | `60s` | How long to wait for the LLM side (Ollama, or the LLM_KIND server) to give back its models' memory before an image job starts, and to wake again after one. |");
  expect(lines.find((l) => l.startsWith("| `OLLAMA_URL`"))).toContain("_(empty = disabled)_");
  expect(lines.find((l) => l.startsWith("| `CFG_VER`"))).toContain("_(installer-managed)_");
  expect(lines.find((l) => l.startsWith("| `LOGLEVEL`"))).toContain("LOG_LEVEL is an alias");
  for (const l of lines) expect(l.split(/(?<!\\)\|/).length).toBe(5);
});

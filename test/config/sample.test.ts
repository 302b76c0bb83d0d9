import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseEnvFile, splitLines } from "../../src/config/envfile.ts";
import { buildConfig } from "../../src/config/load.ts";
import { migrateConfig, renderSample, UNKNOWN_MARKER, type SampleOptions } from "../../src/config/sample.ts";
import { SETTINGS, type Platform } from "../../src/config/settings.ts";

const GOLDEN = join(import.meta.dir, "golden");
const UPDATE = process.env.UPDATE_GOLDEN === "1";

/** Compares with a golden file byte for byte; UPDATE_GOLDEN=1 rewrites it instead. */
function golden(name: string, actual: string): void {
  const path = join(GOLDEN, name);
  if (UPDATE || !existsSync(path)) {
    if (!UPDATE) throw new Error(`missing golden file ${path}; run with UPDATE_GOLDEN=1 and review it`);
    writeFileSync(path, actual);
  }
  expect(actual).toBe(readFileSync(path, "utf8"));
}
const input = (name: string) => readFileSync(join(GOLDEN, name), "utf8");

const LINUX: Platform = { os: "linux", arch: "x64" };
const WINDOWS: Platform = { os: "win32", arch: "x64" };
const WIN_LOG = "C:\\ProgramData\\gpu-turnstile\\gpu-turnstile.log";
const V = "v1.3.0";

/** What our loader makes of a config text (with an upstream so it validates). */
function loaded(text: string, platform: Platform = LINUX) {
  return buildConfig({ entries: parseEnvFile(text, "t.env"), file: "t.env", env: { OLLAMA_URL: "http://127.0.0.1:11435" }, platform });
}

/** Keys a text mentions, active or commented. */
function mentions(text: string): Set<string> {
  return new Set(splitLines(text).flatMap((l) => /^\s*(?:#\s*)?(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=/.exec(l)?.[1] ?? []));
}

describe("renderSample", () => {
  test("Linux golden", () => golden("sample-linux-x64.env", renderSample({ version: "v1.2.3", platform: LINUX })));

  test("Windows golden, LOG_FILE active", () => {
    golden("sample-windows-x64.env", renderSample({ version: "v1.2.3", platform: WINDOWS, logFile: WIN_LOG }));
  });

  test("first line CFG_VER, then only APP_VER (and LOG_FILE when given) active", () => {
    const linux = renderSample({ version: "v0.0.0", platform: LINUX });
    expect(linux.split("\n")[0]).toBe("CFG_VER=v0.0.0");
    expect(parseEnvFile(linux, "s").map((e) => `${e.key}=${e.value}`)).toEqual(["CFG_VER=v0.0.0", "APP_VER=stable"]);
    const win = renderSample({ version: "v0.0.0", platform: WINDOWS, logFile: WIN_LOG });
    expect(parseEnvFile(win, "s").map((e) => `${e.key}=${e.value}`)).toEqual(["CFG_VER=v0.0.0", "APP_VER=stable", `LOG_FILE=${WIN_LOG}`]);
  });

  test("mentions every setting once, each after a doc comment", () => {
    const text = renderSample({ version: V, platform: LINUX });
    const lines = text.split("\n");
    for (const d of SETTINGS) {
      const at = lines.findIndex((l) => l === `${d.key}=${d.key === "CFG_VER" ? V : "stable"}` || l.startsWith(`# ${d.key}=`));
      expect(`${d.key} at ${at}`).not.toBe(`${d.key} at -1`);
      expect(lines.filter((l) => new RegExp(`^(# )?${d.key}=`).test(l)).length).toBe(1);
      if (d.key !== "CFG_VER") expect(lines[at - 1]).toBe(`# ${d.doc}`);
    }
  });

  test("loads to the defaults without warnings, and is deterministic", () => {
    const text = renderSample({ version: V, platform: WINDOWS, logFile: WIN_LOG });
    const { config, warnings } = loaded(text, WINDOWS);
    expect(warnings).toEqual([]);
    expect(config).toMatchObject({ cfgVer: V, appVer: "stable", logFile: WIN_LOG, updateAsset: "gpu-turnstile.exe", unloadTimeoutMs: 60_000 });
    expect(renderSample({ version: V, platform: WINDOWS, logFile: WIN_LOG })).toBe(text);
  });

  test("refuses a version that is not vX.Y.Z", () => {
    expect(() => renderSample({ version: "dev", platform: LINUX })).toThrow(/vX.Y.Z/);
  });
});

describe("migrateConfig", () => {
  const opts: SampleOptions = { version: V, platform: LINUX };
  /** the key=value pairs a text sets, in order */
  const active = (text: string) => parseEnvFile(text, "t").map((e) => `${e.key}=${e.value}`);

  test("no CFG_VER (the README's example) → the sample's layout with every setting and the user's comments", () => {
    const before = input("migrate-missing.in.env");
    const r = migrateConfig(before, opts);
    expect(r).toMatchObject({ action: "migrated", previous: null, unknown: [] });
    golden("migrate-missing.out.env", r.text);
    expect(active(r.text)).toEqual([`CFG_VER=${V}`, "APP_VER=stable", "OLLAMA_URL=http://127.0.0.1:11435", "COMFY_URL=http://127.0.0.1:8189", "LOGLEVEL=debug"]);
    // the user's own comment stays above its setting, under the sample's doc line
    expect(r.text).toContain("# Ollama upstream, e.g. http://127.0.0.1:11435; empty disables the Ollama side.\n# gpu-turnstile.env\n# Ollama started with OLLAMA_HOST=127.0.0.1:11435\nOLLAMA_URL=http://127.0.0.1:11435\n");
    // every setting the sample mentions is still mentioned once
    for (const d of SETTINGS) expect(mentions(r.text).has(d.key)).toBe(true);
    expect(loaded(r.text).config).toMatchObject({ cfgVer: V, ollamaUrl: "http://127.0.0.1:11435", comfyUrl: "http://127.0.0.1:8189", logLevel: "debug" });
    // and running the same install again changes nothing
    expect(migrateConfig(r.text, opts)).toMatchObject({ action: "unchanged", text: r.text });
  });

  test("older CFG_VER → rewritten into this layout; every value kept, aliases and export included", () => {
    const before = input("migrate-older.in.env");
    const r = migrateConfig(before, opts);
    expect(r).toMatchObject({ action: "migrated", previous: "v1.1.0" });
    golden("migrate-older.out.env", r.text);
    expect(r.text.split("\n")[0]).toBe("CFG_VER=v1.3.0");
    const { config, warnings } = loaded(r.text);
    expect(warnings).toEqual([]);
    expect(config).toMatchObject({ cfgVer: V, unloadTimeoutMs: 90_000, logLevel: "info", autoUpdate: false, comfyUrl: "http://127.0.0.1:8189" });
    // what was set before is set after, value for value (CFG_VER aside)
    const settings = (t: string) => active(t).filter((l) => !l.startsWith("CFG_VER="));
    for (const line of settings(before)) expect(settings(r.text)).toContain(line);
  });

  test("unknown keys are kept in a marked block at the end, with a guess for a typo", () => {
    const r = migrateConfig("# mine\nOLLAMA_URL=http://x:1\n# for the next version\nFUTURE_KNOB=7\nLOGLEVLE=debug\n", opts);
    expect(r.unknown).toEqual([{ key: "FUTURE_KNOB", line: 4 }, { key: "LOGLEVLE", line: 5, guess: "LOGLEVEL" }]);
    const tail = r.text.slice(r.text.indexOf(UNKNOWN_MARKER));
    expect(tail).toBe(`${UNKNOWN_MARKER}\n# A newer version's setting, or a typo: check the spelling against the settings above.\n# for the next version\nFUTURE_KNOB=7\nLOGLEVLE=debug\n`);
    expect(r.text).toContain("\n# mine\nOLLAMA_URL=http://x:1\n");
    // a second migration (an even newer version) keeps them once, still at the end
    const again = migrateConfig(r.text, { ...opts, version: "v1.4.0" });
    expect(again.text.split(UNKNOWN_MARKER).length).toBe(2);
    expect(again.text.endsWith("FUTURE_KNOB=7\nLOGLEVLE=debug\n")).toBe(true);
  });

  test("same CFG_VER → unchanged", () => {
    const before = input("migrate-same.in.env");
    expect(migrateConfig(before, opts)).toEqual({ action: "unchanged", text: before, previous: V, unknown: [] });
  });

  test("newer CFG_VER (a downgrade, or a dev build installing) → unchanged", () => {
    const before = input("migrate-same.in.env");
    expect(migrateConfig(before, { ...opts, version: "v1.2.9" }).action).toBe("unchanged");
    expect(migrateConfig(before, { ...opts, version: "v0.0.0" }).action).toBe("unchanged");
  });

  test("a CFG_VER that is not a version counts as missing", () => {
    for (const bad of ["CFG_VER=\n", "CFG_VER=1.2.0\n", "CFG_VER=latest\n", "# CFG_VER=v1.0.0\n", ""]) {
      expect(migrateConfig(bad, opts)).toMatchObject({ action: "migrated", previous: null, text: renderSample(opts) });
    }
  });

  test("text that does not parse is refused, naming the file and line", () => {
    expect(() => migrateConfig("OLLAMA_URL=http://x:1\nJOB_TIMEOUT=5m # long\n", opts, "/etc/gt.env")).toThrow("/etc/gt.env:2:");
  });

  test("CRLF file with BOM and quoted values: CRLF and BOM kept, values kept", () => {
    const before = input("migrate-crlf.in.env");
    const r = migrateConfig(before, { version: V, platform: WINDOWS, logFile: WIN_LOG });
    expect(r).toMatchObject({ action: "migrated", previous: "v1.2.9" });
    golden("migrate-crlf.out.env", r.text);
    expect(r.text.startsWith("\ufeffCFG_VER=v1.3.0\r\n")).toBe(true);
    expect(r.text.replace(/\r\n/g, "")).not.toContain("\n");
    expect(loaded(r.text, WINDOWS).config).toMatchObject({ cfgVer: V, logFile: WIN_LOG, ollamaUrl: "http://127.0.0.1:11435", warmModel: "llama3 8b" });
  });

  test("an older file without LOG_FILE gets the installer's LOG_FILE active", () => {
    const r = migrateConfig("CFG_VER=v1.0.0\nOLLAMA_URL=http://x:1\n", { version: V, platform: WINDOWS, logFile: WIN_LOG });
    expect(r.text).toContain(`\nLOG_FILE=${WIN_LOG}\n`);
  });

  test("an older sample with nothing changed becomes this version's sample", () => {
    const full = renderSample({ version: "v1.0.0", platform: LINUX });
    expect(migrateConfig(full, opts).text).toBe(renderSample(opts));
  });
});

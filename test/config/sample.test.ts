import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseEnvFile, splitLines } from "../../src/config/envfile.ts";
import { buildConfig } from "../../src/config/load.ts";
import { migrateConfig, renderSample, type SampleOptions } from "../../src/config/sample.ts";
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

  test("older CFG_VER → missing settings appended, CFG_VER bumped in place, every other line untouched", () => {
    const before = input("migrate-older.in.env");
    const r = migrateConfig(before, opts);
    expect(r.action).toBe("appended");
    expect(r.previous).toBe("v1.1.0");
    expect(r.backup).toBeUndefined();
    golden("migrate-older.out.env", r.text);

    const oldLines = before.split("\n");
    const newLines = r.text.split("\n");
    expect(newLines[0]).toBe("CFG_VER=v1.3.0");
    expect(newLines.slice(1, oldLines.length - 1)).toEqual(oldLines.slice(1, -1));
    // mentioned actively, commented, indented-commented, via alias or with export: not appended again
    for (const k of ["OLLAMA_URL", "COMFY_URL", "UNLOAD_TIMEOUT", "LOGLEVEL", "JOB_TIMEOUT", "LLM_BUSY_MODE", "WARM_MODEL", "AUTO_UPDATE", "CFG_VER"]) {
      expect(r.added).not.toContain(k);
    }
    expect(r.added[0]).toBe("APP_VER");
    expect(new Set([...mentions(before), ...r.added])).toEqual(new Set([...mentions(r.text)]));
    for (const d of SETTINGS) expect(mentions(r.text).has(d.key) || (d.aliases ?? []).some((a) => mentions(r.text).has(a))).toBe(true);

    // the user's values survive and the result loads cleanly
    const { config, warnings } = loaded(r.text);
    expect(warnings).toEqual([]);
    expect(config).toMatchObject({ cfgVer: V, unloadTimeoutMs: 90_000, logLevel: "info", autoUpdate: false, comfyUrl: "http://127.0.0.1:8189" });

    // and running the same install again changes nothing
    expect(migrateConfig(r.text, opts)).toMatchObject({ action: "unchanged", text: r.text });
  });

  test("same CFG_VER → unchanged", () => {
    const before = input("migrate-same.in.env");
    expect(migrateConfig(before, opts)).toEqual({ action: "unchanged", text: before, added: [], previous: V });
  });

  test("newer CFG_VER (a downgrade, or a dev build installing) → unchanged", () => {
    const before = input("migrate-same.in.env");
    expect(migrateConfig(before, { ...opts, version: "v1.2.9" }).action).toBe("unchanged");
    expect(migrateConfig(before, { ...opts, version: "v0.0.0" }).action).toBe("unchanged");
  });

  test("missing CFG_VER → replaced by a fresh sample, old text as backup", () => {
    const before = input("migrate-missing.in.env");
    const r = migrateConfig(before, opts);
    expect(r.action).toBe("replaced");
    expect(r.backup).toBe(before);
    expect(r.text).toBe(renderSample(opts));
    golden("migrate-missing.out.env", r.text);
    golden("migrate-missing.out.env.bak", r.backup ?? "");
  });

  test("a CFG_VER that is not a version counts as missing", () => {
    for (const bad of ["CFG_VER=\n", "CFG_VER=1.2.0\n", "CFG_VER=latest\n", "# CFG_VER=v1.0.0\n", ""]) {
      expect(migrateConfig(bad, opts)).toMatchObject({ action: "replaced", backup: bad });
    }
  });

  test("CRLF file with BOM, quoted CFG_VER and no final line end: CRLF kept, BOM and quotes kept", () => {
    const before = input("migrate-crlf.in.env");
    const r = migrateConfig(before, { version: V, platform: WINDOWS, logFile: WIN_LOG });
    expect(r.action).toBe("appended");
    expect(r.previous).toBe("v1.2.9");
    golden("migrate-crlf.out.env", r.text);
    expect(r.text.startsWith('\ufeffCFG_VER="v1.3.0"\r\n')).toBe(true);
    expect(r.text.replace(/\r\n/g, "")).not.toContain("\n");
    expect(r.text.startsWith(before.replace("v1.2.9", "v1.3.0"))).toBe(true);
    expect(r.added).not.toContain("LOG_FILE");
    expect(r.added).not.toContain("APP_VER");
    expect(loaded(r.text, WINDOWS).config).toMatchObject({ cfgVer: V, logFile: WIN_LOG });
  });

  test("a replaced CRLF file gets a CRLF sample", () => {
    const r = migrateConfig("OLLAMA_URL=http://x:1\r\n", opts);
    expect(r.text).toBe(renderSample(opts).replace(/\n/g, "\r\n"));
  });

  test("older file that already mentions everything: only CFG_VER changes", () => {
    const full = renderSample({ version: "v1.0.0", platform: LINUX });
    const r = migrateConfig(full, opts);
    expect(r).toMatchObject({ action: "appended", added: [] });
    expect(r.text).toBe(full.replace("CFG_VER=v1.0.0", "CFG_VER=v1.3.0"));
  });

  test("appended LOG_FILE is active when the installer passes one", () => {
    const r = migrateConfig("CFG_VER=v1.0.0\nOLLAMA_URL=http://x:1\n", { version: V, platform: WINDOWS, logFile: WIN_LOG });
    expect(r.text).toContain(`\nLOG_FILE=${WIN_LOG}\n`);
    expect(r.text).toContain("\n\n# added by gpu-turnstile v1.3.0\n\n# Version to run");
  });
});

/**
 * The config half of install-service, shared by Linux and Windows. planConfig decides, reading
 * only, what the installed env file must become; applyConfig writes it. The rules (SPEC.md,
 * "Config on install"):
 *
 * - A file given with --config is what the user wants installed: when it differs from the
 *   installed one it replaces it. Without --config an installed file is kept; with none installed,
 *   the one found by the normal lookup is copied, else a sample is written.
 * - Whatever is installed is brought to this version's CFG_VER by migration, which never loses a
 *   setting (src/config/sample.ts). On Windows it must also name a LOG_FILE.
 * - The old content goes to `<file>.bak` only when the content changed.
 * - A config the service could not start with stops the install before anything is registered,
 *   naming the file to fix and what to fix in it.
 */
import { parseEnvFile, formatEnvValue } from "../config/envfile.ts";
import { redactCredentials } from "../config/redact.ts";
import type { Platform } from "./platform.ts";
import type { Report, ReportLine } from "./report.ts";

export interface SampleOptions {
  version: string;
  platform: "linux" | "win32";
  logFile?: string;
}

export interface MigrateOutcome {
  action: "unchanged" | "migrated";
  text: string;
  /** keys this version does not know, kept in a marked block at the end */
  unknown: { key: string; line: number; guess?: string }[];
}

/** src/config provides these; injected so this module can be tested on its own. */
export interface ConfigOps {
  renderSample(opts: SampleOptions): string;
  /** throws (naming `file` and the line) when the text does not parse */
  migrateConfig(existingText: string, opts: SampleOptions, file: string): MigrateOutcome;
  /** why the service could not start with this file alone (one line each, naming file:line and key); [] = it can */
  check(text: string, file: string, platform: "linux" | "win32"): string[];
}

export interface PlaceConfigOptions {
  /** where the service reads its config (host path) */
  target: string;
  /** the user's config (--config, or found by the normal lookup); null = none */
  source: string | null;
  /** `source` was named with --config: install it even over an existing file */
  given: boolean;
  version: string;
  platform: "linux" | "win32";
  /** Windows: the LOG_FILE the config must name (kept when it already names one) */
  logFile?: string;
  ops: ConfigOps;
}

export interface ConfigPlan {
  target: string;
  /** the text to write at `target`; null = it is right as it is */
  write: string | null;
  /** the old content for `<target>.bak` (only when it changes) */
  backup: string | null;
  notes: ReportLine[];
  /** why the service could not start; non-empty stops the install before registration */
  problems: string[];
  /** the file the user must edit to fix `problems` */
  fix: string;
  /** the planned write may happen even with problems: it is the file the user must edit, and loses nothing */
  writeOnFail: boolean;
}

export async function planConfig(p: Platform, o: PlaceConfigOptions): Promise<ConfigPlan> {
  const sampleOpts: SampleOptions = { version: o.version, platform: o.platform, ...(o.logFile ? { logFile: o.logFile } : {}) };
  const installed = await p.readText(o.target);
  const plan: ConfigPlan = { target: o.target, write: null, backup: null, notes: [], problems: [], fix: o.target, writeOnFail: true };
  const info = (text: string) => plan.notes.push({ level: "info", text });
  const withLog = (text: string) => (o.logFile ? ensureLogFile(text, o.logFile) : text);
  const other = o.source !== null && !samePath(o.source, o.target, p.os) ? o.source : null;
  const sourceText = other !== null ? await p.readText(other) : null;

  // Migrates `text` (read from `file`) into what would be installed; null when it does not parse.
  const prepare = (text: string, file: string): string | null => {
    let m: MigrateOutcome;
    try {
      m = o.ops.migrateConfig(text, sampleOpts, file);
    } catch (e) {
      plan.problems.push((e as Error).message);
      plan.fix = file;
      return null;
    }
    if (m.unknown.length > 0) {
      const named = m.unknown.map((u) => `${u.key} (line ${u.line}${u.guess ? `, did you mean ${u.guess}?` : ""})`);
      plan.notes.push({
        level: "warn",
        text: `config: ${file} sets ${named.join(", ")}, which this version does not know: kept in a marked block at the end of ${o.target}, and ignored`,
      });
    }
    if (m.action === "migrated") info(`config: ${file} brought to ${o.version}: every setting kept, written into this version's layout`);
    return withLog(m.text);
  };

  if (other !== null && sourceText !== null && (o.given || installed === null)) {
    // The user's own file: its problems are named with its own path and lines.
    plan.writeOnFail = false;
    plan.problems = o.ops.check(sourceText, other, o.platform);
    plan.fix = other;
    if (plan.problems.length > 0) return plan;
    const text = prepare(sourceText, other);
    if (text === null) return plan;
    if (installed === null) {
      plan.write = text;
      info(`config: installed ${other} as ${o.target}`);
    } else if (text === installed) {
      info(`config: ${o.target} already matches ${other}`);
    } else {
      plan.write = text;
      plan.backup = installed;
      info(`config: ${o.target} replaced by ${other} (they differed); the previous one is kept as ${o.target}.bak`);
    }
    return plan;
  }

  if (installed !== null) {
    if (other !== null && sourceText !== null && sourceText !== installed) {
      info(`config: ${other} not used: ${o.target} exists (install it over that one with --config ${other})`);
    }
    const text = prepare(installed, o.target);
    if (text === null) {
      plan.writeOnFail = false;
      return plan;
    }
    if (text !== installed) {
      plan.write = text;
      plan.backup = installed;
      if (o.logFile && withLog(installed) !== installed) info(`config: LOG_FILE=${o.logFile} added (a service has no console to log to)`);
      info(`config: the previous ${o.target} is kept as ${o.target}.bak`);
    } else {
      info(`config: ${o.target} is up to date`);
    }
    plan.problems = o.ops.check(text, o.target, o.platform);
    return plan;
  }

  plan.write = o.ops.renderSample(sampleOpts);
  info(`config: wrote a sample to ${o.target}`);
  plan.problems = [`${o.target} is a fresh sample: set OLLAMA_URL and/or COMFY_URL there, e.g. OLLAMA_URL=http://127.0.0.1:11435`];
  return plan;
}

/** Writes what the plan says, `<target>.bak` first; `mode` for both (Linux: 0600, the file may hold credentials). */
export async function applyConfig(p: Platform, plan: ConfigPlan, report: Report, mode?: number): Promise<void> {
  for (const n of plan.notes) {
    if (n.level === "warn") report.warn(n.text);
    else report.info(n.text);
  }
  const bak = `${plan.target}.bak`;
  if (plan.backup !== null) await p.writeText(bak, plan.backup, mode);
  if (plan.write !== null) await p.writeText(plan.target, plan.write, mode);
  if (mode === undefined) return;
  // Installs before this one wrote 0644: tighten what is there without changing its content.
  for (const path of [plan.target, bak]) {
    const st = await p.stat(path);
    const text = st && (st.mode & 0o777) !== mode ? await p.readText(path) : null;
    if (text === null) continue;
    await p.writeText(path, text, mode);
    report.info(`config: ${path} is now mode ${mode.toString(8).padStart(4, "0")} (it may hold credentials)`);
  }
}

/** The lines an install ends with when the config would not let the service start. */
export function reportProblems(plan: ConfigPlan, report: Report): void {
  for (const problem of plan.problems) report.error(`config: ${redactCredentials(problem)}`);
  report.error(`fix ${plan.fix}, then run install-service again (nothing was registered or started)`);
}

/** Checks a config used where it is (--no-copy); `path` null = none found. */
export async function checkInPlace(p: Platform, path: string | null, ops: ConfigOps, platform: "linux" | "win32"): Promise<ConfigPlan> {
  const plan: ConfigPlan = { target: path ?? "", write: null, backup: null, notes: [], problems: [], fix: path ?? "", writeOnFail: false };
  const text = path === null ? null : await p.readText(path);
  if (text === null) {
    plan.problems = [`no config file${path ? ` at ${path}` : ""}: the service needs OLLAMA_URL and/or COMFY_URL`];
    plan.fix = path ?? "a gpu-turnstile.env (pass it with --config)";
  } else {
    plan.problems = ops.check(text, path!, platform);
  }
  return plan;
}

/**
 * Appends `LOG_FILE=<path>` unless the text already sets a non-empty LOG_FILE. Appending rather
 * than editing keeps every existing line byte-identical; a later line wins, so an earlier
 * `LOG_FILE=` (empty) line is overridden. Text that does not parse is left alone: the service
 * will report the error itself, and we must not make it worse.
 */
export function ensureLogFile(text: string, logFile: string): string {
  let entries;
  try {
    entries = parseEnvFile(text, "config");
  } catch {
    return text;
  }
  const set = entries.filter((e) => e.key === "LOG_FILE").at(-1);
  if (set && set.value !== "") return text;
  const eol = text.includes("\r\n") ? "\r\n" : "\n";
  const sep = text === "" || text.endsWith("\n") ? "" : eol;
  return `${text}${sep}LOG_FILE=${formatEnvValue(logFile)}${eol}`;
}

function samePath(a: string, b: string, os: "linux" | "win32"): boolean {
  return os === "win32" ? a.replace(/\//g, "\\").toLowerCase() === b.replace(/\//g, "\\").toLowerCase() : a === b;
}

/**
 * The sample config an install writes, and the install-time migration of an existing one.
 *
 * The sample mentions every setting: a comment line with its doc, then `# KEY=default`, so a user
 * uncomments what they change. Active are only CFG_VER (first line), APP_VER and — when the
 * caller passes one, as the Windows installer does — LOG_FILE.
 *
 * Migration (a file without a valid CFG_VER, or an older one) never loses a setting: the file is
 * rewritten into this version's sample layout, and every setting the user set is written active in
 * its own block, under the sample's doc comment and the user's own comment lines that stood right
 * above it. Keys this version does not know are kept in a marked block at the end. Keeping the old
 * text as `<file>.bak` is the caller's job (it knows whether the content changed).
 */
import { parseEnvFile, splitLines, formatEnvValue, type EnvEntry } from "./envfile.ts";
import { defaultText, knownKeys, SETTINGS, settingForKey, type Platform, type SettingDef } from "./settings.ts";
import { closestKey } from "./suggest.ts";
import { compareVersions, parseVersion } from "./version.ts";

export interface SampleOptions {
  /** the installer's own version, vX.Y.Z (a dev build passes v0.0.0) */
  version: string;
  platform: Platform;
  /** written as an active LOG_FILE line (the Windows service has no console) */
  logFile?: string;
}

const HEADER = [
  "# gpu-turnstile configuration: one KEY=VALUE per line. Environment variables override this file.",
  "# Uncomment a line to change a setting. Values are taken literally; a comment needs its own line.",
  "# CFG_VER above is maintained by --install-service: leave it as it is.",
];

/** APP_VER first (it is active), CFG_VER not at all (it is the header). */
function sampleOrder(): SettingDef[] {
  const appVer = SETTINGS.filter((d) => d.key === "APP_VER");
  return [...appVer, ...SETTINGS.filter((d) => d.key !== "APP_VER" && d.key !== "CFG_VER")];
}

/** What the user set for one key: its value and the comment lines that stood right above it. */
interface UserSetting {
  key: string;
  value: string;
  comments: string[];
}

function block(def: SettingDef, opts: SampleOptions, user: readonly UserSetting[] = []): string[] {
  const doc = `# ${def.doc}`;
  if (user.length > 0) return [doc, ...user.flatMap((u) => [...u.comments, `${u.key}=${formatEnvValue(u.value)}`])];
  const value = defaultText(def, opts.platform);
  if (def.key === "APP_VER") return [doc, `APP_VER=${formatEnvValue(value)}`];
  if (def.key === "LOG_FILE" && opts.logFile !== undefined && opts.logFile !== "") {
    return [doc, `LOG_FILE=${formatEnvValue(opts.logFile)}`];
  }
  return [doc, `# ${def.key}=${value}`];
}

function layout(opts: SampleOptions, user: ReadonlyMap<string, UserSetting[]> = new Map()): string[] {
  const lines = [`CFG_VER=${opts.version}`, ...HEADER];
  for (const def of sampleOrder()) lines.push("", ...block(def, opts, user.get(def.key)));
  return lines;
}

function checkVersion(version: string): void {
  if (!parseVersion(version)) throw new RangeError(`installer version must be vX.Y.Z, got ${JSON.stringify(version)}`);
}

/** A fresh sample config, LF line ends. Deterministic for the same options. */
export function renderSample(opts: SampleOptions): string {
  checkVersion(opts.version);
  return `${layout(opts).join("\n")}\n`;
}

export interface MigrateResult {
  /** unchanged: CFG_VER is this version or newer; migrated: rewritten into this version's layout */
  action: "unchanged" | "migrated";
  text: string;
  /** the file's valid CFG_VER before migration, or null */
  previous: string | null;
  /** keys kept in the unknown block at the end, each with a guess when one is close */
  unknown: { key: string; line: number; guess?: string }[];
}

/** The start of the block for keys this version does not know. */
export const UNKNOWN_MARKER = "# ---- settings gpu-turnstile does not know (kept from your previous file; ignored) ----";
const UNKNOWN_NOTE = "# A newer version's setting, or a typo: check the spelling against the settings above.";

/** `# KEY=…`: a commented-out setting (the sample writes its own). */
const MENTION = /^\s*#\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=/;

/**
 * Brings a config to this version. Throws EnvFileError (naming `file` and the line) for text that
 * does not parse: a file we cannot read must not be rewritten.
 */
export function migrateConfig(existingText: string, opts: SampleOptions, file = "config"): MigrateResult {
  checkVersion(opts.version);
  const entries = parseEnvFile(existingText, file);
  const cfgVer = entries.filter((e) => e.key === "CFG_VER").at(-1)?.value ?? "";
  const previous = parseVersion(cfgVer) ? cfgVer : null;
  if (previous !== null && compareVersions(previous, opts.version) >= 0) {
    return { action: "unchanged", text: existingText, previous, unknown: [] };
  }

  const lines = splitLines(existingText);
  const sampleLines = new Set([...HEADER, ...SETTINGS.map((d) => `# ${d.doc}`), UNKNOWN_MARKER, UNKNOWN_NOTE]);
  /** The user's comment lines directly above line `n` (1-based), without the sample's own. */
  const commentsAbove = (n: number): string[] => {
    const out: string[] = [];
    for (let i = n - 2; i >= 0; i--) {
      const l = (lines[i] ?? "").trim();
      if (!l.startsWith("#")) break;
      const mention = MENTION.exec(l)?.[1];
      if (sampleLines.has(l) || (mention !== undefined && settingForKey(mention))) continue;
      out.unshift(l);
    }
    return out;
  };

  // Last one per key wins, as when loading; an empty value means unset, so the sample line stays.
  const last = new Map<string, EnvEntry>();
  for (const e of entries) if (e.key !== "CFG_VER") last.set(e.key, e);
  const known = new Map<string, UserSetting[]>();
  const unknown: UserSetting[] = [];
  const unknownInfo: MigrateResult["unknown"] = [];
  for (const e of last.values()) {
    const def = settingForKey(e.key);
    if (def && e.value === "") continue;
    const u = { key: e.key, value: e.value, comments: commentsAbove(e.line) };
    if (!def) {
      unknown.push(u);
      const guess = closestKey(e.key, knownKeys());
      unknownInfo.push({ key: e.key, line: e.line, ...(guess ? { guess } : {}) });
      continue;
    }
    // The key before its aliases, in the order the definition lists them.
    const list = [...(known.get(def.key) ?? []), u];
    const rank = [def.key, ...(def.aliases ?? [])];
    known.set(def.key, list.sort((a, b) => rank.indexOf(a.key) - rank.indexOf(b.key)));
  }

  const out = layout(opts, known);
  if (unknown.length > 0) {
    out.push("", UNKNOWN_MARKER, UNKNOWN_NOTE);
    for (const u of unknown) out.push(...u.comments, `${u.key}=${formatEnvValue(u.value)}`);
  }
  const eol = existingText.includes("\r\n") ? "\r\n" : "\n";
  const bom = existingText.startsWith("\ufeff") ? "\ufeff" : "";
  return { action: "migrated", text: `${bom}${out.join(eol)}${eol}`, previous, unknown: unknownInfo };
}

/**
 * The sample config an install writes, and the install-time migration of an existing one.
 *
 * The sample mentions every setting: a comment line with its doc, then `# KEY=default`, so a user
 * uncomments what they change. Active are only CFG_VER (first line), APP_VER and — when the
 * caller passes one, as the Windows installer does — LOG_FILE.
 *
 * Migration never rewrites what a user wrote: an older CFG_VER gets its value bumped in place and
 * the settings the file does not mention (actively or in a comment) appended; every other byte
 * stays, line ends included. A file without a valid CFG_VER is replaced by a fresh sample and its
 * old text handed back for `<file>.bak`.
 */
import { formatEnvValue, splitLines } from "./envfile.ts";
import { defaultText, SETTINGS, type Platform, type SettingDef } from "./settings.ts";
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

function block(def: SettingDef, opts: SampleOptions): string[] {
  const value = defaultText(def, opts.platform);
  const doc = `# ${def.doc}`;
  if (def.key === "APP_VER") return [doc, `APP_VER=${formatEnvValue(value)}`];
  if (def.key === "LOG_FILE" && opts.logFile !== undefined && opts.logFile !== "") {
    return [doc, `LOG_FILE=${formatEnvValue(opts.logFile)}`];
  }
  return [doc, `# ${def.key}=${value}`];
}

function blocks(defs: readonly SettingDef[], opts: SampleOptions): string[] {
  return defs.flatMap((d, i) => (i === 0 ? block(d, opts) : ["", ...block(d, opts)]));
}

function checkVersion(version: string): void {
  if (!parseVersion(version)) throw new RangeError(`installer version must be vX.Y.Z, got ${JSON.stringify(version)}`);
}

/** A fresh sample config, LF line ends. Deterministic for the same options. */
export function renderSample(opts: SampleOptions): string {
  checkVersion(opts.version);
  const lines = [`CFG_VER=${opts.version}`, ...HEADER, "", ...blocks(sampleOrder(), opts)];
  return `${lines.join("\n")}\n`;
}

export interface MigrateResult {
  action: "unchanged" | "appended" | "replaced";
  text: string;
  /** the old text, for `<file>.bak` (replaced only) */
  backup?: string;
  /** keys appended (empty unless appended) */
  added: string[];
  /** the file's valid CFG_VER before migration, or null */
  previous: string | null;
}

/** `KEY=` at the start of a line, active or commented out. */
const MENTION = /^\s*(?:#\s*)?(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=/;
/** An active CFG_VER line: prefix, optional quote, value, closing quote, trailing blanks. */
const CFG_VER_LINE = /^(\s*(?:export\s+)?CFG_VER\s*=\s*)(["']?)(.*?)\2(\s*)$/;

export function migrateConfig(existingText: string, opts: SampleOptions): MigrateResult {
  checkVersion(opts.version);
  const eol = existingText.includes("\r\n") ? "\r\n" : "\n";
  // Keep each line's own terminator so untouched lines come back byte for byte.
  const pieces = existingText === "" ? [] : existingText.split(/(?<=\n)/);

  let cfgIndex = -1;
  let previous: string | null = null;
  pieces.forEach((piece, i) => {
    const m = CFG_VER_LINE.exec(stripEol(piece));
    if (m) {
      cfgIndex = i;
      previous = m[3] ?? "";
    }
  });

  if (cfgIndex < 0 || previous === null || !parseVersion(previous)) {
    const fresh = renderSample(opts);
    return {
      action: "replaced",
      text: eol === "\r\n" ? fresh.replace(/\n/g, "\r\n") : fresh,
      backup: existingText,
      added: [],
      previous: null,
    };
  }
  const prev: string = previous;
  if (compareVersions(prev, opts.version) >= 0) return { action: "unchanged", text: existingText, added: [], previous: prev };

  const old = pieces[cfgIndex] ?? "";
  const body = stripEol(old);
  pieces[cfgIndex] = body.replace(CFG_VER_LINE, (_all, pre: string, q: string, _v: string, post: string) => `${pre}${q}${opts.version}${q}${post}`) + old.slice(body.length);

  const mentioned = new Set(splitLines(existingText).flatMap((l) => MENTION.exec(l)?.[1] ?? []));
  const missing = sampleOrder().filter((d) => ![d.key, ...(d.aliases ?? [])].some((k) => mentioned.has(k)));
  let text = pieces.join("");
  if (missing.length > 0) {
    if (text !== "" && !text.endsWith("\n")) text += eol;
    const lastLine = splitLines(text).at(-1) ?? "";
    const lead = lastLine.trim() === "" ? [] : [""];
    const added = [...lead, `# added by gpu-turnstile ${opts.version}`, "", ...blocks(missing, opts)];
    text += added.map((l) => l + eol).join("");
  }
  return { action: "appended", text, added: missing.map((d) => d.key), previous: prev };
}

function stripEol(piece: string): string {
  return piece.replace(/\r?\n$/, "");
}

/**
 * The config half of install-service, shared by Linux and Windows: make sure the installed env
 * file exists (copied from the user's, or a fresh sample), bring it to this version's CFG_VER,
 * and on Windows make sure it names a LOG_FILE. Existing lines are never edited: migration only
 * appends, and a file that must be replaced is kept as `<file>.bak` first.
 */
import { parseEnvFile, formatEnvValue } from "../config/envfile.ts";
import type { Platform } from "./platform.ts";
import type { Report } from "./report.ts";

export interface SampleOptions {
  version: string;
  platform: "linux" | "win32";
  logFile?: string;
}

export type MigrateAction = "unchanged" | "appended" | "replaced";

/** src/config/sample.ts provides these; injected so this module can be tested on its own. */
export interface ConfigOps {
  renderSample(opts: SampleOptions): string;
  migrateConfig(existingText: string, opts: SampleOptions): { action: MigrateAction; text: string; backup?: string };
}

export interface PlaceConfigOptions {
  /** where the service reads its config (host path) */
  target: string;
  /** the user's config to copy when `target` does not exist yet; null = none */
  source: string | null;
  version: string;
  platform: "linux" | "win32";
  /** Windows: the LOG_FILE the config must name (kept when it already names one) */
  logFile?: string;
  mode?: number;
  ops: ConfigOps;
}

export interface PlaceConfigResult {
  /**
   * The installed config is a fresh sample with nothing configured: starting the service would
   * only fail ("neither OLLAMA_URL nor COMFY_URL is set"), so the installer registers it but
   * leaves it stopped and says what to edit.
   */
  freshSample: boolean;
}

export async function placeConfig(p: Platform, o: PlaceConfigOptions, report: Report): Promise<PlaceConfigResult> {
  const sampleOpts: SampleOptions = { version: o.version, platform: o.platform, ...(o.logFile ? { logFile: o.logFile } : {}) };
  let text = await p.readText(o.target);
  let freshSample = false;
  let dirty = false;

  if (text === null && o.source !== null && !samePath(o.source, o.target, p.os)) {
    text = await p.readText(o.source);
    if (text !== null) {
      report.info(`config: copied ${o.source} to ${o.target}`);
      dirty = true;
    }
  }
  if (text === null) {
    text = o.ops.renderSample(sampleOpts);
    freshSample = true;
    dirty = true;
    report.info(`config: wrote a sample to ${o.target}`);
  } else {
    const m = o.ops.migrateConfig(text, sampleOpts);
    if (m.action === "appended") {
      report.info(`config: ${o.target} brought to ${o.version}: settings this version added were appended (commented out)`);
      text = m.text;
      dirty = true;
    } else if (m.action === "replaced") {
      const bak = `${o.target}.bak`;
      await p.writeText(bak, m.backup ?? text, o.mode);
      report.warn(
        `config: ${o.target} had no CFG_VER line, so it was replaced by a fresh sample; ` +
          `the old content is in ${bak} — copy your settings back from there`,
      );
      text = m.text;
      freshSample = true;
      dirty = true;
    } else if (!dirty) {
      report.info(`config: ${o.target} is up to date`);
    }
  }

  if (o.logFile) {
    const withLog = ensureLogFile(text, o.logFile);
    if (withLog !== text) {
      text = withLog;
      dirty = true;
      report.info(`config: LOG_FILE=${o.logFile} added (a service has no console to log to)`);
    }
  }

  if (dirty) await p.writeText(o.target, text, o.mode);
  return { freshSample };
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

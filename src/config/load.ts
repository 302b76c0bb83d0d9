/**
 * Finds, reads and validates the configuration.
 *
 * File lookup: the `-config` flag (must exist), else GPU_TURNSTILE_CONFIG (must exist if set),
 * else `gpu-turnstile.env` beside the executable (may be missing). Per setting the process
 * environment beats the file, which beats the default. An empty value counts as unset — in the
 * environment as in the file — so `LISTEN_OLLAMA=` means the default, like Go's os.Getenv idiom the
 * SPEC was written for. Within one source a key beats its alias (LOGLEVEL beats LOG_LEVEL).
 *
 * An unknown key in the file is a warning, not an error: after a downgrade an older binary must
 * still start with the newer config that mentions settings it does not know yet. Unknown keys in
 * the process environment are ignored silently: the environment holds everything else too.
 *
 * Every problem becomes a ConfigError whose message is one line naming the key and, for a value
 * from the file, file:line.
 */
import { FileTooLargeError, readTextBounded } from "./read-bounded.ts";
import { posix, win32 } from "node:path";
import { formatDuration } from "./duration.ts";
import { EnvFileError, parseEnvFile, type EnvEntry } from "./envfile.ts";
import { parseListen } from "./listen.ts";
import { redactCredentials, redactUrl } from "./redact.ts";
import { parseSetting, type SettingValue } from "./schema.ts";
import { currentPlatform, defaultText, knownKeys, SETTINGS, settingForKey, type Platform, type SettingDef } from "./settings.ts";
import { closestKey } from "./suggest.ts";
import type { Config } from "./types.ts";

export const CONFIG_FILE_NAME = "gpu-turnstile.env";
export const CONFIG_ENV_VAR = "GPU_TURNSTILE_CONFIG";

export type Env = Readonly<Record<string, string | undefined>>;

/** Returns the file's text, or null when it does not exist; throws for any other failure. */
export type ReadFile = (path: string) => string | null;

export interface LoadOptions {
  /** from `-config <path>` / `--config <path>` */
  argvConfigPath?: string;
  env: Env;
  /** the running executable; the fallback config file sits beside it */
  execPath: string;
  readFile?: ReadFile;
  platform?: Platform;
}

export interface ConfigSource {
  /** how the file was chosen */
  via: "flag" | "env" | "exe-dir";
  path: string;
  /** false only for the optional file beside the executable */
  found: boolean;
}

export interface LoadResult {
  config: Config;
  source: ConfigSource;
  /** one line each, ready to log */
  warnings: string[];
  /** Where each setting's value came from, by key: `file:LINE`, `environment (KEY)` or `default`. */
  origins: Record<string, string>;
}

export class ConfigError extends Error {
  override name = "ConfigError";
  /** every problem found, each one line without the "config error: " prefix; message holds the first */
  readonly problems: readonly string[];
  constructor(problems: readonly string[]) {
    // A problem may quote a value: a URL's credentials never reach the output.
    const shown = problems.map(redactCredentials);
    super(`config error: ${shown[0] ?? "invalid configuration"}`);
    this.problems = shown;
  }
}

/** A config file is a few KiB; one larger than this is refused, named, before it is parsed. */
export const CONFIG_FILE_MAX_BYTES = 1 << 20;

export function defaultReadFile(path: string): string | null {
  try {
    return readTextBounded(path, CONFIG_FILE_MAX_BYTES);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
}

export function loadConfig(opts: LoadOptions): LoadResult {
  const platform = opts.platform ?? currentPlatform();
  const readFile = opts.readFile ?? defaultReadFile;
  const source = chooseFile(opts, platform);

  let text: string | null;
  try {
    text = readFile(source.path);
  } catch (e) {
    if (e instanceof FileTooLargeError) throw new ConfigError([`config file ${e.message}`]);
    throw new ConfigError([`${source.path}: cannot read config file: ${(e as Error).message}`]);
  }
  if (text === null) {
    if (source.via === "flag") throw new ConfigError([`${source.path}: config file not found (given with -config)`]);
    if (source.via === "env") throw new ConfigError([`${source.path}: config file not found (named by ${CONFIG_ENV_VAR})`]);
  }
  source.found = text !== null;

  let entries: EnvEntry[] = [];
  if (text !== null) {
    try {
      entries = parseEnvFile(text, source.path);
    } catch (e) {
      if (e instanceof EnvFileError) throw new ConfigError([e.message]);
      throw e;
    }
  }
  const { config, warnings, origins } = buildConfig({
    entries,
    file: source.found ? source.path : null,
    lookedFor: source.path,
    env: opts.env,
    platform,
  });
  return { config, source, warnings, origins };
}

/** The file the lookup picks (flag, environment variable, beside the executable); it may not exist. */
export function chooseFile(opts: LoadOptions, platform: Platform = currentPlatform()): ConfigSource {
  if (opts.argvConfigPath !== undefined && opts.argvConfigPath !== "") {
    return { via: "flag", path: opts.argvConfigPath, found: false };
  }
  const fromEnv = opts.env[CONFIG_ENV_VAR];
  if (fromEnv !== undefined && fromEnv !== "") return { via: "env", path: fromEnv, found: false };
  const path = platform.os === "win32" ? win32 : posix;
  return { via: "exe-dir", path: path.join(path.dirname(opts.execPath), CONFIG_FILE_NAME), found: false };
}

type Origin = { from: "env"; key: string } | { from: "file"; key: string; line: number } | { from: "default"; key: string };

interface Resolved {
  def: SettingDef;
  raw: string;
  origin: Origin;
}

export interface BuildInput {
  entries: readonly EnvEntry[];
  /** the file the entries came from (for messages); null = no file */
  file: string | null;
  /** the file that was looked for when there was none, to say where a setting could go */
  lookedFor?: string;
  env: Env;
  platform: Platform;
}

/** The pure half of loadConfig: file entries + environment + defaults → validated Config. */
export function buildConfig(input: BuildInput): { config: Config; warnings: string[]; origins: Record<string, string> } {
  const file = input.file ?? "(no file)";
  const warnings: string[] = [];
  const fileValues = indexFile(input.entries, file, warnings);

  const problems: string[] = [];
  const values = new Map<keyof Config, SettingValue>();
  const resolved = new Map<keyof Config, Resolved>();
  for (const def of SETTINGS) {
    const r = resolve(def, fileValues, input, file, warnings);
    resolved.set(def.field, r);
    // Empty means unset, so "" only arrives here as a default, which is then the value itself.
    const text = def.kind === "string" ? r.raw : r.raw.trim();
    const parsed = text === "" && r.origin.from === "default" ? { ok: true as const, value: "" } : parseSetting(def, text);
    if (parsed.ok) values.set(def.field, parsed.value);
    else {
      const got = def.secret ? `a value of ${r.raw.length} characters` : JSON.stringify(def.kind === "url" ? redactUrl(r.raw) : r.raw);
      problems.push(`${where(r.origin, file)}${r.origin.key}: ${parsed.message}, got ${got}`);
    }
  }

  if (problems.length === 0) {
    const config = Object.fromEntries(values) as unknown as Config;
    problems.push(...crossChecks(config, resolved, file, input.file ?? input.lookedFor));
    if (problems.length === 0) return { config, warnings, origins: originsOf(resolved, file) };
  }
  // The warnings go with the error, or they are never shown: a misspelled `OLAMA_URL` is why
  // "neither OLLAMA_URL nor COMFY_URL is set", and its line says so.
  // A misspelt key is the likely cause of what follows, so its "did you mean" is read first.
  const hints = warnings.filter((w) => w.includes("(did you mean "));
  throw new ConfigError([...hints, ...problems, ...warnings.filter((w) => !hints.includes(w))]);
}

/** Last entry per key wins (as in systemd); warns about repeats and keys we do not know. */
function indexFile(entries: readonly EnvEntry[], file: string, warnings: string[]): Map<string, EnvEntry> {
  const byKey = new Map<string, EnvEntry>();
  for (const e of entries) {
    if (!settingForKey(e.key)) {
      const guess = closestKey(e.key, knownKeys());
      warnings.push(`${file}:${e.line}: unknown setting ${e.key} ignored${guess ? ` (did you mean ${guess}?)` : ""}`);
      continue;
    }
    const earlier = byKey.get(e.key);
    if (earlier) warnings.push(`${file}:${e.line}: ${e.key} is set again (first on line ${earlier.line}); the last one wins`);
    byKey.set(e.key, e);
  }
  return byKey;
}

function resolve(def: SettingDef, fileValues: Map<string, EnvEntry>, input: BuildInput, file: string, warnings: string[]): Resolved {
  const keys = [def.key, ...(def.aliases ?? [])];

  const envHits = keys.flatMap((key) => {
    const value = input.env[key];
    return value !== undefined && value !== "" ? [{ key, value }] : [];
  });
  const fileHits = keys.flatMap((key) => {
    const e = fileValues.get(key);
    return e && e.value !== "" ? [e] : [];
  });
  const [envWin, ...envLosers] = envHits;
  const [fileWin, ...fileLosers] = fileHits;
  for (const lost of envLosers) {
    if (envWin && lost.value !== envWin.value) warnings.push(`environment: ${lost.key} ignored because ${envWin.key} is set`);
  }
  for (const lost of fileLosers) {
    if (fileWin && lost.value !== fileWin.value) {
      warnings.push(`${file}:${lost.line}: ${lost.key} ignored because ${fileWin.key} is set (line ${fileWin.line})`);
    }
  }

  if (envWin) return { def, raw: envWin.value, origin: { from: "env", key: envWin.key } };
  if (fileWin) return { def, raw: fileWin.value, origin: { from: "file", key: fileWin.key, line: fileWin.line } };
  return { def, raw: defaultText(def, input.platform), origin: { from: "default", key: def.key } };
}

function where(origin: Origin, file: string): string {
  switch (origin.from) {
    case "env":
      return "environment: ";
    case "file":
      return `${file}:${origin.line}: `;
    case "default":
      return "built-in default: ";
  }
}

function crossChecks(
  config: Config,
  resolved: Map<keyof Config, Resolved>,
  file: string,
  configPath: string | undefined,
): string[] {
  const problems: string[] = [];
  const describe = (field: keyof Config): string => {
    const r = resolved.get(field);
    return r ? `${where(r.origin, file)}${r.origin.key}` : String(field);
  };

  if (config.backoffMaxMs < config.backoffInitialMs) {
    // Blame the one the user set; if both were set, BACKOFF_MAX.
    const maxSet = resolved.get("backoffMaxMs")?.origin.from !== "default";
    const field = maxSet ? "backoffMaxMs" : "backoffInitialMs";
    problems.push(
      maxSet
        ? `${describe(field)}: must be at least BACKOFF_INITIAL (${formatDuration(config.backoffInitialMs)}), got ${JSON.stringify(resolved.get(field)?.raw)}`
        : `${describe(field)}: must be at most BACKOFF_MAX (${formatDuration(config.backoffMaxMs)}), got ${JSON.stringify(resolved.get(field)?.raw)}`,
    );
  }

  // QUOTA_GPU_SECONDS's classes are FAIR_CLASSES's (fair/gpu-quota.ts reads it; checked here to name the line).
  const gpuQuota = gpuSecondsProblem(config.quotaGpuSeconds, config.fairClasses);
  if (gpuQuota) problems.push(`${describe("quotaGpuSeconds")}: ${gpuQuota}`);

  if (config.ollamaUrl === "" && config.comfyUrl === "") {
    const place = configPath === undefined ? "the environment" : `${configPath} or the environment`;
    problems.push(
      `neither OLLAMA_URL nor COMFY_URL is set; set at least one in ${place}, e.g. OLLAMA_URL=http://127.0.0.1:11435`,
    );
  }

  // The classic mistake: the turnstile takes over Ollama's port and OLLAMA_URL still points there,
  // so every request would be proxied to ourselves forever.
  const listeners: Array<{ key: string; listen: string; enabled: boolean }> = [
    { key: "LISTEN_OLLAMA", listen: config.listenOllama, enabled: config.ollamaUrl !== "" },
    { key: "LISTEN_COMFY", listen: config.listenComfy, enabled: config.comfyUrl !== "" },
    { key: "LISTEN_OLLAMA_NESTED", listen: config.listenOllamaNested, enabled: config.ollamaUrl !== "" && config.listenOllamaNested !== "" },
  ];
  for (const field of ["ollamaUrl", "comfyUrl"] as const) {
    const url = config[field];
    if (url === "") continue;
    for (const l of listeners) {
      if (l.enabled && pointsAtListener(url, l.listen)) {
        problems.push(
          `${describe(field)}: ${url} is the turnstile's own listener (${l.key}=${l.listen}); ` +
            `run the upstream on another port and point ${resolved.get(field)?.origin.key ?? field} there`,
        );
      }
    }
  }
  return problems;
}

/** What is wrong with a QUOTA_GPU_SECONDS its pattern lets through: a class not in FAIR_CLASSES, one named twice, two numbers for everyone. */
function gpuSecondsProblem(text: string, fairClasses: string): string | undefined {
  const classes = fairClasses.split(",").map((p) => p.trim().split(":")[0]!);
  const seen = new Set<string>();
  for (const part of text.split(",").map((p) => p.trim())) {
    const cls = part.includes(":") ? part.slice(0, part.indexOf(":")) : "";
    if (cls !== "" && !classes.includes(cls)) return `"${cls}" is not a class of FAIR_CLASSES (${classes.join(", ")}), got ${JSON.stringify(text)}`;
    if (seen.has(cls)) return `${cls === "" ? "more than one number for every client" : `class ${cls} is named twice`}, got ${JSON.stringify(text)}`;
    seen.add(cls);
  }
  return undefined;
}

const LOCAL_HOSTS = /^(localhost|127(\.[0-9]+){3}|\[::1\]|::1|0\.0\.0\.0|\[::\]|::)$/i;

function originsOf(resolved: Map<keyof Config, Resolved>, file: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const r of resolved.values()) {
    const o = r.origin;
    out[r.def.key] = o.from === "file" ? `${file}:${o.line}${o.key === r.def.key ? "" : ` (${o.key})`}` : o.from === "env" ? `environment (${o.key})` : "default";
  }
  return out;
}

function pointsAtListener(url: string, listen: string): boolean {
  const u = new URL(url);
  const port = u.port !== "" ? Number(u.port) : u.protocol === "https:" ? 443 : 80;
  const l = parseListen(listen);
  if (l.port === 0 || l.port !== port) return false;
  return LOCAL_HOSTS.test(u.hostname) && (l.hostname === undefined || LOCAL_HOSTS.test(l.hostname));
}

/** One `KEY=value` line per effective setting, for the startup log; credentials in URLs are masked. */
export function describeConfig(config: Config): string[] {
  return SETTINGS.map((def) => `${def.key}=${displayValue(def, config[def.field])}`);
}

function displayValue(def: SettingDef, value: Config[keyof Config]): string {
  if (def.secret) return value === "" ? "" : "***";
  if (def.kind === "duration" && typeof value === "number") return formatDuration(value);
  if (def.kind === "url" && typeof value === "string") return redactUrl(value);
  return String(value);
}

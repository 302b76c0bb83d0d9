/**
 * The default command: load the configuration, start the turnstile, and run until SIGINT/SIGTERM.
 */
import { join } from "node:path";
import { ConfigError, describeConfig, loadConfig } from "../config/index.ts";
import type { Config } from "../config/types.ts";
import { createLogger, setLogger, type RootLogger } from "../observe/log.ts";
import { isCompiled } from "../runtime/compiled.ts";
import { startTurnstile, type Turnstile } from "../turnstile.ts";
import { cleanupAfterStart, startUpdater } from "../update/index.ts";
import { VERSION } from "../version.ts";

export interface ServeOptions {
  configPath?: string;
  env?: Record<string, string | undefined>;
  /** Started by systemd or the Windows service manager (restarts us after exit 3). */
  isService?: boolean;
}

/** systemd sets INVOCATION_ID for every unit it starts; our Windows service wrapper sets GPU_TURNSTILE_SERVICE. */
export function runningAsService(env: Record<string, string | undefined>): boolean {
  return !!env.INVOCATION_ID || !!env.NOTIFY_SOCKET || env.GPU_TURNSTILE_SERVICE === "1";
}

/** Where "the config next to the executable" is: beside the binary, or the working directory when run from source. */
export function configAnchor(): string {
  return isCompiled() ? process.execPath : join(process.cwd(), "gpu-turnstile");
}

export function wantColor(env: Record<string, string | undefined>): boolean {
  return env.NO_COLOR === undefined && process.stderr.isTTY === true;
}

export type Loaded = { config: Config; log: RootLogger; describe: string[]; warnings: string[]; source: string };

/** Load config and open the log; a ConfigError or an unopenable LOG_FILE becomes one line and exit 1. */
export function loadOrExit(opts: ServeOptions): Loaded {
  const env = opts.env ?? process.env;
  let loaded;
  try {
    loaded = loadConfig({ argvConfigPath: opts.configPath, env, execPath: configAnchor() });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`gpu-turnstile: ${err.message}\n`);
      for (const p of err.problems.slice(1)) process.stderr.write(`gpu-turnstile: config error: ${p}\n`);
      process.exit(1);
    }
    throw err;
  }
  const { config } = loaded;
  let log: RootLogger;
  try {
    log = createLogger({ level: config.logLevel, format: config.logFormat, file: config.logFile || undefined, color: wantColor(env) });
  } catch (err) {
    process.stderr.write(`gpu-turnstile: LOG_FILE: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  setLogger(log);
  const source = loaded.source.found ? loaded.source.path : `${loaded.source.path} (not found, using environment and defaults)`;
  return { config, log, describe: describeConfig(config), warnings: loaded.warnings, source };
}

/** The startup banner is shown at every log level: operators need it most when something is wrong. */
export function logStartup(l: Loaded, env: Record<string, string | undefined>): void {
  const banner = createLogger({
    level: "info",
    format: l.config.logFormat,
    file: l.config.logFile || undefined,
    color: wantColor(env),
  });
  banner.info(`gpu-turnstile ${VERSION} starting`, { config: l.source });
  for (const line of l.describe) banner.info(`  ${line}`);
  for (const w of l.warnings) banner.warn(w);
  banner.close();
}

export interface Running {
  turnstile: Turnstile;
  log: RootLogger;
  /** Resolves with the exit code once shutdown is done. */
  done: Promise<number>;
  shutdown(code: number): void;
}

export function serve(opts: ServeOptions): Running {
  const env = opts.env ?? process.env;
  const l = loadOrExit(opts);
  logStartup(l, env);
  const { config, log } = l;
  let turnstile: Turnstile;
  try {
    turnstile = startTurnstile({ config, log, version: VERSION });
  } catch (err) {
    log.error(`cannot listen: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
  for (const b of turnstile.listeners) log.warn(`${b.name} listener ready`, { url: b.url, upstream: b.name === "ollama" ? config.ollamaUrl : config.comfyUrl });

  // The new version is up: the previous binary kept for rollback is no longer needed.
  if (isCompiled()) for (const f of cleanupAfterStart(process.execPath)) log.info("removed the previous binary", { file: f });

  let resolveDone!: (code: number) => void;
  const done = new Promise<number>((r) => (resolveDone = r));
  let stopping = false;
  const updater = startUpdater({
    config,
    version: VERSION,
    execPath: process.execPath,
    isService: opts.isService ?? runningAsService(env),
    waitIdle: () => turnstile.whenIdle(),
    beginShutdown: (code) => shutdown(code),
    log,
  });
  const shutdown = (code: number) => {
    if (stopping) return;
    stopping = true;
    updater.stop();
    log.warn(code === 3 ? "restarting to apply the staged update" : "shutting down", { timeout: `${config.shutdownTimeoutMs}ms` });
    void turnstile.stop().then(() => {
      log.warn("stopped");
      resolveDone(code);
    });
  };
  process.on("SIGINT", () => shutdown(0));
  process.on("SIGTERM", () => shutdown(0));
  return { turnstile, log, done, shutdown };
}

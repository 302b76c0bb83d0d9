/**
 * The default command: load the configuration, start the turnstile, and run until SIGINT/SIGTERM.
 */
import { appendFileSync, mkdirSync } from "node:fs";
import { hostname, networkInterfaces, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { earlyLogFormat } from "../config/early-format.ts";
import { ConfigError, describeConfig, loadConfig } from "../config/load.ts";
import { withStateDir } from "../config/state-dir.ts";
import { redactCredentials, redactUrl } from "../config/redact.ts";
import type { Config } from "../config/types.ts";
import { createLogger, formatJsonLine, setLogger, type RootLogger } from "../observe/log.ts";
import { settingsObject } from "../observe/startup.ts";
import { claimCard, type CardClaim } from "../runtime/card-claim.ts";
import { claimSocket, thisSystem } from "../runtime/claim-socket.ts";
import { isCompiled } from "../runtime/compiled.ts";
import { useColor } from "../runtime/color.ts";
import { ensureFetchLimit } from "../runtime/fetch-limit.ts";
import { resolveHost } from "../runtime/resolve-host.ts";
import type { ServiceHost } from "../service/index.ts";
import { reportStatus } from "../service/notify-status.ts";
import { BindError, startTurnstile, type Turnstile } from "../turnstile.ts";
import { VERSION } from "../version.ts";

export interface ServeOptions {
  configPath?: string;
  env?: Record<string, string | undefined>;
  /** Started by systemd or the Windows service manager (restarts us after exit 3). */
  isService?: boolean;
  /** The service manager to tell about readiness, state and stopping. */
  host?: ServiceHost;
}

/** systemd sets INVOCATION_ID for every unit it starts (a Windows service is known by its host). */
export function runningAsService(env: Record<string, string | undefined>): boolean {
  return !!env.INVOCATION_ID || !!env.NOTIFY_SOCKET;
}

/** Where "the config next to the executable" is: beside the binary, or the working directory when run from source. */
export function configAnchor(): string {
  return isCompiled() ? process.execPath : join(process.cwd(), "gpu-turnstile");
}

export function wantColor(env: Record<string, string | undefined>): boolean {
  // Not process.stderr.isTTY: Bun builds process.stderr at its first use, loading node:stream and
  // its kin (~10 ms of a compiled start, docs/BENCHMARKS.md), and the log writes to fd 2 itself.
  // node:tty costs ~3 ms, paid only when NO_COLOR, FORCE_COLOR and TERM=dumb leave it to the terminal.
  return useColor({ get isTTY() { return process.getBuiltinModule("node:tty").isatty(2); } }, env);
}

/** Signals closer together than this are one keypress delivered twice. */
const SAME_SIGNAL_MS = 1000;

/** How long after start the updater is loaded and makes its first check. */
const UPDATER_DELAY_MS = 1000;

export type Loaded = { config: Config; log: RootLogger; describe: string[]; warnings: string[]; source: string };

/** Load config and open the log; a ConfigError or an unopenable LOG_FILE becomes one line and exit 1. */
export async function loadOrExit(opts: ServeOptions): Promise<Loaded> {
  const env = opts.env ?? process.env;
  let loaded;
  try {
    loaded = loadConfig({ argvConfigPath: opts.configPath, env, execPath: configAnchor() });
  } catch (err) {
    if (err instanceof ConfigError) {
      // Double-clicked on Windows: the console closes with us, so explain and wait for a key.
      if (process.platform === "win32" && isCompiled() && (await explainToExplorer(err.message, opts.configPath)) === "exit") {
        process.exit(1);
      }
      const format = earlyLogFormat({ argvConfigPath: opts.configPath, env, execPath: configAnchor() });
      await fatal(opts, [err.message, ...err.problems.slice(1).map((p) => `config error: ${p}`)], format);
    }
    throw err;
  }
  const config = withStateDir(loaded.config, loaded.source, env);
  let log: RootLogger;
  try {
    log = createLogger({ level: config.logLevel, format: config.logFormat, file: config.logFile || undefined, color: wantColor(env) });
  } catch (err) {
    return fatal(opts, [`LOG_FILE: ${err instanceof Error ? err.message : String(err)}`], config.logFormat);
  }
  setLogger(log);
  const source = loaded.source.found ? loaded.source.path : `${loaded.source.path} (not found, using environment and defaults)`;
  return { config, log, describe: describeConfig(config), warnings: loaded.warnings, source };
}

/**
 * A start that cannot go on: one line per problem, exit 1, in the log's format (LOG_FORMAT=json:
 * one JSON object a line, as the logger would write it, so a log shipper does not drop the one
 * line that matters). A Windows service has no stderr and no log yet, so the lines also go to the
 * service's default log file, where the installer points operators (otherwise all they would see
 * is "service-specific error 1").
 */
async function fatal(opts: ServeOptions, lines: string[], format: Config["logFormat"]): Promise<never> {
  const at = new Date();
  const json = (l: string) => formatJsonLine(at, "error", `gpu-turnstile cannot start: ${redactCredentials(l)}`, []);
  for (const l of lines) process.stderr.write(format === "json" ? json(l) : `gpu-turnstile: ${redactCredentials(l)}\n`);
  if (opts.host?.kind === "windows-service") {
    const { windowsLayout } = await import("../service/windows-install.ts");
    const file = windowsLayout(process.env).logFile;
    try {
      mkdirSync(dirname(file), { recursive: true });
      appendFileSync(file, lines.map((l) => (format === "json" ? json(l) : `${at.toISOString()} ERROR gpu-turnstile cannot start: ${redactCredentials(l)}\n`)).join(""));
    } catch {
      // Nowhere left to say it; the SCM still gets exit code 1.
    }
  }
  process.exit(1);
}

/**
 * Lifecycle lines — the start-up banner with every setting, the listeners, shutting down, stopped —
 * are shown at every log level (operators need them most when something is wrong), as INFO
 * rather than dressed up as warnings. Same destination and format as the main log.
 */
export function lifecycleLogger(l: Loaded, env: Record<string, string | undefined>): RootLogger {
  return createLogger({ level: "info", format: l.config.logFormat, file: l.config.logFile || undefined, color: wantColor(env) });
}

/** The banner, in one write: text lists one setting a line, JSON gives them as one object. */
export function logStartup(l: Loaded, notice: RootLogger): void {
  notice.batch(() => {
    if (notice.format === "json") {
      notice.info(`gpu-turnstile ${VERSION} starting`, { config: l.source, settings: settingsObject(l.config) });
    } else {
      notice.info(`gpu-turnstile ${VERSION} starting`, { config: l.source });
      for (const line of l.describe) notice.info(`  ${line}`);
    }
    for (const w of l.warnings) notice.warn(w);
  });
}

export interface Running {
  turnstile: Turnstile;
  log: RootLogger;
  /** Resolves with the exit code once shutdown is done. */
  done: Promise<number>;
  shutdown(code: number): void;
}

async function explainToExplorer(problem: string | null, configPath: string | undefined): Promise<"run" | "exit" | "not-explorer"> {
  const { explorerStart, realConfigOps, waitForKeyPress } = await import("../service/index.ts");
  const { nodePlatform } = await import("../service/platform-node.ts");
  const { consoleProcessCount } = await import("../service/windows-native.ts");
  const exeDir = process.execPath.slice(0, process.execPath.lastIndexOf("\\"));
  return explorerStart({
    p: nodePlatform(),
    exePath: process.execPath,
    version: VERSION,
    configProblem: problem,
    configPath: configPath ?? process.env.GPU_TURNSTILE_CONFIG ?? `${exeDir}\\gpu-turnstile.env`,
    renderSample: realConfigOps.renderSample,
    consoleProcessCount,
    print: (line) => console.log(line),
    waitForKey: waitForKeyPress,
  });
}

/**
 * One turnstile per card (runtime/card-claim.ts): the upstreams are claimed before any listener
 * binds. A second instance gets one line naming the first, and exit 1, like a BindError.
 */
async function claimOrExit(opts: ServeOptions, l: Loaded): Promise<CardClaim> {
  const { config, log } = l;
  const system = thisSystem();
  let problem: string;
  try {
    const r = await claimCard({
      upstreams: [config.ollamaUrl, config.comfyUrl].filter((u) => u !== ""),
      socket: claimSocket(system),
      system,
      tmpdir: tmpdir(),
      pid: process.pid,
      listening: [config.ollamaUrl && config.listenOllama, config.comfyUrl && config.listenComfy].filter((x) => x !== ""),
      machine: { name: hostname(), addresses: Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address)) },
      resolve: resolveHost,
    });
    if (r.ok) return r.claim;
    problem = r.message;
  } catch (err) {
    // Unchecked, two copies could split the lock: better not to start.
    problem = `cannot check for another gpu-turnstile guarding the same upstreams: ${err instanceof Error ? err.message : String(err)}`;
  }
  if (config.logFile) log.error(problem);
  return fatal(opts, [problem], config.logFormat);
}

export async function serve(opts: ServeOptions): Promise<Running> {
  const env = opts.env ?? process.env;
  const host = opts.host;
  const l = await loadOrExit(opts);
  // An https upstream is proxied through fetch: lift its 256-request limit (may re-run us).
  await ensureFetchLimit([l.config.ollamaUrl, l.config.comfyUrl]);
  // A valid config, double-clicked: say that closing the window stops it, and how to install the service.
  if (process.platform === "win32" && isCompiled() && host?.kind !== "windows-service") await explainToExplorer(null, opts.configPath);
  const notice = lifecycleLogger(l, env);
  const { config, log } = l;
  const claim = await claimOrExit(opts, l);
  let turnstile: Turnstile;
  try {
    turnstile = startTurnstile({ config, log, version: VERSION });
  } catch (err) {
    if (!(err instanceof BindError)) throw err;
    // One line and exit, before any banner: a double-started instance must be plain to see.
    if (config.logFile) log.error(err.message);
    return fatal(opts, [err.message], config.logFormat);
  }
  claim.listening = turnstile.listeners.map((b) => b.url);
  logStartup(l, notice);
  host?.ready();
  // What `systemctl status` shows: state, holders and waiters, at most 4 times a second.
  const stopStatus = host && host.kind !== "console" ? reportStatus({ snapshot: () => turnstile.lock.snapshot(), send: (t) => host.status(t) }) : () => {};

  let resolveDone!: (code: number) => void;
  const done = new Promise<number>((r) => (resolveDone = r));
  let stopping = false;
  let stopUpdater = () => {};
  // The updater (node:crypto, tweetnacl, the release client) loads after the listeners answer:
  // it has nothing to do in the first moments, and the start-up is what operators wait on.
  setTimeout(async () => {
    if (stopping) return;
    if (isCompiled()) {
      // The new version is up: the previous binary kept for rollback is no longer needed.
      const { cleanupAfterStart } = await import("../update/stage.ts");
      for (const f of cleanupAfterStart(process.execPath)) log.info("removed the previous binary", { file: f });
    }
    if (stopping) return;
    if (!config.autoUpdate) return log.info("auto-update off (AUTO_UPDATE=false)");
    const { startUpdater } = await import("../update/updater.ts");
    const updater = startUpdater({
      config,
      version: VERSION,
      execPath: process.execPath,
      isService: opts.isService ?? (host?.kind === "windows-service" || runningAsService(env)),
      waitIdle: () => turnstile.whenIdle(),
      beginShutdown: (code) => shutdown(code),
      log,
    });
    stopUpdater = () => updater.stop();
  }, UPDATER_DELAY_MS).unref();
  const shutdown = (code: number) => {
    if (stopping) return;
    stopping = true;
    stopUpdater();
    stopStatus();
    host?.stopping();
    notice.info(code === 3 ? "restarting to apply the staged update" : "shutting down", { timeout_ms: config.shutdownTimeoutMs });
    void turnstile.stop().then(() => {
      // Held until nothing of ours is left on the card: a successor may start from here.
      claim.release();
      notice.info("stopped");
      resolveDone(code);
    });
  };
  // A second Ctrl-C means "now": in-flight streams are cut instead of waited for. One Ctrl-C can
  // arrive twice — from the terminal and forwarded by the launcher that lifted the fetch limit —
  // so a repeat within a second is the same keypress.
  let firstSignalAt = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    if (!stopping) {
      firstSignalAt = Date.now();
      return shutdown(0);
    }
    if (Date.now() - firstSignalAt < SAME_SIGNAL_MS) return;
    log.warn(`${sig} again: exiting without waiting for requests in flight`);
    host?.stopped(130);
    process.exit(130);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  host?.onStopRequest(() => shutdown(0));
  // Said last: once an operator (or a script) reads "ready", Ctrl-C already stops gracefully.
  for (const b of turnstile.listeners) notice.info(`${b.name} listener ready`, { url: b.url, upstream: redactUrl(b.name === "comfy" ? config.comfyUrl : config.ollamaUrl) });
  if (turnstile.agentPort !== undefined) notice.info("HAProxy agent-check port ready", { listen: config.agentListen, port: turnstile.agentPort, card: turnstile.card });
  return { turnstile, log, done, shutdown };
}

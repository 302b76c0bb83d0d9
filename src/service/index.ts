/**
 * Service integration, as the CLI and main() use it. Everything platform-specific behind these
 * functions is loaded with dynamic import() only on its platform: Linux never opens Windows DLLs,
 * Windows never dlopens libc.
 */
import { appendFileSync } from "node:fs";
import { resolve } from "node:path";
import { EnvFileError, parseEnvFile } from "../config/envfile.ts";
import { buildConfig, ConfigError } from "../config/load.ts";
import { migrateConfig, renderSample } from "../config/sample.ts";
import { DEV_VERSION, parseVersion } from "../config/version.ts";
import { ELEVATED_LOG_FLAG, formatElevatedLine, relaunchElevated } from "./elevate.ts";
import { consoleHost, systemdHost, type ServiceHost } from "./host.ts";
import type { ConfigOps, SampleOptions } from "./install-config.ts";
import { installLinux, removeLinux } from "./linux-install.ts";
import { disabledNotifier, type Notifier } from "./notify-address.ts";
import type { Platform } from "./platform.ts";
import { nodePlatform } from "./platform-node.ts";
import { formatLines, type ReportLine, type ReportSink } from "./report.ts";
import { installWindows, removeWindows, WINDOWS_SERVICE_FLAG } from "./windows-install.ts";
import { SERVICE_NAME } from "./windows-sc.ts";

export { ELEVATED_LOG_FLAG } from "./elevate.ts";
export { WINDOWS_SERVICE_FLAG } from "./windows-install.ts";
export { explorerStart, waitForKeyPress, type ExplorerStartDeps } from "./double-click.ts";
export type { ServiceHost } from "./host.ts";
export type { Notifier } from "./notify-address.ts";
export type { Outcome, ReportLine } from "./report.ts";

export interface ServiceCommandOptions {
  /** the CLI arguments of this invocation (a compiled binary: process.argv.slice(2)); the UAC relaunch repeats them */
  argv: readonly string[];
  /** from `--elevated-log <file>` (hidden flag the UAC relaunch adds) */
  elevatedLog?: string;
  /** each line as it happens; default: info to stdout, warnings and errors to stderr */
  onLine?: ReportSink;
  /** the running executable; default process.execPath */
  selfPath?: string;
  /** tests */
  platform?: Platform;
  config?: ConfigOps;
}

export interface InstallOptions extends ServiceCommandOptions {
  /** `-config <path>` / `--config <path>`; relative paths are taken from the current directory */
  configPath?: string;
  /** `--no-copy` */
  noCopy?: boolean;
  /** this binary's version (src/version.ts VERSION); anything but an exact vX.Y.Z stamps CFG_VER=v0.0.0 */
  version: string;
}

/**
 * `install-service` (also `--install-service`, `service install`): installs, registers and
 * starts the service, or converges an existing installation. On Windows without elevation it
 * relaunches itself through UAC and mirrors the child's exit code. Returns the exit code.
 */
export async function install(opts: InstallOptions): Promise<number> {
  const p = opts.platform ?? nodePlatform();
  const onLine = sinkFor(opts);
  const selfPath = opts.selfPath ?? process.execPath;
  if (p.os === "win32" && !opts.elevatedLog && !(await p.isElevated())) {
    return (await relaunchElevated(p, { exe: selfPath, args: opts.argv, onLine })).exitCode;
  }
  const common = {
    selfPath,
    noCopy: opts.noCopy ?? false,
    version: configVersion(opts.version),
    config: opts.config ?? realConfigOps,
    onLine,
    ...(opts.configPath ? { configPath: absolute(opts.configPath, p.os) } : {}),
  };
  const out = p.os === "win32" ? await installWindows(p, common) : await installLinux(p, common);
  return out.exitCode;
}

/**
 * `remove-service` (also `--remove-service`, `service remove`): stops and removes the service and
 * the installed binary, keeping the config (and on Windows the logs). Elevates like install().
 */
export async function remove(opts: ServiceCommandOptions): Promise<number> {
  const p = opts.platform ?? nodePlatform();
  const onLine = sinkFor(opts);
  if (p.os === "win32" && !opts.elevatedLog && !(await p.isElevated())) {
    return (await relaunchElevated(p, { exe: opts.selfPath ?? process.execPath, args: opts.argv, onLine })).exitCode;
  }
  const out = p.os === "win32" ? await removeWindows(p, { onLine }) : await removeLinux(p, { onLine });
  return out.exitCode;
}

export interface ServiceStart {
  /** argv without the service flag, ready for the CLI parser */
  argv: string[];
  /** tell it ready / status / stopping / stopped; register the stop handler with onStopRequest */
  host: ServiceHost;
}

export interface RunAsServiceOptions {
  env?: Readonly<Record<string, string | undefined>>;
  os?: NodeJS.Platform;
  /** Windows: how long a graceful stop may take (SHUTDOWN_TIMEOUT + margin) for the SCM's wait hint */
  stopWaitHintMs?: number;
}

/**
 * Call first thing in main(), before parsing arguments. Under the Windows SCM (the registered
 * command line carries WINDOWS_SERVICE_FLAG) it connects to the SCM and reports START_PENDING;
 * under systemd (NOTIFY_SOCKET set) it prepares sd_notify and starts the watchdog pings;
 * otherwise it returns a host whose calls do nothing. Never throws: a service integration that
 * cannot work is reported in `host.problem` (log it) and the program runs as a console program.
 */
export async function runAsServiceIfRequested(argv: readonly string[], opts: RunAsServiceOptions = {}): Promise<ServiceStart> {
  const os = opts.os ?? process.platform;
  const env = opts.env ?? process.env;
  const flagged = argv.includes(WINDOWS_SERVICE_FLAG);
  const rest = argv.filter((a) => a !== WINDOWS_SERVICE_FLAG);
  if (flagged) {
    if (os !== "win32") return { argv: rest, host: consoleHost(`${WINDOWS_SERVICE_FLAG} only means something on Windows; ignored`) };
    try {
      const { connectToScm } = await import("./windows-scm.ts");
      const hints = { startMs: 30_000, stopMs: opts.stopWaitHintMs ?? 30_000 };
      return { argv: rest, host: await connectToScm({ serviceName: SERVICE_NAME, hints }) };
    } catch (e) {
      return { argv: rest, host: consoleHost(`${WINDOWS_SERVICE_FLAG}: ${(e as Error).message}; running as a console program`) };
    }
  }
  if (os === "linux" && env.NOTIFY_SOCKET) return { argv: rest, host: systemdHost(await createNotifier(env)) };
  return { argv: rest, host: consoleHost() };
}

/**
 * The sd_notify client on its own (runAsServiceIfRequested already wraps it in a host): a no-op
 * notifier unless this is Linux with NOTIFY_SOCKET set. Loads the libc binding only then.
 */
export async function createNotifier(env: Readonly<Record<string, string | undefined>> = process.env): Promise<Notifier> {
  if (process.platform !== "linux" || !env.NOTIFY_SOCKET) return noopNotifier;
  const mod = await import("./notify.ts");
  return mod.createNotifier(env);
}

const noopNotifier: Notifier = disabledNotifier();

/** CFG_VER must be a release version; a dev build (anything else) stamps v0.0.0. */
export function configVersion(version: string): string {
  return parseVersion(version) ? version : DEV_VERSION;
}

/** src/config/sample.ts, adapted to the installer's platform names. */
export const realConfigOps: ConfigOps = {
  renderSample: (o) => renderSample(toConfigSample(o)),
  migrateConfig: (text, o, file) => migrateConfig(text, toConfigSample(o), file),
  check(text, file, os) {
    // The service gets no user environment (systemd passes only the file; the SCM none): the file alone counts.
    try {
      buildConfig({ entries: parseEnvFile(text, file), file, env: {}, platform: { os, arch: process.arch } });
      return [];
    } catch (e) {
      if (e instanceof ConfigError) return [...e.problems];
      if (e instanceof EnvFileError) return [e.message];
      throw e;
    }
  },
};

function toConfigSample(o: SampleOptions) {
  return { version: o.version, platform: { os: o.platform, arch: process.arch }, ...(o.logFile ? { logFile: o.logFile } : {}) };
}

function absolute(path: string, os: "linux" | "win32"): string {
  // On the real machine node:path resolves for the OS we run on; a fake Windows in tests passes absolute paths.
  if (os === "win32" ? /^[A-Za-z]:[\\/]/.test(path) : path.startsWith("/")) return path;
  return resolve(path);
}

function sinkFor(opts: ServiceCommandOptions): ReportSink {
  const print = opts.onLine ?? defaultPrint;
  if (!opts.elevatedLog) return print;
  const log = opts.elevatedLog;
  return (line: ReportLine) => {
    print(line);
    try {
      appendFileSync(log, formatElevatedLine(line));
    } catch {
      // The non-elevated parent reads this file; if it cannot be written, the console line above is all we have.
    }
  };
}

function defaultPrint(line: ReportLine): void {
  const text = formatLines([line]);
  if (line.level === "info") process.stdout.write(`${text}\n`);
  else process.stderr.write(`${text}\n`);
}

/**
 * install-service / remove-service on Windows, through sc.exe and icacls behind the Platform
 * interface (unit-tested on Linux with a recorder). Converges like the Linux installer: a running
 * service is stopped first, the exe is copied only when its content differs, the registration is
 * changed only where it drifted, and the service is started again only if it was running.
 *
 * The service runs as the virtual account `NT SERVICE\gpu-turnstile`. Its SID exists only once
 * the service is registered, so the folder grants come after `sc create`; if one fails, the
 * registration is rolled back (deleted when we created it, the old settings restored otherwise).
 */
import { CONFIG_ENV_VAR, CONFIG_FILE_NAME } from "../config/load.ts";
import { parseEnvFile } from "../config/envfile.ts";
import { applyConfig, checkInPlace, planConfig, reportProblems, type ConfigOps, type ConfigPlan } from "./install-config.ts";
import type { Platform, RunResult } from "./platform.ts";
import { Report, type Outcome, type ReportSink } from "./report.ts";
import {
  configDrift,
  DESCRIPTION,
  DISPLAY_NAME,
  ERROR_SERVICE_DOES_NOT_EXIST,
  FAILURE_ACTIONS,
  FAILURE_RESET_S,
  parseExitCodes,
  parseFailureFlag,
  parseQc,
  parseQfailure,
  parseSidType,
  parseState,
  serviceBinPath,
  SERVICE_NAME,
  STATE,
  VIRTUAL_ACCOUNT,
  type ServiceConfig,
} from "./windows-sc.ts";

/** The flag in the registered command line that makes the exe connect to the SCM. */
export const WINDOWS_SERVICE_FLAG = "--windows-service";

export interface WindowsLayout {
  installDir: string;
  exePath: string;
  configPath: string;
  dataDir: string;
  logFile: string;
}

export function windowsLayout(env: Readonly<Record<string, string | undefined>>): WindowsLayout {
  const programFiles = env.ProgramFiles || "C:\\Program Files";
  const programData = env.ProgramData || "C:\\ProgramData";
  const installDir = `${programFiles}\\gpu-turnstile`;
  const dataDir = `${programData}\\gpu-turnstile`;
  return {
    installDir,
    exePath: `${installDir}\\gpu-turnstile.exe`,
    configPath: `${installDir}\\${CONFIG_FILE_NAME}`,
    dataDir,
    logFile: `${dataDir}\\gpu-turnstile.log`,
  };
}

export interface WindowsInstallOptions {
  selfPath: string;
  configPath?: string;
  noCopy: boolean;
  version: string;
  config: ConfigOps;
  onLine?: ReportSink;
  /** how long to wait for the service to stop or start; default 60 s */
  waitMs?: number;
}

const POLL_MS = 500;

export async function installWindows(p: Platform, o: WindowsInstallOptions): Promise<Outcome> {
  const r = new Report(o.onLine);

  if (!(await p.isElevated())) {
    r.error("install-service needs administrator rights (nothing was changed)");
    return r.done();
  }
  if (/^bun(\.exe)?$/i.test(basename(o.selfPath))) {
    r.error(`install-service must run from the built gpu-turnstile.exe, not from source (this is ${o.selfPath})`);
    return r.done();
  }
  if (o.configPath !== undefined && (await p.stat(o.configPath)) === null) {
    r.error(`config file ${o.configPath} (given with -config) does not exist (nothing was changed)`);
    return r.done();
  }
  const source = await configSource(p, o);
  const query = await sc(p, ["query", SERVICE_NAME]);
  const exists = query.code !== ERROR_SERVICE_DOES_NOT_EXIST;
  if (exists && query.code !== 0) {
    r.error(`sc.exe query ${SERVICE_NAME} failed (exit ${query.code}): ${text(query)}`);
    return r.done();
  }
  // Settled before anything is stopped or registered (see install-config.ts); the query only reads.
  const L = windowsLayout(p.env);
  const config = o.noCopy
    ? await checkInPlace(p, source, o.config, "win32")
    : await planConfig(p, {
        target: L.configPath,
        source,
        given: o.configPath !== undefined,
        version: o.version,
        platform: "win32",
        logFile: L.logFile,
        ops: o.config,
      });
  if (config.problems.length > 0) {
    if (config.writeOnFail && config.write !== null) {
      await p.mkdirp(L.installDir);
      await applyConfig(p, config, r);
      // Only SYSTEM, Administrators and an already registered service may read it meanwhile.
      for (const [path, service] of [[L.configPath, exists], [`${L.configPath}.bak`, false]] as const) {
        if (await p.stat(path)) await p.run("icacls.exe", configAclArgs(path, service));
      }
    }
    reportProblems(config, r);
    return r.done();
  }

  const state = exists ? parseState(query.stdout) : undefined;
  const wasRunning = state !== undefined && state !== STATE.STOPPED;
  if (wasRunning) {
    const stopped = await stopAndWait(p, r, o.waitMs);
    if (!stopped) return r.done();
    r.info("stopped the running service for the update");
  }

  const progress = { startTried: false };
  try {
    await converge(p, o, r, { source, config, exists, wasRunning }, progress);
  } catch (e) {
    r.error(`install-service failed: ${(e as Error).message}`);
  }
  // Leave a service that was running, running — unless it is its own start that failed.
  if (!r.ok && wasRunning && !progress.startTried) {
    const res = await sc(p, ["start", SERVICE_NAME]);
    if (res.code === 0) r.info("started the previous installation again");
  }
  return r.done();
}

interface Before {
  source: string | null;
  config: ConfigPlan;
  exists: boolean;
  wasRunning: boolean;
}

async function converge(p: Platform, o: WindowsInstallOptions, r: Report, b: Before, progress: { startTried: boolean }): Promise<void> {
  const L = windowsLayout(p.env);
  const { source, config, exists, wasRunning } = b;
  // Files first: none of them needs the service's SID.
  const exe = o.noCopy ? o.selfPath : L.exePath;
  let configForService: string | undefined;
  await p.mkdirp(L.dataDir);
  if (!o.noCopy) {
    await p.mkdirp(L.installDir);
    const [mine, installed] = await Promise.all([p.hashFile(o.selfPath), p.hashFile(L.exePath)]);
    if (mine !== installed) {
      await p.copyFile(o.selfPath, L.exePath);
      r.info(`exe: ${installed === null ? "installed" : "updated"} ${L.exePath}`);
    } else {
      r.info(`exe: ${L.exePath} is already this version`);
    }
    await applyConfig(p, config, r);
  } else {
    r.info(`exe: registering ${o.selfPath} where it is (--no-copy)`);
    // The service finds a config beside its exe by itself; anywhere else it must be told.
    if (source !== null && !samePath(dirOf(source), dirOf(o.selfPath))) configForService = source;
    r.info(`config: ${source} (left as it is)`);
  }
  const installedConfig = o.noCopy ? source : L.configPath;
  const logFile = installedConfig ? await logFileOf(p, installedConfig) : undefined;
  if (o.noCopy && !logFile) {
    r.warn("the config sets no LOG_FILE: a service has no console, so its log would be lost. Set LOG_FILE in the config.");
  }
  const logDir = logFile ? dirOf(logFile) : undefined;
  if (logDir) await p.mkdirp(logDir);

  // Registration.
  const want: ServiceConfig = {
    binPath: serviceBinPath(exe, WINDOWS_SERVICE_FLAG, configForService),
    startType: 2,
    delayed: false,
    account: VIRTUAL_ACCOUNT,
    displayName: DISPLAY_NAME,
  };
  let rollback: () => Promise<void>;
  if (!exists) {
    const created = await sc(p, [
      "create", SERVICE_NAME,
      "binPath=", want.binPath,
      "start=", "auto",
      "obj=", VIRTUAL_ACCOUNT,
      "DisplayName=", DISPLAY_NAME,
    ]);
    if (created.code !== 0) {
      r.error(`sc.exe create failed (exit ${created.code}): ${text(created)}`);
      return;
    }
    r.info(`service: registered ${SERVICE_NAME} (auto start, runs as ${VIRTUAL_ACCOUNT})`);
    rollback = async () => {
      await sc(p, ["delete", SERVICE_NAME]);
      r.info(`service: registration of ${SERVICE_NAME} rolled back`);
    };
  } else {
    const have = parseQc((await sc(p, ["qc", SERVICE_NAME])).stdout);
    const drift = configDrift(have, want);
    if (drift.args.length > 0) {
      const res = await sc(p, ["config", SERVICE_NAME, ...drift.args]);
      if (res.code !== 0) {
        r.error(`sc.exe config failed (exit ${res.code}): ${text(res)}`);
        return;
      }
      r.info(`service: updated ${drift.lines.join("; ")}`);
    } else {
      r.info("service: registration is up to date");
    }
    const back = configDrift(want, have);
    rollback = async () => {
      if (back.args.length === 0) return;
      await sc(p, ["config", SERVICE_NAME, ...back.args]);
      r.info("service: registration restored to its previous settings");
    };
  }
  if (!(await ensureExtras(p, r, !exists))) {
    await rollback();
    return;
  }

  // Grants, now that the virtual account exists.
  const grants: [string, string][] = [];
  if (o.noCopy) grants.push([exe, "(RX)"]);
  else grants.push([L.installDir, "(OI)(CI)(M)"]);
  grants.push([L.dataDir, "(OI)(CI)(M)"]);
  if (logDir && !isInside(logDir, L.dataDir) && (o.noCopy || !isInside(logDir, L.installDir))) grants.push([logDir, "(OI)(CI)(M)"]);
  if (installedConfig && (o.noCopy || !isInside(installedConfig, L.installDir))) grants.push([installedConfig, "(R)"]);
  for (const [path, rights] of grants) {
    const res = await p.run("icacls.exe", [path, "/grant", `${VIRTUAL_ACCOUNT}:${rights}`]);
    if (res.code !== 0) {
      r.error(`granting ${VIRTUAL_ACCOUNT} ${rights} on ${path} failed (exit ${res.code}): ${text(res)}`);
      await rollback();
      return;
    }
  }
  r.info(`access: ${VIRTUAL_ACCOUNT} may use ${grants.map(([path]) => path).join(", ")}`);
  if (!o.noCopy) {
    // Written files inherit the folder's ACL (Users may read): the config may hold credentials.
    for (const [path, service] of [[L.configPath, true], [`${L.configPath}.bak`, false]] as const) {
      if (!(await p.stat(path))) continue;
      const res = await p.run("icacls.exe", configAclArgs(path, service));
      if (res.code !== 0) {
        r.error(`restricting access to ${path} failed (exit ${res.code}): ${text(res)}`);
        await rollback();
        return;
      }
    }
    r.info(`access: ${L.configPath} only for SYSTEM, Administrators and ${VIRTUAL_ACCOUNT} (it may hold credentials)`);
  }
  if (o.noCopy) r.warn(`with --no-copy the service cannot replace ${exe} itself: self-updates will not apply`);

  if (!exists || wasRunning) {
    progress.startTried = true;
    if (!(await startAndWait(p, r, o.waitMs, logFile))) return;
    r.info(exists ? "started gpu-turnstile again" : "started gpu-turnstile");
  } else {
    r.info(`left stopped, as it was before (start it with: sc.exe start ${SERVICE_NAME})`);
  }
  r.info(`config: ${installedConfig} (edit it in an editor run as administrator, then restart the service)`);
  if (logFile) r.info(`logs: ${logFile}`);
  // The installed exe is not on PATH: say where it is for the day it is removed.
  r.info(`remove with: "${exe}" remove-service`);
}

export interface WindowsRemoveOptions {
  onLine?: ReportSink;
  waitMs?: number;
}

/** Stops and deletes the service and the installed exe; the config and logs stay. */
export async function removeWindows(p: Platform, o: WindowsRemoveOptions = {}): Promise<Outcome> {
  const r = new Report(o.onLine);
  const L = windowsLayout(p.env);
  if (!(await p.isElevated())) {
    r.error("remove-service needs administrator rights (nothing was changed)");
    return r.done();
  }
  const query = await sc(p, ["query", SERVICE_NAME]);
  let registeredExe = L.exePath;
  if (query.code === ERROR_SERVICE_DOES_NOT_EXIST) {
    r.info(`gpu-turnstile is not installed (no service named ${SERVICE_NAME})`);
  } else if (query.code !== 0) {
    r.error(`sc.exe query ${SERVICE_NAME} failed (exit ${query.code}): ${text(query)}`);
    return r.done();
  } else {
    registeredExe = exeOf(parseQc((await sc(p, ["qc", SERVICE_NAME])).stdout).binPath);
    const state = parseState(query.stdout);
    if (state !== undefined && state !== STATE.STOPPED) {
      if (!(await stopAndWait(p, r, o.waitMs))) return r.done();
      r.info("stopped gpu-turnstile");
    }
    const del = await sc(p, ["delete", SERVICE_NAME]);
    if (del.code !== 0) {
      r.error(`sc.exe delete failed (exit ${del.code}): ${text(del)}`);
      return r.done();
    }
    r.info(`service: ${SERVICE_NAME} deleted`);
  }
  // Only our own copy: a --no-copy registration points at the user's exe.
  if (samePath(registeredExe, L.exePath)) {
    try {
      if (await p.unlink(L.exePath)) r.info(`exe: removed ${L.exePath}`);
    } catch (e) {
      // Windows cannot delete a running exe — e.g. the installed copy running this very command.
      r.warn(`could not remove ${L.exePath} (${(e as Error).message}); delete it by hand once this exits`);
    }
  }
  // The install folder goes once empty (a config kept in it keeps it).
  if (await p.rmdirIfEmpty(L.installDir)) r.info(`folder: removed ${L.installDir}`);
  const kept = [L.configPath, L.dataDir];
  const present: string[] = [];
  for (const path of kept) if ((await p.stat(path)) !== null) present.push(path);
  if (present.length > 0) r.info(`kept ${present.join(" and ")} (config and logs); delete them by hand if you no longer need them`);
  return r.done();
}

/** Description, recovery actions, failure flag and SID type: set on create, re-set where they drifted. */
async function ensureExtras(p: Platform, r: Report, fresh: boolean): Promise<boolean> {
  const steps: { check?: () => Promise<boolean>; args: string[]; what: string }[] = [
    { args: ["description", SERVICE_NAME, DESCRIPTION], what: "description" },
    {
      check: async () => {
        const f = parseQfailure((await sc(p, ["qfailure", SERVICE_NAME])).stdout);
        return f.resetSeconds === FAILURE_RESET_S && !f.otherActions && f.restartDelays.join("/") === "5000/5000/5000";
      },
      args: ["failure", SERVICE_NAME, "reset=", String(FAILURE_RESET_S), "actions=", FAILURE_ACTIONS],
      what: "recovery: restart after 5 s on failure",
    },
    {
      // Without it, a clean exit with a non-zero code (the updater's 3) would not trigger recovery.
      check: async () => parseFailureFlag((await sc(p, ["qfailureflag", SERVICE_NAME])).stdout),
      args: ["failureflag", SERVICE_NAME, "1"],
      what: "recovery also on a non-zero exit code",
    },
    {
      check: async () => parseSidType((await sc(p, ["qsidtype", SERVICE_NAME])).stdout) === "UNRESTRICTED",
      args: ["sidtype", SERVICE_NAME, "unrestricted"],
      what: "service SID (needed by the virtual account)",
    },
  ];
  for (const s of steps) {
    if (!fresh && (s.check ? await s.check() : true)) continue;
    const res = await sc(p, s.args);
    if (res.code !== 0) {
      r.error(`sc.exe ${s.args[0]} failed (exit ${res.code}): ${text(res)}`);
      return false;
    }
    if (!fresh) r.info(`service: ${s.what} re-applied`);
  }
  return ensureServiceEnvironment(p, r, fresh);
}

/**
 * Bun reads its fetch concurrency limit (256 by default) only at process start, and a process the
 * SCM started cannot re-run itself with it lifted (the SCM talks to the process it started), so
 * the service key's Environment value sets it. See SPEC.md, "Bun's fetch concurrency limit".
 */
export const SERVICE_ENVIRONMENT = "BUN_CONFIG_MAX_HTTP_REQUESTS=65535";

async function ensureServiceEnvironment(p: Platform, r: Report, fresh: boolean): Promise<boolean> {
  const key = `HKLM\\SYSTEM\\CurrentControlSet\\Services\\${SERVICE_NAME}`;
  if (!fresh) {
    const q = await p.run("reg.exe", ["query", key, "/v", "Environment"]);
    if (q.code === 0 && q.stdout.includes(SERVICE_ENVIRONMENT)) return true;
  }
  const res = await p.run("reg.exe", ["add", key, "/v", "Environment", "/t", "REG_MULTI_SZ", "/d", SERVICE_ENVIRONMENT, "/f"]);
  if (res.code !== 0) {
    r.error(`reg.exe add ${key} Environment failed (exit ${res.code}): ${text(res)}`);
    return false;
  }
  if (!fresh) r.info("service: environment (fetch concurrency limit) re-applied");
  return true;
}

async function stopAndWait(p: Platform, r: Report, waitMs = 60_000): Promise<boolean> {
  const res = await sc(p, ["stop", SERVICE_NAME]);
  // 1062 = not started: it stopped by itself in the meantime, which is what we wanted.
  if (res.code !== 0 && res.code !== 1062) {
    r.error(`sc.exe stop failed (exit ${res.code}): ${text(res)}`);
    return false;
  }
  for (let waited = 0; ; waited += POLL_MS) {
    const q = await sc(p, ["query", SERVICE_NAME]);
    if (parseState(q.stdout) === STATE.STOPPED) return true;
    if (waited >= waitMs) {
      r.error(`gpu-turnstile did not stop within ${Math.round(waitMs / 1000)} s`);
      return false;
    }
    await p.sleep(POLL_MS);
  }
}

async function startAndWait(p: Platform, r: Report, waitMs = 60_000, logFile?: string): Promise<boolean> {
  const res = await sc(p, ["start", SERVICE_NAME]);
  const where = logFile ? ` (see ${logFile})` : "";
  if (res.code !== 0) {
    r.error(`sc.exe start failed (exit ${res.code}): ${text(res)}${where}`);
    return false;
  }
  for (let waited = 0; ; waited += POLL_MS) {
    const q = await sc(p, ["query", SERVICE_NAME]);
    const state = parseState(q.stdout);
    if (state === STATE.RUNNING) return true;
    if (state === STATE.STOPPED) {
      const codes = parseExitCodes(q.stdout);
      r.error(`gpu-turnstile stopped right after starting (exit code ${codes.service || codes.win32})${where}`);
      return false;
    }
    if (waited >= waitMs) {
      r.error(`gpu-turnstile did not report running within ${Math.round(waitMs / 1000)} s${where}`);
      return false;
    }
    await p.sleep(POLL_MS);
  }
}

/** -config, else GPU_TURNSTILE_CONFIG, else the file beside the exe. */
async function configSource(p: Platform, o: WindowsInstallOptions): Promise<string | null> {
  if (o.configPath) return o.configPath;
  const fromEnv = p.env[CONFIG_ENV_VAR];
  if (fromEnv) return (await p.stat(fromEnv)) ? fromEnv : null;
  const beside = `${dirOf(o.selfPath)}\\${CONFIG_FILE_NAME}`;
  return (await p.stat(beside)) ? beside : null;
}

/** The LOG_FILE the installed config sets (last one wins), or undefined. */
async function logFileOf(p: Platform, configPath: string): Promise<string | undefined> {
  const t = await p.readText(configPath);
  if (t === null) return undefined;
  try {
    const v = parseEnvFile(t, configPath).filter((e) => e.key === "LOG_FILE").at(-1)?.value;
    return v ? v : undefined;
  } catch {
    return undefined; // the service reports a broken config itself
  }
}

/**
 * icacls arguments that leave `path` readable by SYSTEM and Administrators (full control) and,
 * with `service`, the service's virtual account (read) — nobody else: inheritance is removed, so
 * the folder's "Users: read" no longer applies. Well-known SIDs, since group names are localized.
 */
export function configAclArgs(path: string, service: boolean): string[] {
  return [path, "/inheritance:r", "/grant:r", "*S-1-5-18:(F)", "*S-1-5-32-544:(F)", ...(service ? [`${VIRTUAL_ACCOUNT}:(R)`] : [])];
}

/** The exe from a registered command line (quoted or not). */
export function exeOf(binPath: string): string {
  const m = /^\s*"([^"]*)"/.exec(binPath);
  if (m) return m[1]!;
  return binPath.trim().split(/\s+/)[0] ?? "";
}

function sc(p: Platform, args: string[]): Promise<RunResult> {
  return p.run("sc.exe", args);
}

function text(res: RunResult): string {
  return (res.stdout + res.stderr).replace(/\s+/g, " ").trim();
}

function dirOf(path: string): string {
  const i = Math.max(path.lastIndexOf("\\"), path.lastIndexOf("/"));
  return i < 0 ? "." : path.slice(0, i);
}

function basename(path: string): string {
  return path.slice(Math.max(path.lastIndexOf("\\"), path.lastIndexOf("/")) + 1);
}

function normalize(path: string): string {
  return path.replace(/\//g, "\\").replace(/\\+$/, "").toLowerCase();
}

function samePath(a: string, b: string): boolean {
  return normalize(a) === normalize(b);
}

function isInside(path: string, dir: string): boolean {
  const d = normalize(dir);
  const x = normalize(path);
  return x === d || x.startsWith(`${d}\\`);
}

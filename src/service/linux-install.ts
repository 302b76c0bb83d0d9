/**
 * install-service / remove-service on Linux with systemd. Converges: running it again on an
 * installed service stops it (if running), refreshes only what changed, and starts it again only
 * if it was running. Every OS access goes through Platform, every path through `under(root, …)`.
 */
import { CONFIG_ENV_VAR, CONFIG_FILE_NAME } from "../config/load.ts";
import { applyConfig, checkInPlace, planConfig, reportProblems, type ConfigOps, type ConfigPlan } from "./install-config.ts";
import { under, type Platform } from "./platform.ts";
import { Report, type Outcome, type ReportSink } from "./report.ts";
import { diffUnits, execPathOf, hiddenBySandbox, hiddenDirOf, parseUnit, renderUnit, UNIT_NAME } from "./systemd-unit.ts";

/** The canonical layout (system paths; prefixed with Platform.root at use). */
export const LINUX_LAYOUT = {
  binDir: "/var/lib/gpu-turnstile",
  binPath: "/var/lib/gpu-turnstile/gpu-turnstile",
  configPath: "/etc/gpu-turnstile.env",
  unitPath: "/etc/systemd/system/gpu-turnstile.service",
  /** exists only while systemd runs as init (sd_booted's test) */
  systemdRunDir: "/run/systemd/system",
} as const;

export interface LinuxInstallOptions {
  /** the running executable (process.execPath of the compiled binary) */
  selfPath: string;
  /** `-config <path>`; must exist when given */
  configPath?: string;
  /** register `selfPath` where it is and leave the config alone */
  noCopy: boolean;
  version: string;
  config: ConfigOps;
  onLine?: ReportSink;
}

const JOURNAL_HINT = "see: journalctl -u gpu-turnstile -e";

export async function installLinux(p: Platform, o: LinuxInstallOptions): Promise<Outcome> {
  const r = new Report(o.onLine);
  const at = (path: string) => under(p.root, path);

  // Everything that can refuse is checked before the first change: nothing half-installed.
  if (!(await p.isElevated())) {
    r.error("install-service needs root: run it again with sudo (nothing was changed)");
    return r.done();
  }
  if (!(await preflight(p, o, r))) return r.done();
  const source = await configSource(p, o);
  if (o.noCopy && !refuseHidden(o.selfPath, source, r)) return r.done();
  // The config is settled before anything is stopped or registered: a service that could not
  // start is not installed, and the user is told which file to fix.
  const config = o.noCopy
    ? await checkInPlace(p, source ?? at(LINUX_LAYOUT.configPath), o.config, "linux")
    : await planConfig(p, {
        target: at(LINUX_LAYOUT.configPath),
        source,
        given: o.configPath !== undefined,
        version: o.version,
        platform: "linux",
        ops: o.config,
      });
  if (config.problems.length > 0) {
    if (config.writeOnFail && config.write !== null) {
      await p.mkdirp(at("/etc"), 0o755);
      await applyConfig(p, config, r, CONFIG_MODE);
    }
    reportProblems(config, r);
    return r.done();
  }

  const unitFile = at(LINUX_LAYOUT.unitPath);
  const oldUnit = await p.readText(unitFile);
  const fresh = oldUnit === null;
  let wasRunning = false;
  let wasEnabled = false;
  if (!fresh) {
    wasRunning = await isActive(p);
    wasEnabled = (await systemctl(p, ["is-enabled", UNIT_NAME])).code === 0;
    if (wasRunning) {
      if (!(await step(p, r, ["stop", UNIT_NAME], "stopped the running service for the update"))) return r.done();
    }
  }

  try {
    return await converge(p, o, r, { source, config, oldUnit, wasRunning, wasEnabled });
  } catch (e) {
    r.error(`install-service failed: ${(e as Error).message}`);
    if (wasRunning) await step(p, r, ["start", UNIT_NAME], "started the previous installation again");
    return r.done();
  }
}

/** The installed config and its .bak may hold credentials; systemd reads EnvironmentFile= as root. */
const CONFIG_MODE = 0o600;

interface Before {
  source: string | null;
  config: ConfigPlan;
  oldUnit: string | null;
  wasRunning: boolean;
  wasEnabled: boolean;
}

async function converge(p: Platform, o: LinuxInstallOptions, r: Report, b: Before): Promise<Outcome> {
  const at = (path: string) => under(p.root, path);
  const { source, config, oldUnit, wasRunning, wasEnabled } = b;
  const fresh = oldUnit === null;
  const unitFile = at(LINUX_LAYOUT.unitPath);
  let execPath = o.selfPath;
  let configPath = source ?? LINUX_LAYOUT.configPath;
  if (!o.noCopy) {
    execPath = LINUX_LAYOUT.binPath;
    configPath = LINUX_LAYOUT.configPath;
    await p.mkdirp(at(LINUX_LAYOUT.binDir), 0o755);
    const target = at(LINUX_LAYOUT.binPath);
    const [mine, installed] = await Promise.all([p.hashFile(o.selfPath), p.hashFile(target)]);
    if (mine !== installed) {
      await p.copyFile(o.selfPath, target, 0o755);
      r.info(`binary: ${installed === null ? "installed" : "updated"} ${LINUX_LAYOUT.binPath}`);
    } else {
      r.info(`binary: ${LINUX_LAYOUT.binPath} is already this version`);
    }
    await p.mkdirp(at("/etc"), 0o755);
    await applyConfig(p, config, r, CONFIG_MODE);
  } else {
    r.info(`binary: registering ${o.selfPath} where it is (--no-copy)`);
  }

  const unit = renderUnit({ execPath, configPath });
  const unitChanged = oldUnit !== unit;
  if (unitChanged) {
    await p.mkdirp(at("/etc/systemd/system"), 0o755);
    await p.writeText(unitFile, unit, 0o644);
    if (fresh) r.info(`unit: wrote ${LINUX_LAYOUT.unitPath}`);
    else {
      const drift = diffUnits(parseUnit(oldUnit), parseUnit(unit));
      r.info(`unit: updated ${LINUX_LAYOUT.unitPath}${drift.length ? `: ${drift.join("; ")}` : " (comments only)"}`);
    }
    if (!(await step(p, r, ["daemon-reload"]))) return r.done();
  } else {
    r.info(`unit: ${LINUX_LAYOUT.unitPath} is up to date`);
  }

  const startNow = fresh || wasRunning;
  if (fresh || !wasEnabled) {
    const args = startNow ? ["enable", "--now", UNIT_NAME] : ["enable", UNIT_NAME];
    if (!(await step(p, r, args, startNow ? "enabled and started gpu-turnstile" : "enabled gpu-turnstile (starts at boot)"))) {
      r.info(JOURNAL_HINT);
      return r.done();
    }
  } else if (startNow) {
    if (!(await step(p, r, ["start", UNIT_NAME], "started gpu-turnstile again"))) {
      r.info(JOURNAL_HINT);
      return r.done();
    }
  }

  if (!startNow) r.info("left stopped, as it was before (start it with: systemctl start gpu-turnstile)");
  r.info(`config: ${configPath} (after editing it: systemctl restart gpu-turnstile)`);
  r.info("logs: journalctl -u gpu-turnstile (or LOG_FILE if set)");
  // The installed binary is not on PATH: say where it is for the day it is removed.
  r.info(`remove with: sudo ${execPath} remove-service`);
  return r.done();
}

export interface LinuxRemoveOptions {
  onLine?: ReportSink;
}

/** Stops, disables and removes the unit and the installed binary; /etc/gpu-turnstile.env stays. */
export async function removeLinux(p: Platform, o: LinuxRemoveOptions = {}): Promise<Outcome> {
  const r = new Report(o.onLine);
  const at = (path: string) => under(p.root, path);
  if (!(await p.isElevated())) {
    r.error("remove-service needs root: run it again with sudo (nothing was changed)");
    return r.done();
  }
  const unitFile = at(LINUX_LAYOUT.unitPath);
  const unit = await p.readText(unitFile);
  if (unit === null) {
    r.info(`gpu-turnstile is not installed (no ${LINUX_LAYOUT.unitPath})`);
  } else {
    if (await isActive(p)) await step(p, r, ["stop", UNIT_NAME], "stopped gpu-turnstile");
    if ((await systemctl(p, ["is-enabled", UNIT_NAME])).code === 0) await step(p, r, ["disable", UNIT_NAME], "disabled gpu-turnstile");
    await p.unlink(unitFile);
    r.info(`unit: removed ${LINUX_LAYOUT.unitPath}`);
    await step(p, r, ["daemon-reload"]);
    await systemctl(p, ["reset-failed", UNIT_NAME]); // forgets a failed state; "not loaded" is fine
  }
  // Only our own copy: a --no-copy install points at the user's binary, which is not ours to delete.
  const registered = unit === null ? LINUX_LAYOUT.binPath : execPathOf(parseUnit(unit));
  if (registered === LINUX_LAYOUT.binPath && (await p.unlink(at(LINUX_LAYOUT.binPath)))) {
    r.info(`binary: removed ${LINUX_LAYOUT.binPath}`);
  }
  // Its folder goes too once nothing else is in it (a staged update would be).
  if (await p.rmdirIfEmpty(at(LINUX_LAYOUT.binDir))) r.info(`folder: removed ${LINUX_LAYOUT.binDir}`);
  if ((await p.stat(at(LINUX_LAYOUT.configPath))) !== null) r.info(`config: kept ${LINUX_LAYOUT.configPath}`);
  return r.done();
}

async function preflight(p: Platform, o: LinuxInstallOptions, r: Report): Promise<boolean> {
  if (/^bun(\.exe)?$/i.test(basename(o.selfPath))) {
    r.error(`install-service must run from the built binary, not from source (this is ${o.selfPath}); build it with: bun run build`);
    return false;
  }
  if ((await p.stat(under(p.root, LINUX_LAYOUT.systemdRunDir))) === null) {
    r.error("systemd is not running on this machine (no /run/systemd/system): install-service needs it (nothing was changed)");
    return false;
  }
  if (o.configPath !== undefined && (await p.stat(o.configPath)) === null) {
    r.error(`config file ${o.configPath} (given with -config) does not exist (nothing was changed)`);
    return false;
  }
  return true;
}

/** The user's config to install: -config, else GPU_TURNSTILE_CONFIG, else the file beside the binary. */
async function configSource(p: Platform, o: LinuxInstallOptions): Promise<string | null> {
  if (o.configPath) return o.configPath;
  const fromEnv = p.env[CONFIG_ENV_VAR];
  if (fromEnv) return (await p.stat(fromEnv)) ? fromEnv : null;
  const beside = `${dirname(o.selfPath)}/${CONFIG_FILE_NAME}`;
  return (await p.stat(beside)) ? beside : null;
}

/**
 * --no-copy leaves the binary and the config where they are: refused (before any change) when the
 * unit's own sandbox hides either from the service, which could then never start (PrivateTmp=yes
 * hides /tmp, ProtectHome=yes /home …). The list comes from the unit this install would write.
 */
function refuseHidden(binary: string, config: string | null, r: Report): boolean {
  const hidden = hiddenBySandbox(parseUnit(renderUnit({ execPath: binary, configPath: config ?? LINUX_LAYOUT.configPath })));
  let ok = true;
  for (const [what, path] of [["the binary", binary], ["the config", config]] as const) {
    const h = path === null ? undefined : hiddenDirOf(path, hidden);
    if (!h) continue;
    ok = false;
    r.error(
      `--no-copy: ${what} ${path} is in ${h.dir}, which the unit's sandbox hides from the service (${h.by}): ${what === "the binary" ? "the service could not start" : "the service would not see it"}. ` +
        `Install without --no-copy (it copies the binary to ${LINUX_LAYOUT.binPath} and the config to ${LINUX_LAYOUT.configPath}), or move the file out of ${h.dir} first (e.g. to /opt/gpu-turnstile/). Nothing was changed.`,
    );
  }
  return ok;
}

async function isActive(p: Platform): Promise<boolean> {
  const res = await systemctl(p, ["is-active", UNIT_NAME]);
  // "activating"/"reloading" exit non-zero but the service is running all the same.
  return res.code === 0 || /^(activating|reloading)/.test(res.stdout.trim());
}

function systemctl(p: Platform, args: string[]) {
  return p.run("systemctl", args);
}

/** Runs one systemctl step; on failure reports its stderr and returns false. */
async function step(p: Platform, r: Report, args: string[], success?: string): Promise<boolean> {
  const res = await systemctl(p, args);
  if (res.code !== 0) {
    const why = (res.stderr || res.stdout).trim();
    r.error(`systemctl ${args.join(" ")} failed (exit ${res.code})${why ? `: ${why}` : ""}`);
    return false;
  }
  if (success) r.info(success);
  return true;
}

function basename(path: string): string {
  return path.slice(Math.max(path.lastIndexOf("/"), path.lastIndexOf("\\")) + 1);
}

function dirname(path: string): string {
  const i = path.lastIndexOf("/");
  return i <= 0 ? "/" : path.slice(0, i);
}

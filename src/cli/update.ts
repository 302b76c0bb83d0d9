/**
 * `force-update`: the updater's check once, now (30 s, no retries). When a service is installed,
 * the binary it runs is the one replaced and the service is restarted at once; otherwise the
 * running executable is replaced and the new version applies on its next start.
 */
import { appendFileSync, existsSync } from "node:fs";
import { ConfigError, loadConfig } from "../config/load.ts";
import type { Config } from "../config/types.ts";
import { createLogger } from "../observe/log.ts";
import { useColor } from "../runtime/color.ts";
import { formatElevatedLine, relaunchElevated } from "../service/elevate.ts";
import { LINUX_LAYOUT } from "../service/linux-install.ts";
import { nodePlatform } from "../service/platform-node.ts";
import { windowsLayout } from "../service/windows-install.ts";
import { SERVICE_NAME, parseState, STATE } from "../service/windows-sc.ts";
import { forceUpdate } from "../update/index.ts";
import { VERSION } from "../version.ts";
import { configAnchor } from "./serve.ts";

export interface ForceUpdateCommandOptions {
  configPath?: string;
  elevatedLog?: string;
  argv: readonly string[];
}

interface Installed {
  exe: string;
  config: string;
}

function installedService(): Installed | undefined {
  if (process.platform === "win32") {
    const l = windowsLayout(process.env);
    return existsSync(l.exePath) ? { exe: l.exePath, config: l.configPath } : undefined;
  }
  return existsSync(LINUX_LAYOUT.binPath) ? { exe: LINUX_LAYOUT.binPath, config: LINUX_LAYOUT.configPath } : undefined;
}

/**
 * The update settings (APP_VER, UPDATE_REPO, UPDATE_ASSET) from the same file and environment the
 * turnstile uses. Updating needs no upstream, so a config that names none is not an error here.
 */
function updateSettings(configPath: string | undefined): Config {
  const load = (env: Record<string, string | undefined>) =>
    loadConfig({ argvConfigPath: configPath, env, execPath: configAnchor() }).config;
  try {
    return load(process.env);
  } catch (err) {
    if (!(err instanceof ConfigError) || !/OLLAMA_URL/.test(err.message) || !/COMFY_URL/.test(err.message)) throw err;
    return load({ ...process.env, OLLAMA_URL: "http://127.0.0.1:1" });
  }
}

export async function forceUpdateCommand(opts: ForceUpdateCommandOptions): Promise<number> {
  const installed = installedService();
  let config: Config;
  try {
    config = updateSettings(opts.configPath ?? (installed && existsSync(installed.config) ? installed.config : undefined));
  } catch (err) {
    process.stderr.write(`gpu-turnstile: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  const log = createLogger({ level: "info", format: "text", color: useColor(process.stderr) });
  const p = nodePlatform();
  const result = await forceUpdate({
    config,
    version: VERSION,
    execPath: installed?.exe ?? process.execPath,
    log,
    restartService: async () => restartService(installed !== undefined),
    elevate:
      process.platform === "win32" && !opts.elevatedLog
        ? async () => (await relaunchElevated(p, { exe: process.execPath, args: opts.argv })).exitCode
        : undefined,
  });
  if (result.message) {
    (result.exitCode === 0 ? process.stdout : process.stderr).write(`gpu-turnstile: ${result.message}\n`);
    if (opts.elevatedLog) {
      appendFileSync(opts.elevatedLog, formatElevatedLine({ level: result.exitCode === 0 ? "info" : "error", text: result.message }));
    }
  }
  return result.exitCode;
}

async function restartService(installed: boolean): Promise<"restarted" | "not-running"> {
  if (!installed) return "not-running";
  const p = nodePlatform();
  if (process.platform === "win32") {
    if (parseState((await p.run("sc.exe", ["query", SERVICE_NAME])).stdout) !== STATE.RUNNING) return "not-running";
    // The service exits with the new binary staged; stop and start it rather than wait for the idle GPU.
    const stop = await p.run("sc.exe", ["stop", SERVICE_NAME]);
    if (stop.code !== 0) throw new Error(`sc.exe stop failed (exit ${stop.code}): ${stop.stdout || stop.stderr}`);
    for (let i = 0; i < 120 && parseState((await p.run("sc.exe", ["query", SERVICE_NAME])).stdout) !== STATE.STOPPED; i++) {
      await Bun.sleep(500);
    }
    const start = await p.run("sc.exe", ["start", SERVICE_NAME]);
    if (start.code !== 0) throw new Error(`sc.exe start failed (exit ${start.code}): ${start.stdout || start.stderr}`);
    return "restarted";
  }
  const active = await p.run("systemctl", ["is-active", "--quiet", "gpu-turnstile"]);
  if (active.code !== 0) return "not-running";
  const res = await p.run("systemctl", ["restart", "gpu-turnstile"]);
  if (res.code !== 0) throw new Error(`systemctl restart failed (exit ${res.code}): ${res.stderr || res.stdout}`);
  return "restarted";
}

/**
 * `force-update`: the updater's check once, now (30 s, no retries). When a service is installed
 * (as install-service recorded it), the binary it runs is the one replaced and the service is
 * restarted at once; otherwise the running executable is replaced and the new version applies on
 * its next start.
 */
import { appendFileSync } from "node:fs";
import { ConfigError, type Env } from "../config/load.ts";
import type { Config } from "../config/types.ts";
import { createLogger } from "../observe/log.ts";
import { useColor } from "../runtime/color.ts";
import { formatElevatedLine, relaunchElevated } from "../service/elevate.ts";
import { nodePlatform } from "../service/platform-node.ts";
import { readInstalledService } from "../service/service-config.ts";
import { SERVICE_NAME, parseState, STATE } from "../service/windows-sc.ts";
import { forceUpdate } from "../update/index.ts";
import { VERSION } from "../version.ts";
import { loadClientConfig, type ClientConfig, type ClientConfigOptions } from "./client-config.ts";

export interface ForceUpdateCommandOptions {
  configPath?: string;
  elevatedLog?: string;
  argv: readonly string[];
}

export interface UpdateTarget {
  /** the update settings (APP_VER, UPDATE_REPO, UPDATE_ASSET) */
  config: Config;
  /** `config: <file> (<why>)`, or undefined when no file was read */
  said: string | undefined;
  /** the binary to replace: the installed service's, else this one */
  exe: string;
  installed: boolean;
}

/**
 * What force-update replaces and the settings it uses, found as `status` finds its config
 * (loadClientConfig): --config, GPU_TURNSTILE_CONFIG, else the config install-service recorded for
 * the service whose binary is replaced, else the file beside this binary. Updating needs no
 * upstream, so a config that names none is not an error here.
 */
export function updateTarget(o: Omit<ClientConfigOptions, "forService"> & { selfPath: string }): UpdateTarget {
  const service = (o.installedService ?? readInstalledService)();
  const load = (env: Env) => loadClientConfig({ ...o, env, forService: true, installedService: () => service });
  let loaded: ClientConfig;
  try {
    loaded = load(o.env);
  } catch (err) {
    if (!(err instanceof ConfigError) || !/OLLAMA_URL/.test(err.message) || !/COMFY_URL/.test(err.message)) throw err;
    loaded = load({ ...o.env, OLLAMA_URL: "http://127.0.0.1:1" });
  }
  return { config: loaded.loaded.config, said: loaded.said, exe: service?.exe ?? o.selfPath, installed: service !== null };
}

export async function forceUpdateCommand(opts: ForceUpdateCommandOptions): Promise<number> {
  let target: UpdateTarget;
  try {
    target = updateTarget({ configPath: opts.configPath, env: process.env, selfPath: process.execPath });
  } catch (err) {
    process.stderr.write(`gpu-turnstile: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  if (target.said) process.stderr.write(`gpu-turnstile: ${target.said}\n`);
  const log = createLogger({ level: "info", format: "text", color: useColor(process.stderr) });
  const p = nodePlatform();
  const result = await forceUpdate({
    config: target.config,
    version: VERSION,
    execPath: target.exe,
    log,
    restartService: async () => restartService(target.installed),
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

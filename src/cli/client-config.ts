/**
 * The config the client commands (`status`, `lease`, `release`, `force-update`) read to find their instance and
 * its ADMIN_TOKEN. The service does not read the file beside the binary: systemd hands it
 * /etc/gpu-turnstile.env (EnvironmentFile=), a --no-copy Windows service gets --config. So after
 * `--config` and GPU_TURNSTILE_CONFIG, the installed service's own config wins when this is the
 * binary it runs; else the file beside this binary; else, when there is none, the installed
 * service's. The command says which file it read.
 */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { CONFIG_ENV_VAR, CONFIG_FILE_NAME, ConfigError, loadConfig, type Env, type LoadResult } from "../config/load.ts";
import { readInstalledService, type InstalledService } from "../service/service-config.ts";
import { configAnchor } from "./serve.ts";

export interface ClientConfigOptions {
  configPath?: string;
  env: Env;
  /** this binary (configAnchor()) */
  execPath?: string;
  /** the installed service; default: read from the unit or the service manager */
  installedService?: () => InstalledService | null;
  /**
   * The command acts on the installed service (force-update replaces the service's binary): its
   * config, when it exists, wins over the file beside this binary, whichever copy runs the command.
   */
  forService?: boolean;
}

export interface ClientConfig {
  loaded: LoadResult;
  /** `config: <file> (<why>)`, or undefined when no file was read */
  said: string | undefined;
}

/** Loads the client's config (ConfigError as loadConfig throws it, with the file's origin added). */
export function loadClientConfig(o: ClientConfigOptions): ClientConfig {
  const execPath = o.execPath ?? configAnchor();
  let path: string | undefined;
  let why: string;
  if (o.configPath) why = "given with --config";
  else if (o.env[CONFIG_ENV_VAR]) why = `named by ${CONFIG_ENV_VAR}`;
  else {
    why = "beside this binary";
    const service = (o.installedService ?? readInstalledService)();
    const beside = join(dirname(execPath), CONFIG_FILE_NAME);
    if (service && (samePath(service.exe, execPath) || ((o.forService || !existsSync(beside)) && existsSync(service.config)))) {
      path = service.config;
      why = `the installed service's config: ${service.recordedIn}`;
    }
  }
  try {
    const loaded = loadConfig({ argvConfigPath: o.configPath ?? path, env: o.env, execPath });
    return { loaded, said: loaded.source.found ? `config: ${loaded.source.path} (${why})` : undefined };
  } catch (err) {
    if (err instanceof ConfigError && path !== undefined) {
      const hint = (p: string) => (/EACCES|EPERM|permission denied/i.test(p) ? "; it may hold credentials: run this as root (sudo) to read it, or name the instance with --url" : "");
      throw new ConfigError(err.problems.map((p) => `${p} (${why}${hint(p)})`));
    }
    throw err;
  }
}

function samePath(a: string, b: string): boolean {
  return process.platform === "win32" || /^[a-z]:\\/i.test(a) ? a.toLowerCase() === b.toLowerCase() : a === b;
}

/**
 * Where STATE_DIR points when it is left empty: the folder the service manager gives the service
 * for its state, so what is kept there (the GPU lease) survives a restart, an update and a reboot.
 */
import { homedir } from "node:os";
import { posix, win32 } from "node:path";
import type { ConfigSource } from "./load.ts";
import { currentPlatform, type Platform } from "./settings.ts";
import type { Config } from "./types.ts";

export interface StateDirInput {
  env: Readonly<Record<string, string | undefined>>;
  platform: Platform;
  /** The config file in use; undefined when none was found. */
  configFile: string | undefined;
  /** The user's home folder (os.homedir()). */
  home: string;
}

/**
 * systemd's StateDirectory= (it sets $STATE_DIRECTORY, a colon-separated list when the unit names
 * several), then ProgramData on Windows (where install-service puts the service's data), then a
 * folder beside the config file. Without a config file there is nothing to sit beside: the XDG
 * state folder of the user who runs it, which outlives a reboot where /tmp would not.
 */
export function defaultStateDir(i: StateDirInput): string {
  const systemd = i.env.STATE_DIRECTORY?.split(":")[0];
  if (systemd) return systemd;
  if (i.platform.os === "win32") return win32.join(i.env.ProgramData || "C:\\ProgramData", "gpu-turnstile");
  if (i.configFile) return posix.join(posix.dirname(i.configFile), "gpu-turnstile-state");
  return posix.join(i.env.XDG_STATE_HOME || posix.join(i.home, ".local", "state"), "gpu-turnstile");
}

/** A copy of `config` with STATE_DIR as a start uses it: the folder, not the empty value that stands for it. */
export function withStateDir(config: Config, source: ConfigSource, env: StateDirInput["env"]): Config {
  return { ...config, stateDir: config.stateDir || defaultStateDir({ env, platform: currentPlatform(), configFile: source.found ? source.path : undefined, home: homedir() }) };
}

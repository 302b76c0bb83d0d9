/**
 * The LOG_FORMAT a fatal start error is written in when the configuration as a whole did not load
 * (so no logger exists yet): the environment's LOG_FORMAT, else the config file's, else text. A
 * file that cannot be read or parsed, or a LOG_FORMAT that is itself invalid, falls back to the
 * next source: the error must be said whatever state the config is in.
 */
import { parseEnvFile } from "./envfile.ts";
import { chooseFile, defaultReadFile, type LoadOptions } from "./load.ts";
import { quickParse } from "./schema.ts";
import { settingForKey } from "./settings.ts";
import type { Config } from "./types.ts";

type LogFormat = Config["logFormat"];

export function earlyLogFormat(opts: LoadOptions): LogFormat {
  const def = settingForKey("LOG_FORMAT")!;
  const keys = [def.key, ...(def.aliases ?? [])];
  const valid = (text: string | undefined) => (text ? (quickParse(def, text) as LogFormat | undefined) : undefined);
  // Same precedence as loadConfig: a key beats its alias within one source, the environment beats the file.
  for (const key of keys) {
    const fromEnv = valid(opts.env[key]);
    if (fromEnv) return fromEnv;
  }
  try {
    const text = (opts.readFile ?? defaultReadFile)(chooseFile(opts).path);
    const entries = text === null ? [] : parseEnvFile(text, "config");
    for (const key of keys) {
      const fromFile = valid(entries.filter((e) => e.key === key).at(-1)?.value);
      if (fromFile) return fromFile;
    }
  } catch {
    // Unreadable or malformed: that is the error being reported; it is said in text.
  }
  return "text";
}


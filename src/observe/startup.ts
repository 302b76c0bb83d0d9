/**
 * The start-up banner's settings. Text logs list them one `KEY=value` line each, as the config
 * file spells them (describeConfig); JSON logs give them as one object on the start line, with
 * durations as numbers in milliseconds, like every duration in a JSON log.
 */
import { redactUrl } from "../config/redact.ts";
import { SETTINGS } from "../config/settings.ts";
import type { Config } from "../config/types.ts";

export type SettingsObject = Record<string, string | number | boolean>;

export function settingsObject(config: Config): SettingsObject {
  const out: SettingsObject = {};
  for (const def of SETTINGS) {
    const value = config[def.field];
    if (def.secret) out[def.key] = value === "" ? "" : "***";
    else if (def.kind === "url" && typeof value === "string") out[def.key] = redactUrl(value);
    else out[def.key] = value;
  }
  return out;
}

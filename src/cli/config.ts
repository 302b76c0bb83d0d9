/**
 * `config`: every setting with its default and meaning, from the one table in
 * src/config/settings.ts; `config --sample` prints the config file an install would write.
 */
import { CONFIG_ENV_VAR, CONFIG_FILE_NAME } from "../config/load.ts";
import { renderSample } from "../config/sample.ts";
import { currentPlatform } from "../config/settings.ts";
import { renderSettingsText } from "../config/table.ts";
import { configVersion } from "../service/index.ts";

/** Where settings come from, then one entry per setting. */
export function settingsHelp(): string {
  return [
    "SETTINGS",
    "",
    `  KEY=VALUE lines in the config file (${CONFIG_FILE_NAME} next to the executable,`,
    `  the file named by ${CONFIG_ENV_VAR}, or --config <path>), or environment`,
    "  variables of the same name, which win. An empty value means the default.",
    "",
    renderSettingsText(currentPlatform()),
  ].join("\n");
}

export function configCommand(opts: { sample: boolean; version: string }): string {
  return opts.sample ? renderSample({ version: configVersion(opts.version), platform: currentPlatform() }) : settingsHelp();
}

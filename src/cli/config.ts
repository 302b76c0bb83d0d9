/**
 * `config`: every setting with its default and meaning, from the one table in
 * src/config/settings.ts; `config --sample` prints the config file an install would write;
 * `config --config FILE` checks a config without starting anything and prints every setting with
 * its value and where that came from.
 */
import { redactCredentials } from "../config/redact.ts";
import { CONFIG_ENV_VAR, CONFIG_FILE_NAME, ConfigError, describeConfig, loadConfig } from "../config/load.ts";
import { renderSample } from "../config/sample.ts";
import { currentPlatform } from "../config/settings.ts";
import { withStateDir } from "../config/state-dir.ts";
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

/** `config --config FILE`: exit 0 and every effective setting, or 1 and every problem. */
export function checkConfigCommand(opts: { configPath: string; env: Record<string, string | undefined>; execPath: string; out: (s: string) => void; err: (s: string) => void }): number {
  let loaded;
  try {
    loaded = loadConfig({ argvConfigPath: opts.configPath, env: opts.env, execPath: opts.execPath });
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    opts.err([e.message, ...e.problems.slice(1).map((p) => `config error: ${p}`)].map((l) => `gpu-turnstile: ${redactCredentials(l)}\n`).join(""));
    return 1;
  }
  // The folder a start would use (serve.ts resolves it the same way).
  const lines = describeConfig(withStateDir(loaded.config, loaded.source, opts.env));
  const width = Math.min(44, Math.max(...lines.map((l) => l.length)));
  let text = `${opts.configPath}: valid; with the environment, the turnstile would start with:\n`;
  for (const line of lines) {
    const key = line.slice(0, line.indexOf("="));
    text += `  ${line.padEnd(width)}  # ${loaded.origins[key] ?? "default"}\n`;
  }
  for (const w of loaded.warnings) text += `warning: ${w}\n`;
  opts.out(text);
  return 0;
}

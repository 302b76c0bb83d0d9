export type { BusyMode, Config, LogFormat, LogLevel } from "./types.ts";
export { DurationError, formatDuration, parseDuration } from "./duration.ts";
export { EnvFileError, formatEnvValue, parseEnvFile, splitLines, type EnvEntry } from "./envfile.ts";
export { ListenError, parseListen, type ListenAddress } from "./listen.ts";
export {
  buildConfig,
  CONFIG_ENV_VAR,
  CONFIG_FILE_NAME,
  ConfigError,
  defaultReadFile,
  describeConfig,
  loadConfig,
  type BuildInput,
  type ConfigSource,
  type Env,
  type LoadOptions,
  type LoadResult,
  type ReadFile,
} from "./load.ts";
export { redactCredentials, redactUrl } from "./redact.ts";
export { migrateConfig, renderSample, type MigrateResult, type SampleOptions } from "./sample.ts";
export { parseSetting, settingSchema, type SettingSchema, type SettingValue } from "./schema.ts";
export {
  currentPlatform,
  defaultText,
  knownKeys,
  MAX_TIMER_MS,
  SETTINGS,
  settingForKey,
  updateAssetFor,
  type Platform,
  type SettingDef,
  type SettingKind,
} from "./settings.ts";
export { renderSettingsMarkdownTable } from "./table.ts";
export { compareVersions, DEV_VERSION, isVersion, parseVersion, type Version } from "./version.ts";

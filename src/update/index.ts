export { startUpdater, UPDATE_EXIT_CODE } from "./updater.ts";
export type { Updater, UpdaterOptions } from "./updater.ts";
export { forceUpdate, FORCE_UPDATE_TIMEOUT_MS } from "./force-update.ts";
export type { ForceUpdateOptions, ForceUpdateResult } from "./force-update.ts";
export { cleanupAfterStart } from "./stage.ts";
export { checkOnce } from "./check.ts";
export type { CheckOutcome } from "./check.ts";

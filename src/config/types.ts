import type { ImageKind, LlmKind } from "./tenant-kinds.ts";

/** The effective configuration, after file + environment + defaults. Durations are milliseconds. */
export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFormat = "text" | "json";
export type BusyMode = "wait" | "reject";

export interface Config {
  listenOllama: string;
  listenComfy: string;
  /** "" = no nested listener */
  listenOllamaNested: string;
  /** ALLOWED_HOSTS as written; "" = the local names only */
  allowedHosts: string;
  /** "" = consumer disabled */
  ollamaUrl: string;
  /** "" = consumer disabled */
  comfyUrl: string;
  /** Which server OLLAMA_URL is (src/tenants/registry.ts). */
  llmKind: LlmKind;
  /** "" = no token sent to LM Studio */
  lmstudioToken: string;
  /** Which server COMFY_URL is. */
  imageKind: ImageKind;
  /** SwarmUI session the turnstile's own calls use; "" = obtained from GetNewSession (IMAGE_KIND=swarmui). */
  swarmuiSession: string;
  /** SwarmUI account token, sent as the swarm_user_token cookie; "" = SwarmUI without accounts. */
  swarmuiToken: string;
  unloadTimeoutMs: number;
  jobTimeoutMs: number;
  imageSessionMaxMs: number;
  /** Issue 30: fair turns across clients; FAIR_CLASSES as written; CLIENTS_FILE ("" = none). */
  fairTurns: boolean;
  fairClasses: string;
  /** FAIR_CHATS_FIRST as written: class names. */
  fairChatsFirst: string;
  /** QUOTA_IMAGE_JOBS: 0 = no limit. */
  quotaImageJobs: number;
  /** QUOTA_LLM_REQUESTS: 0 = no limit. */
  quotaLlmRequests: number;
  /** QUOTA_GPU_SECONDS as written: seconds, or class:seconds pairs; 0 = no limit. */
  quotaGpuSeconds: string;
  quotaGpuWindowMs: number;
  clientsFile: string;
  llmWaitTimeoutMs: number;
  /** 0 = no limit */
  llmIdleTimeoutMs: number;
  clientIdleTimeoutMs: number;
  llmDrainTimeoutMs: number;
  llmBusyMode: BusyMode;
  llmBusyStatus: number;
  /** "auto" = estimated per answer (jobs/busy-estimate.ts) */
  busyRetryAfterS: number | "auto";
  warmModel: string;
  coexist: boolean;
  /** COEXIST_MODELS as written; "" = none */
  coexistModels: string;
  /** COEXIST_MARGIN as written ("1GiB"); jobs/coexist-rule.ts parseSize reads it */
  coexistMargin: string;
  coexistPollIntervalMs: number;
  logLevel: LogLevel;
  logFormat: LogFormat;
  logFile: string;
  unloadPollIntervalMs: number;
  historyPollIntervalMs: number;
  freePollIntervalMs: number;
  probeTimeoutMs: number;
  healthIntervalMs: number;
  freeTimeoutMs: number;
  warmTimeoutMs: number;
  shutdownTimeoutMs: number;
  backoffInitialMs: number;
  backoffMaxMs: number;
  upstreamRetryTimeoutMs: number;
  promptCaptureLimit: number;
  retryBodyLimit: number;
  autoUpdate: boolean;
  updateIntervalMs: number;
  updateRepo: string;
  updateAsset: string;
  /** "" = only loopback clients are trusted */
  leaseMaxTtlMs: number;
  /** "" = the default folder, resolved at start by defaultStateDir (config/state-dir.ts) */
  stateDir: string;
  adminToken: string;
  /** TRUSTED_PROXIES as written; "" = none */
  trustedProxies: string;
  /** "" = the host name (resolved at start) */
  cardName: string;
  /** "" = no agent-check port */
  agentListen: string;
  appVer: string;
  cfgVer: string;
}

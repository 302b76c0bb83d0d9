/**
 * THE table of settings. Everything else — parsing, validation, the startup description, the
 * sample config, migration, the README/SPEC table — is derived from it, so adding a setting is
 * one row here plus its field in types.ts.
 */
import type { Config } from "./types.ts";
import { IMAGE_KIND_ALIASES, IMAGE_KINDS, LLM_KINDS } from "./tenant-kinds.ts";

export type SettingKind = "duration" | "int" | "string" | "url" | "listen" | "enum" | "bool";

/** The OS and CPU a default is computed for; injectable so tests and cross-builds can ask for another. */
export interface Platform {
  os: NodeJS.Platform;
  arch: string;
}

export function currentPlatform(): Platform {
  return { os: process.platform, arch: process.arch };
}

/** setTimeout fires at once (with a warning) above 2^31-1 ms, so no duration may exceed it (~24.8 days). */

const OCTET = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
const PROXY = `((${OCTET}(\\.${OCTET}){3}(\\/(3[0-2]|[12]?\\d))?)|(\\[?[0-9A-Fa-f]*:[0-9A-Fa-f:.]*\\]?(\\/(12[0-8]|1[01]\\d|[1-9]?\\d))?))`;
/** TRUSTED_PROXIES: comma-separated addresses or ranges, or nothing. */
const TRUSTED_PROXIES_PATTERN = new RegExp(`^\\s*(${PROXY}(\\s*,\\s*${PROXY})*)?\\s*$`);

export const MAX_TIMER_MS = 2 ** 31 - 1;

export interface SettingDef {
  /** env / file key */
  readonly key: string;
  /** older spellings still read; `key` wins when both are set in the same source */
  readonly aliases?: readonly string[];
  readonly field: keyof Config;
  /** as it would be written in the env file; "" = empty */
  readonly default: string | ((platform: Platform) => string);
  /** for documentation when the default is not a single literal */
  readonly defaultDoc?: string;
  readonly kind: SettingKind;
  /** enum: allowed values (lowercase; input is matched case-insensitively) */
  readonly values?: readonly string[];
  /** enum: other names read as one of `values` (lowercase), e.g. IMAGE_KIND's forge = a1111 */
  readonly valueAliases?: Readonly<Record<string, string>>;
  /** int: inclusive bounds; duration: `max` is the longest value, in ms */
  readonly min?: number;
  readonly max?: number;
  /** int: the word "auto" is accepted too (the value is then the string "auto") */
  readonly auto?: boolean;
  /** duration: 0 is meaningful (see doc); otherwise a duration must be > 0 */
  readonly allowZero?: boolean;
  /** string: the value must match (an empty value never reaches this: empty = use the default) */
  readonly pattern?: RegExp;
  /** string: what `pattern` expects, for the error message */
  readonly expected?: string;
  /** a credential: masked in the startup description, never logged */
  readonly secret?: boolean;
  /** one line for the sample config, README and SPEC */
  readonly doc: string;
}

export function updateAssetFor(p: Platform): string {
  if (p.os === "win32") return "gpu-turnstile.exe";
  return `gpu-turnstile-${p.os}-${p.arch}`;
}

export const SETTINGS: readonly SettingDef[] = [
  {
    key: "LISTEN_OLLAMA",
    field: "listenOllama",
    default: ":11434",
    kind: "listen",
    doc: 'Listener for Ollama clients: ":port" (all interfaces), "host:port" or "[ipv6]:port".',
  },
  {
    key: "LISTEN_COMFY",
    field: "listenComfy",
    default: ":8188",
    kind: "listen",
    doc: "Listener for ComfyUI clients (same forms as LISTEN_OLLAMA).",
  },
  {
    key: "LISTEN_OLLAMA_NESTED",
    field: "listenOllamaNested",
    default: "",
    defaultDoc: "_(empty = off)_",
    kind: "listen",
    doc: "A second Ollama listener for LLM calls made from inside ComfyUI workflows (prompt-enhancer nodes): during an image job they are served at once and share the card with the job; otherwise it is an ordinary Ollama listener.",
  },
  {
    key: "ALLOWED_HOSTS",
    field: "allowedHosts",
    default: "",
    defaultDoc: "_(empty = local names only)_",
    kind: "string",
    pattern: /^\s*(\*|(\*\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*|\[?[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]?)(\s*,\s*(\*|(\*\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*|\[?[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]?))*\s*$/,
    expected: 'comma-separated host names, "*.suffix" wildcards or addresses, or "*"',
    doc: 'More Host names a loopback-bound listener answers (DNS-rebinding guard, as Ollama\'s): e.g. "gpu.lan,*.home.arpa"; "*" = any. A listener on all interfaces answers any Host.',
  },
  {
    key: "OLLAMA_URL",
    field: "ollamaUrl",
    default: "",
    defaultDoc: "_(empty = disabled)_",
    kind: "url",
    doc: "Ollama upstream, e.g. http://127.0.0.1:11435; empty disables the Ollama side.",
  },
  {
    key: "COMFY_URL",
    field: "comfyUrl",
    default: "",
    defaultDoc: "_(empty = disabled)_",
    kind: "url",
    doc: "ComfyUI upstream, e.g. http://127.0.0.1:8189; empty disables the ComfyUI side.",
  },
  {
    key: "LLM_KIND",
    field: "llmKind",
    default: "ollama",
    kind: "enum",
    values: LLM_KINDS,
    doc: "Which server OLLAMA_URL (the LLM side) is: ollama, llama-server (llama.cpp router mode), llama-swap, lmstudio (LM Studio REST v1) or vllm (sleep mode); see Tenants.",
  },
  {
    key: "LMSTUDIO_TOKEN",
    field: "lmstudioToken",
    default: "",
    defaultDoc: "_(empty = none sent)_",
    kind: "string",
    secret: true,
    doc: "With LLM_KIND=lmstudio: the API token the turnstile sends (Authorization: Bearer) on its own calls to LM Studio (listing and unloading models) when the server requires one; clients send their own.",
  },
  {
    key: "IMAGE_KIND",
    field: "imageKind",
    default: "comfyui",
    kind: "enum",
    values: IMAGE_KINDS,
    valueAliases: IMAGE_KIND_ALIASES,
    doc: "Which server COMFY_URL (the image side) is: comfyui, a1111 (AUTOMATIC1111 and Forge; forge is read as a1111) or swarmui; see Tenants.",
  },
  {
    key: "SWARMUI_SESSION",
    field: "swarmuiSession",
    default: "",
    defaultDoc: "_(empty = obtained automatically)_",
    kind: "string",
    secret: true,
    pattern: /^[\x21-\x7e]*$/,
    expected: "printable characters without spaces",
    doc: "SwarmUI image side: the session_id the turnstile's own calls (FreeBackendMemory, ListBackends, GetCurrentStatus) use; empty = one from GetNewSession. Either is renewed when SwarmUI answers invalid_session_id.",
  },
  {
    key: "SWARMUI_TOKEN",
    field: "swarmuiToken",
    default: "",
    defaultDoc: "_(empty = SwarmUI without accounts)_",
    kind: "string",
    secret: true,
    pattern: /^[\x21-\x7e]*$/,
    expected: "printable characters without spaces",
    doc: "SwarmUI image side with accounts required: a user token, sent as the swarm_user_token cookie on the turnstile's own calls (its user needs the control_mem_clean, view_backends_list and comfy_direct_calls permissions).",
  },
  {
    key: "UNLOAD_TIMEOUT",
    field: "unloadTimeoutMs",
    default: "60s",
    kind: "duration",
    doc: "How long to wait for the LLM side (Ollama, or the LLM_KIND server) to give back its models' memory before an image job starts, and to wake again after one.",
  },
  {
    key: "JOB_TIMEOUT",
    field: "jobTimeoutMs",
    default: "15m",
    kind: "duration",
    doc: "How long one image job (a ComfyUI prompt, an a1111 or swarmui generation request) may run; past it, it is interrupted (the watchdog).",
  },
  {
    key: "IMAGE_SESSION_MAX",
    field: "imageSessionMaxMs",
    default: "5m",
    kind: "duration",
    allowZero: true,
    doc: "While LLM requests wait, how long an image session keeps admitting new image jobs (they queue in ComfyUI, the checkpoint stays loaded); 0 = one image job per GPU cycle.",
  },
  {
    key: "FAIR_TURNS",
    field: "fairTurns",
    default: "true",
    kind: "bool",
    doc: "Waiting image jobs go in turns across clients (told apart by API key, else ComfyUI client_id, else address), and an image session holds one job per client at a time in ComfyUI, so one client's batch keeps another's single image waiting behind at most one of its jobs; false = first come, first served.",
  },
  {
    key: "FAIR_CLASSES",
    field: "fairClasses",
    default: "interactive:4,normal:2,batch:1",
    kind: "string",
    pattern: /^(?=(?:.*,)?\s*normal:)\s*[a-z][a-z0-9_-]{0,31}:\d{1,3}(\s*,\s*[a-z][a-z0-9_-]{0,31}:\d{1,3})*\s*$/,
    expected: "name:weight pairs, best first, including normal (e.g. interactive:4,normal:2,batch:1)",
    doc: "Client classes for fair turns, best first, as name:weight (weight 1-100): while both wait, a class's clients get `weight` turns for each turn of a weight-1 client; must include normal, the class of every client CLIENTS_FILE does not name.",
  },
  {
    key: "FAIR_CHATS_FIRST",
    field: "fairChatsFirst",
    default: "batch",
    kind: "string",
    pattern: /^\s*[a-z][a-z0-9_-]{0,31}(\s*,\s*[a-z][a-z0-9_-]{0,31})*\s*$/,
    expected: "class names from FAIR_CLASSES, comma-separated (e.g. batch)",
    doc: "Classes (from FAIR_CLASSES) whose image jobs give way to chats: while a chat waits, none of their jobs joins or opens an image session, so a chat waits at most for the one job each of their clients has in ComfyUI; a steady stream of chats can then hold them back.",
  },
  {
    key: "QUOTA_IMAGE_JOBS",
    field: "quotaImageJobs",
    default: "0",
    kind: "int",
    min: 0,
    max: 100_000,
    doc: "Most image jobs one client may have waiting or running at once (a client's own images=N in CLIENTS_FILE wins); past it a new one is refused on arrival with 429 and Retry-After, never one already accepted; 0 = no limit.",
  },
  {
    key: "QUOTA_LLM_REQUESTS",
    field: "quotaLlmRequests",
    default: "0",
    kind: "int",
    min: 0,
    max: 100_000,
    doc: "Most LLM requests one client may have waiting or running at once (a client's own llm=N in CLIENTS_FILE wins); past it a new one is refused on arrival with 429 and Retry-After in its API's shape; 0 = no limit.",
  },
  {
    key: "QUOTA_GPU_SECONDS",
    field: "quotaGpuSeconds",
    default: "0",
    kind: "string",
    pattern: /^\s*([a-z][a-z0-9_-]{0,31}:)?\d{1,7}(\s*,\s*([a-z][a-z0-9_-]{0,31}:)?\d{1,7})*\s*$/,
    expected: "seconds, or class:seconds pairs, comma-separated (e.g. 1800 or 1800,batch:600)",
    doc: "Seconds of GPU time each client may use per QUOTA_GPU_WINDOW: an image job's run, an LLM request's time from its GPU slot to its end (concurrent requests each count their own time). One number for every client, or class:seconds for a class of FAIR_CLASSES (1800,batch:600: batch clients 600 s each, others 1800 s); a client's own gpu=N in CLIENTS_FILE wins. Past it new work is refused on arrival with 429 and Retry-After (when enough of the window has passed), never work already accepted, so the last job may take a client past it; 0 = no limit.",
  },
  {
    key: "QUOTA_GPU_WINDOW",
    field: "quotaGpuWindowMs",
    default: "1h",
    kind: "duration",
    doc: "The sliding window QUOTA_GPU_SECONDS and gpu=N count over (kept in 120 steps, so it is exact to 1/120 of its length).",
  },
  {
    key: "CLIENTS_FILE",
    field: "clientsFile",
    default: "",
    defaultDoc: "_(empty = none)_",
    kind: "string",
    doc: "A file naming clients, one a line: `name class key=<API key> client_id=<prefix> cidr=<range> images=<quota> llm=<quota> gpu=<seconds>` (any of the first three, repeatable); empty = clients are named by a hash of their key or client_id, or by their address, all in class normal. Keys are kept only as hashes and never shown.",
  },
  {
    key: "LLM_WAIT_TIMEOUT",
    field: "llmWaitTimeoutMs",
    default: "10m",
    kind: "duration",
    doc: "Longest an LLM request waits for the GPU before it gets a 503 (wait mode).",
  },
  {
    key: "LLM_DRAIN_TIMEOUT",
    field: "llmDrainTimeoutMs",
    default: "5m",
    kind: "duration",
    allowZero: true,
    doc: "Longest running LLM requests may keep the GPU from an image job (or lease) that waits for them; past it they are cut, as a force-release cuts them, and it is logged; a stream that keeps streaming is ended too; 0 = no limit.",
  },
  {
    key: "LLM_IDLE_TIMEOUT",
    field: "llmIdleTimeoutMs",
    default: "5m",
    kind: "duration",
    allowZero: true,
    doc: "An LLM request that holds the GPU while no byte moves (request body, upstream answer, client reading) for this long is ended and its slot freed; the default leaves room for a large model loading before its first token; 0 = no limit.",
  },
  {
    key: "CLIENT_IDLE_TIMEOUT",
    field: "clientIdleTimeoutMs",
    default: "1m",
    kind: "duration",
    allowZero: true,
    // Bun's idleTimeout counts whole seconds, at most 255 (proxy/client-idle.ts).
    max: 255_000,
    doc: "A client connection with no request in flight that sends nothing for this long is closed, also one stopped half-way through a request head (slowloris), so idle sockets cannot pile up; a request waiting for the GPU, a stream and a /ws relay are never cut. Counted in whole seconds (rounded up), at most 4m15s; Bun checks every 4 s, so a connection may stay up to 4 s longer; 0 = never.",
  },
  {
    key: "LLM_BUSY_MODE",
    field: "llmBusyMode",
    default: "wait",
    kind: "enum",
    values: ["wait", "reject"],
    doc: '"wait" holds LLM requests while an image job runs; "reject" answers them at once with LLM_BUSY_STATUS.',
  },
  {
    key: "LLM_BUSY_STATUS",
    field: "llmBusyStatus",
    default: "503",
    kind: "int",
    min: 400,
    max: 599,
    doc: "HTTP status for LLM requests rejected in reject mode (400-599, e.g. 429).",
  },
  {
    key: "BUSY_RETRY_AFTER",
    field: "busyRetryAfterS",
    default: "auto",
    kind: "int",
    auto: true,
    min: 0,
    max: 86_400,
    doc: "Retry-After on busy responses (both modes): auto = estimated from the running image job, the jobs queued and the last free (1-300 s); or a fixed number of seconds.",
  },
  {
    key: "WARM_MODEL",
    field: "warmModel",
    default: "",
    kind: "string",
    doc: "Ollama model to load again after an image job; empty = none.",
  },
  {
    key: "COEXIST",
    field: "coexist",
    default: "false",
    kind: "bool",
    doc: "Let a model of COEXIST_MODELS stay on the card, and be served, beside an image job when measured memory says it fits (SPEC \"Co-residency\"); false = Ollama is emptied before every image job.",
  },
  {
    key: "COEXIST_MODELS",
    field: "coexistModels",
    default: "",
    defaultDoc: "_(empty = none)_",
    kind: "string",
    pattern: /^\s*[A-Za-z0-9*][A-Za-z0-9._:/*-]*(\s*,\s*[A-Za-z0-9*][A-Za-z0-9._:/*-]*)*\s*$/,
    expected: "model names or patterns separated by commas, like nomic-embed-text, qwen2.5:3b, mxbai-*",
    doc: "With COEXIST: the models allowed to stay beside an image job, by name (a bare name matches its tags) or pattern (* matches any run), separated by commas.",
  },
  {
    key: "COEXIST_MARGIN",
    field: "coexistMargin",
    default: "1GiB",
    kind: "string",
    pattern: /^\s*[0-9]+(\.[0-9]+)?\s*(MiB|GiB)\s*$/i,
    expected: "a size like 1GiB or 512MiB",
    doc: "With COEXIST: the card's memory that must stay free at every moment; below it during a job the co-resident model is unloaded at once.",
  },
  {
    key: "COEXIST_POLL_INTERVAL",
    field: "coexistPollIntervalMs",
    default: "250ms",
    kind: "duration",
    doc: "With COEXIST: how often ComfyUI's free memory is read during an image session; COEXIST_MARGIN must cover what a workflow can grow in this time.",
  },
  {
    key: "LOGLEVEL",
    aliases: ["LOG_LEVEL"],
    field: "logLevel",
    default: "warn",
    kind: "enum",
    values: ["debug", "info", "warn", "error"],
    doc: "warn (the default: what needs a look, plus one summary per image job, upstream up/down and leases), info (adds a line per job phase and two per request), debug (adds lock transitions) or error; LOG_LEVEL is an alias, LOGLEVEL wins if both are set.",
  },
  {
    key: "LOG_FORMAT",
    field: "logFormat",
    default: "text",
    kind: "enum",
    values: ["text", "json"],
    doc: "text, or json for one JSON object per line.",
  },
  {
    key: "LOG_FILE",
    field: "logFile",
    default: "",
    kind: "string",
    doc: "Append logs to this file instead of stderr (useful as a service); empty = stderr.",
  },
  {
    key: "UNLOAD_POLL_INTERVAL",
    field: "unloadPollIntervalMs",
    default: "500ms",
    kind: "duration",
    doc: "How often the LLM side's own report (Ollama's /api/ps, or the LLM_KIND server's) is read while its models unload.",
  },
  {
    key: "HISTORY_POLL_INTERVAL",
    field: "historyPollIntervalMs",
    default: "1s",
    kind: "duration",
    doc: "How often a running image job is looked up in ComfyUI (/api/jobs/<id>, or /queue and /history/<id> on an older ComfyUI; a lost job is noticed within two reads).",
  },
  {
    key: "FREE_POLL_INTERVAL",
    field: "freePollIntervalMs",
    default: "250ms",
    kind: "duration",
    doc: "How often the image side's memory is read after its release until it is back: ComfyUI's /system_stats after /free (every 20 ms at most in the first second, when ComfyUI's worker usually unloads), or the IMAGE_KIND server's own report.",
  },
  {
    key: "PROBE_TIMEOUT",
    field: "probeTimeoutMs",
    default: "5s",
    kind: "duration",
    doc: "Timeout of each upstream probe (the startup probe, the reads that pick up ComfyUI's jobs at start, every health check).",
  },
  {
    key: "HEALTH_INTERVAL",
    field: "healthIntervalMs",
    default: "30s",
    kind: "duration",
    allowZero: true,
    doc: "Interval of upstream health probes (down/recovered changes are logged); 0 = probe only at startup.",
  },
  {
    key: "FREE_TIMEOUT",
    field: "freeTimeoutMs",
    default: "30s",
    kind: "duration",
    doc: "Longest wait for the image side's release (ComfyUI's POST /free, or the IMAGE_KIND server's) and for its memory to show as released after an image job.",
  },
  {
    key: "WARM_TIMEOUT",
    field: "warmTimeoutMs",
    default: "2m",
    kind: "duration",
    doc: "Timeout of the WARM_MODEL reload after an image job.",
  },
  {
    key: "SHUTDOWN_TIMEOUT",
    field: "shutdownTimeoutMs",
    default: "10s",
    kind: "duration",
    allowZero: true,
    doc: "How long a shutdown (SIGINT/SIGTERM, service stop) waits for requests in flight; 0 = not at all.",
  },
  {
    key: "BACKOFF_INITIAL",
    field: "backoffInitialMs",
    default: "1s",
    kind: "duration",
    doc: "First retry wait when an upstream refuses a connection.",
  },
  {
    key: "BACKOFF_MAX",
    field: "backoffMaxMs",
    default: "60s",
    kind: "duration",
    doc: "Cap for the exponential retry backoff (at least BACKOFF_INITIAL).",
  },
  {
    key: "UPSTREAM_RETRY_TIMEOUT",
    field: "upstreamRetryTimeoutMs",
    default: "2m",
    kind: "duration",
    doc: "How long a request is retried while its upstream refuses connections before the client gets a 502.",
  },
  {
    key: "PROMPT_CAPTURE_LIMIT",
    field: "promptCaptureLimit",
    default: "65536",
    kind: "int",
    min: 1024,
    max: 1 << 30,
    doc: "Bytes of a /prompt response buffered to find its prompt_id (pass-through is unaffected).",
  },
  {
    key: "RETRY_BODY_LIMIT",
    field: "retryBodyLimit",
    default: "262144",
    kind: "int",
    min: 0,
    max: 1 << 30,
    doc: "Request bodies up to this many bytes with a Content-Length are buffered so a 5xx can be replayed; larger or chunked ones stream and are never replayed; 0 = never buffer.",
  },
  {
    key: "LEASE_MAX_TTL",
    field: "leaseMaxTtlMs",
    default: "12h",
    kind: "duration",
    doc: "The longest TTL a GPU lease (POST /turnstile/lease, gpu-turnstile lease) may ask for at a time; a lease not renewed within its TTL ends.",
  },
  {
    key: "STATE_DIR",
    field: "stateDir",
    default: "",
    defaultDoc: "_(empty = the service's state folder)_",
    kind: "string",
    doc: "Folder for what must outlive a restart (the GPU lease, when running image jobs began); empty = systemd's $STATE_DIRECTORY, %ProgramData%\\gpu-turnstile on Windows, else gpu-turnstile-state beside the config file (~/.local/state/gpu-turnstile when there is none).",
  },
  {
    key: "ADMIN_TOKEN",
    field: "adminToken",
    default: "",
    defaultDoc: "_(empty = loopback only)_",
    kind: "string",
    secret: true,
    pattern: /^[\x21-\x7e]{16,}$/,
    expected: "at least 16 printable characters without spaces",
    doc: "Bearer token that lets clients other than loopback see client addresses under /turnstile/ (and steer the GPU); a wrong token is refused even from loopback.",
  },
  {
    key: "TRUSTED_PROXIES",
    field: "trustedProxies",
    default: "",
    defaultDoc: "_(empty = none)_",
    kind: "string",
    // IPv4 in full (octets, prefix length) so a typo names its line; an IPv6 address only by its
    // shape here, read in full by fair/forwarded.ts at start.
    pattern: TRUSTED_PROXIES_PATTERN,
    expected: "comma-separated IP addresses or ranges of proxies (127.0.0.1, 192.168.1.5, 10.0.0.0/24, ::1)",
    doc: "Addresses or ranges of the reverse proxies and balancers in front of this turnstile, on this machine (127.0.0.1) or another (192.168.1.5, 10.0.0.0/24), whose X-Forwarded-For / Forwarded / X-Real-IP headers are believed. A request from one is counted (fair turns, quotas, CLIENTS_FILE cidr= rules, place in line) as from the client they name: the rightmost address not itself a trusted proxy, every such header agreeing, else the proxy itself. For steering, only a proxy on this machine can pass a loopback client, and only when every hop is loopback: a balancer on another machine never makes a request a loopback client. Name only proxies that write these headers themselves.",
  },
  {
    key: "CARD_NAME",
    field: "cardName",
    default: "",
    defaultDoc: "_(empty = this machine's host name)_",
    kind: "string",
    pattern: /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/,
    expected: "1-63 letters, digits, dots, dashes or underscores, starting with a letter or digit",
    doc: "This card's name when several cards sit behind a load balancer: shown as card in /turnstile/status and /readyz, as a card label on every metric, in the status page's title and header, and on the first line of gpu-turnstile status.",
  },
  {
    key: "AGENT_LISTEN",
    field: "agentListen",
    default: "",
    defaultDoc: "_(empty = off)_",
    kind: "listen",
    doc: 'HAProxy agent-check port (same forms as LISTEN_OLLAMA): each connection gets one line, "up ready" while chats are admitted at once, "drain" during an image job or a GPU lease.',
  },
  {
    key: "AUTO_UPDATE",
    field: "autoUpdate",
    default: "true",
    kind: "bool",
    doc: "Check UPDATE_REPO for signed releases and apply them (true or false).",
  },
  {
    key: "UPDATE_INTERVAL",
    field: "updateIntervalMs",
    default: "6h",
    kind: "duration",
    doc: "How often to check for updates.",
  },
  {
    key: "UPDATE_REPO",
    field: "updateRepo",
    default: "https://git.rambossek.at/PUBLIC/gpu-turnstile",
    kind: "url",
    doc: "Repository whose releases are checked.",
  },
  {
    key: "UPDATE_ASSET",
    field: "updateAsset",
    default: updateAssetFor,
    defaultDoc: "`gpu-turnstile.exe` on Windows, `gpu-turnstile-linux-x64`, `gpu-turnstile-linux-arm64`",
    kind: "string",
    pattern: /^[^/\\]+$/,
    expected: "a file name (no / or \\)",
    doc: "Release asset to download for this platform.",
  },
  {
    key: "APP_VER",
    field: "appVer",
    default: "stable",
    kind: "string",
    pattern: /^(stable|dev|v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*))$/,
    expected: '"stable", "dev" or a version like v1.2.3',
    doc: "Version to run: stable tracks the latest release, dev disables updates, vX.Y.Z pins that release (up- or downgrading to it).",
  },
  {
    key: "CFG_VER",
    field: "cfgVer",
    default: "",
    defaultDoc: "_(installer-managed)_",
    kind: "string",
    pattern: /^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$/,
    expected: "a version like v1.2.3",
    doc: "Config format version written by --install-service (a dev build writes v0.0.0); a file without it or with an older one is rewritten into the current sample's layout, every setting kept, the old file kept as .bak.",
  },
];

/** The default as env-file text for `platform`. */
export function defaultText(def: SettingDef, platform: Platform): string {
  return typeof def.default === "function" ? def.default(platform) : def.default;
}

const BY_KEY: ReadonlyMap<string, SettingDef> = new Map(
  SETTINGS.flatMap((d) => [d.key, ...(d.aliases ?? [])].map((k) => [k, d] as const)),
);

/** The setting a key (or alias) names, if any. */
export function settingForKey(key: string): SettingDef | undefined {
  return BY_KEY.get(key);
}

/** Every key the file may contain, aliases included. */
export function knownKeys(): string[] {
  return [...BY_KEY.keys()];
}

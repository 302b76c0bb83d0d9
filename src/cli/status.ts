/**
 * `gpu-turnstile status [--json] [--watch] [--url URL]`: the running instance's status for a
 * person. The instance is found from the config's LISTEN_* (the Ollama listener when enabled),
 * or `--url`; ADMIN_TOKEN from the config is sent, so a remote instance shows client addresses.
 */
import { ConfigError, loadConfig } from "../config/load.ts";
import { parseListen } from "../config/listen.ts";
import type { Config } from "../config/types.ts";
import type { StatusDoc } from "../status/model.ts";
import { readSse } from "../status/sse-read.ts";
import { configAnchor } from "./serve.ts";

export interface StatusCommandOptions {
  configPath?: string;
  url?: string;
  json: boolean;
  watch: boolean;
  out?: (text: string) => void;
  env?: Record<string, string | undefined>;
  signal?: AbortSignal;
}

/** Where the running instance answers: a listener address made reachable from this machine. */
export function instanceUrl(config: Pick<Config, "ollamaUrl" | "listenOllama" | "listenComfy">): string {
  const addr = parseListen(config.ollamaUrl ? config.listenOllama : config.listenComfy);
  const host = addr.hostname === undefined || addr.hostname === "0.0.0.0" || addr.hostname === "::" ? "127.0.0.1" : addr.hostname;
  return `http://${host.includes(":") ? `[${host}]` : host}:${addr.port}`;
}

const dur = (ms: number) => (ms < 1000 ? `${Math.round(ms)}ms` : ms < 60_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.floor(ms / 60_000)}m${String(Math.floor(ms / 1000) % 60).padStart(2, "0")}s`);

/** The document as a few lines for a terminal. */
export function renderStatus(doc: StatusDoc): string {
  const since = doc.now - Date.parse(doc.state_since);
  const lines = [`GPU: ${doc.state} for ${dur(since)}   (gpu-turnstile ${doc.version})`];
  const run = doc.image.running;
  if (run) lines.push(`image: job ${run.job}${run.prompt_id ? ` prompt ${run.prompt_id}` : ""} ${run.phase}, holding ${dur(run.age_ms)}`);
  if (doc.image.queued > 0) lines.push(`image: ${doc.image.queued} waiting`);
  if (doc.lease) lines.push(`lease: ${doc.lease.holder} (${doc.lease.id}), held ${dur(doc.lease.age_ms)}, ends in ${dur(doc.lease.expires_in_ms)} unless renewed`);
  lines.push(`llm: ${doc.llm.inflight} in flight, ${doc.llm.waiting} waiting${doc.llm.waiting ? ` (oldest ${dur(doc.llm.oldest_wait_ms)})` : ""}`);
  for (const r of doc.llm.requests) {
    lines.push(`  ${r.waiting ? "waits" : "holds"} ${r.path}${r.model ? ` ${r.model}` : ""}${r.client ? ` from ${r.client}` : ""} ${dur(r.age_ms)}`);
  }
  for (const [name, u] of Object.entries(doc.upstreams)) {
    lines.push(`${name}: ${u.up === null ? "not probed yet" : u.up ? `up ${u.version ?? ""}`.trimEnd() : `down: ${u.reason ?? "?"}`}`);
  }
  return lines.join("\n") + "\n";
}

/** One line per event while watching. */
function renderEvent(event: string, data: any): string | undefined {
  const t = new Date().toISOString().slice(11, 19);
  if (event === "state") return `${t} GPU ${data.from} -> ${data.state}\n`;
  if (event === "job") return `${t} image job ${data.job}${data.prompt_id ? ` (${data.prompt_id})` : ""}: ${data.phase}${data.outcome ? ` ${data.outcome}` : ""}\n`;
  if (event === "upstream") return `${t} ${data.name} ${data.up ? "up" : `down: ${data.reason ?? "?"}`}\n`;
  if (event === "lease") return `${t} GPU lease ${data.lease.id} of ${data.lease.holder}: ${data.event}${data.reason ? ` (${data.reason})` : ""}\n`;
  if (event === "holders") return `${t} llm ${data.llm.inflight} in flight, ${data.llm.waiting} waiting; image ${data.image.running ? data.image.running.phase : "none"}, ${data.image.queued} queued\n`;
  return undefined;
}

/**
 * The running instance to talk to (`--url`, else the config's LISTEN_*) and the headers that carry
 * the config's ADMIN_TOKEN. Undefined, with the reason on stderr, when neither can be had.
 */
export function findInstance(opts: { configPath?: string; url?: string; env?: Record<string, string | undefined> }): { base: string; headers: Record<string, string> } | undefined {
  let base = opts.url?.replace(/\/+$/, "");
  let token = "";
  try {
    const config = loadConfig({ argvConfigPath: opts.configPath, env: opts.env ?? process.env, execPath: configAnchor() }).config;
    base ??= instanceUrl(config);
    token = config.adminToken;
  } catch (err) {
    if (!(err instanceof ConfigError) || base === undefined) {
      process.stderr.write(`gpu-turnstile: ${err instanceof Error ? err.message : String(err)} (or name the instance with --url)\n`);
      return undefined;
    }
  }
  return { base, headers: token ? { authorization: `Bearer ${token}` } : {} };
}

export async function statusCommand(opts: StatusCommandOptions): Promise<number> {
  const out = opts.out ?? ((s: string) => void process.stdout.write(s));
  const instance = findInstance(opts);
  if (!instance) return 1;
  const { base, headers } = instance;
  const path = opts.watch ? "/turnstile/events" : "/turnstile/status";
  let res: Response;
  try {
    res = await fetch(`${base}${path}`, { headers, signal: opts.signal });
  } catch (err) {
    process.stderr.write(`gpu-turnstile: no turnstile answers at ${base}: ${err instanceof Error ? err.message : String(err)} (is it running? --url names another instance)\n`);
    return 1;
  }
  if (!res.ok) {
    process.stderr.write(`gpu-turnstile: ${base}${path} answered ${res.status}; is this a gpu-turnstile (version with /turnstile/)?\n`);
    return 1;
  }
  if (!opts.watch) {
    const doc = (await res.json()) as StatusDoc;
    out(opts.json ? JSON.stringify(doc, null, 2) + "\n" : renderStatus(doc));
    return 0;
  }
  // --watch: the event stream until Ctrl-C (or the turnstile stops).
  try {
    for await (const { event, data } of readSse(res.body!)) {
      if (opts.json) out(`${JSON.stringify({ event, data })}\n`);
      else out((event === "status" ? renderStatus(data as StatusDoc) : renderEvent(event, data)) ?? "");
    }
  } catch (err) {
    if (opts.signal?.aborted) return 0;
    throw err;
  }
  process.stderr.write("gpu-turnstile: the event stream ended (the turnstile stopped)\n");
  return 1;
}

/**
 * `gpu-turnstile status [--json] [--watch] [--url URL]`: the running instance's status for a
 * person. The instance is found from the config's LISTEN_* (the Ollama listener when enabled),
 * or `--url`; ADMIN_TOKEN from the config is sent, so a remote instance shows client addresses.
 */
import { ConfigError } from "../config/load.ts";
import { parseListen } from "../config/listen.ts";
import { redactUrl } from "../config/redact.ts";
import type { Config } from "../config/types.ts";
import type { CardView, StatusDoc } from "../status/model.ts";
import type { LineClient } from "../status/line.ts";
import type { GpuUseView } from "../jobs/gpu-meter.ts";
import { withScheme } from "../config/schema.ts";
import { processorOf } from "../status/card.ts";
import { hostName, isLoopbackBind, parseAllowedHosts } from "../proxy/host-guard.ts";
import { loadClientConfig, type ClientConfigOptions } from "./client-config.ts";
import { connectionFailure, followEvents } from "./follow-events.ts";

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

const gib = (b: number) => `${(b / 1073741824).toFixed(1)} GiB`;

type Job = StatusDoc["image"]["jobs"][number];

/** A job's place and times, its queue time kept apart from its run, and who sent it. */
function jobLine(j: Job, now: number): string {
  const parts = [`image: job ${j.job}${j.prompt_id ? ` prompt ${j.prompt_id}` : ""} ${j.phase}`];
  if (j.progress) parts.push(`step ${j.progress.value} of ${j.progress.max}`);
  if (j.phase === "waiting" || j.phase === "retrying") parts.push(`for ${dur(now - (j.arrived ?? j.since))}`);
  else parts.push(`waited ${dur(j.waited_ms)}`);
  if (j.queued_since !== undefined) parts.push(`in ComfyUI's queue ${dur(j.queue_ms ?? now - j.queued_since)}`);
  if (j.running_since !== undefined) parts.push(`running ${dur(j.run_ms ?? now - j.running_since)}`);
  const from = [j.client, j.client_id && `client_id ${j.client_id}`].filter(Boolean).join(" ");
  if (from) parts.push(`from ${from}`);
  return parts.join(", ");
}

/** An empty value as people read it (JSON says null). */
const NONE = "–";

/** Rows under a header, each column as wide as its widest cell; the last column is not padded. */
export function table(header: readonly string[], rows: readonly (readonly string[])[], indent = "  "): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) => indent + cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join("  ").trimEnd();
  return [line(header), ...rows.map((r) => line(r.map((c) => c || NONE)))];
}

const UPSTREAM_NAMES: Record<string, string> = { ollama: "Ollama", comfy: "ComfyUI" };

/** The document as a few lines for a terminal; `line`: the place in line of image jobs and chats, `gpu_use`: GPU seconds by client (issue 30). */
export function renderStatus(doc: StatusDoc & { line?: LineClient[]; gpu_use?: GpuUseView[] }): string {
  const since = doc.now - Date.parse(doc.state_since);
  const lines = [`card: ${doc.card || NONE}   (gpu-turnstile ${doc.version})`, `GPU: ${doc.state} for ${dur(since)}`];
  const jobs = doc.image.jobs ?? [];
  // Chats alone: their table first; an image job or a lease is what holds (or waits for) the whole card.
  const chatsFirst = jobs.length === 0 && doc.lease === null;
  if (chatsFirst) lines.push(...llmLines(doc));
  for (const j of jobs) {
    lines.push(jobLine(j, doc.now));
    // LLM calls the job's own workflow made on LISTEN_OLLAMA_NESTED: part of the job, sharing its card.
    for (const r of j.nested ?? []) lines.push(`  nested ${r.path}${r.model ? ` ${r.model}` : ""}${r.client ? ` from ${r.client}` : ""} ${dur(r.age_ms)}`);
  }
  if (doc.lease) {
    const l = doc.lease;
    // `client` only reaches those who may steer (the token, or loopback): who took the card.
    lines.push(`lease: ${l.holder} (${l.id})${l.client ? ` from ${l.client}` : ""}, held ${dur(l.age_ms)}, ends in ${dur(l.expires_in_ms)} unless renewed`);
  }
  if (!chatsFirst) lines.push(...llmLines(doc));
  for (const w of doc.waiting ?? []) {
    const who = w.kind === "llm" ? `chat ${w.id}` : w.kind === "image" ? `image job ${w.id}` : `lease ${JSON.stringify(w.id)}`;
    lines.push(`waiting: ${who} ${w.reason}, for ${dur(doc.now - w.since)}, estimate ${w.retry_after_s}s${w.client ? `, from ${w.client}` : ""}`);
  }
  if (doc.line && doc.line.length > 0) {
    lines.push("place in line (by client):");
    lines.push(...table(["client", "class", "waiting", "position", "estimate"], doc.line.flatMap((c) => places(c).map((p) => [c.client, c.class, `${p.what === "chat" ? "chat" : "image job"} ${p.n}`, String(p.position), `${p.estimate_s}s`]))));
  }
  if (doc.gpu_use && doc.gpu_use.length > 0) {
    lines.push("GPU seconds in QUOTA_GPU_WINDOW, by client:");
    lines.push(...table(["client", "class", "used", "quota", "running"], doc.gpu_use.map((u) => [u.client, u.class, `${u.used_s}s`, u.quota_s > 0 ? `${u.quota_s}s` : "none", String(u.running)])));
  }
  if (doc.models) {
    if (doc.models.length === 0) lines.push(`ollama models: none (as /api/ps said ${dur(doc.now - doc.models_at!)} ago)`);
    else {
      lines.push(`ollama models (as /api/ps said ${dur(doc.now - doc.models_at!)} ago):`);
      const until = (m: (typeof doc.models)[number]) => {
        const left = m.expires_at ? Date.parse(m.expires_at) - doc.now : NaN;
        return Number.isNaN(left) ? "" : left > 365 * 86_400_000 ? "forever" : `${dur(left)} from now`;
      };
      lines.push(...table(["model", "size", "processor", "until"], doc.models.map((m) => [m.name, gib(m.size), processorOf(m), until(m)])));
    }
  }
  lines.push(...comfyMemoryLines(doc.comfy_memory), ...coexistLines(doc.coexist));
  const upstreams = Object.entries(doc.upstreams);
  if (upstreams.length > 0) {
    const state = (u: (typeof upstreams)[number][1]) => (u.up === null ? "not probed yet" : u.up ? "up" : "down");
    lines.push("upstreams:", ...table(["upstream", "state", "version", "url", "reason"], upstreams.map(([name, u]) => [UPSTREAM_NAMES[name] ?? name, state(u), u.version ?? "", u.url ?? "", u.up === false ? (u.reason ?? "?") : ""])));
  }
  return lines.join("\n") + "\n";
}

/** The LLM side: the counts, then each request holding or waiting. */
function llmLines(doc: StatusDoc): string[] {
  const lines = [`llm: ${doc.llm.inflight} in flight, ${doc.llm.waiting} waiting${doc.llm.waiting ? ` (oldest ${dur(doc.llm.oldest_wait_ms)})` : ""}`];
  for (const r of doc.llm.requests) {
    lines.push(`  ${r.retrying ? "retrying" : r.waiting ? "waits" : "holds"} ${r.path}${r.model ? ` ${r.model}` : ""}${r.client ? ` from ${r.client}` : ""} ${dur(r.age_ms)}`);
  }
  return lines;
}

/** ComfyUI's memory as /system_stats last said (ComfyMemory in src/status/card.ts). */
function comfyMemoryLines(mem: StatusDoc["comfy_memory"]): string[] {
  if (!mem) return [];
  if (mem.shared) return [`comfy memory: shared with the system (${mem.shared}: not measured)`];
  return [`comfy memory: ${gib(mem.used)} of ${gib(mem.total)} in use (torch ${gib(mem.torch_reserved)})`];
}

/** COEXIST on: the model staying beside the image session, and the last eject. */
function coexistLines(c: StatusDoc["coexist"]): string[] {
  if (!c) return [];
  const peak = c.learned_peak_bytes === null ? "" : `, learned peak ${gib(c.learned_peak_bytes)}`;
  const lines = [c.model ? `beside the image job: ${c.model}, headroom ${gib(c.headroom_bytes ?? 0)}${peak}` : `beside the image job: none${peak}`];
  const e = c.last_eject;
  if (e) lines.push(`last eject: ${e.model} ${dur(Date.now() - e.at)} ago: ${e.why}`);
  return lines;
}

const clock = () => new Date().toISOString().slice(11, 19);

function holdersLine(data: any): string {
  const image = data.image;
  const waiting = (data.waiting ?? []).length;
  return `llm ${data.llm.inflight} in flight, ${data.llm.waiting} waiting; image ${image.running ? `job ${image.running.job} ${image.running.phase}` : "none"}, ${image.queued} queued in ComfyUI, ${image.waiting ?? 0} waiting for the GPU${waiting ? `; ${waiting} waiting in all` : ""}`;
}

/** Ollama's resident models in one line (a `card` event says more often than they change). */
function modelsLine(models: StatusDoc["models"]): string {
  if (models === null) return "";
  return `ollama models: ${models.length ? models.map((m) => `${m.name} (${processorOf(m)})`).join(", ") : "none"}`;
}

/**
 * A client's waiting image jobs and chats in the lock's order; on a tie the chat's LLM turn comes
 * first (it is not behind that job). `requests` is absent from a turnstile before chats had a place.
 */
function places(c: LineClient): { what: "chat" | "job"; n: number; position: number; estimate_s: number }[] {
  const chats = (c.requests ?? []).map((r) => ({ what: "chat" as const, n: r.request, position: r.position, estimate_s: r.estimate_s }));
  const jobs = c.jobs.map((j) => ({ what: "job" as const, n: j.job, position: j.position, estimate_s: j.estimate_s }));
  // Stable: chats, listed first, stay before a job of the same position.
  return [...chats, ...jobs].sort((a, b) => a.position - b.position);
}

/** The place in line in one line (issue 30), each client's waiting jobs and chats with position and estimate; undefined from a turnstile without it. */
function placeLine(line: LineClient[] | undefined): string | undefined {
  if (!line) return undefined;
  const clients = line.map((c) => `${c.client} (${c.class}): ${places(c).map((p) => `${p.what} ${p.n} #${p.position} ~${p.estimate_s}s`).join(", ")}`);
  return `place in line: ${clients.length ? clients.join("; ") : "none"}`;
}

/** One line per event while watching. */
function renderEvent(event: string, data: any): string | undefined {
  const t = clock();
  if (event === "state") return `${t} GPU ${data.from} -> ${data.state}\n`;
  if (event === "job") return `${t} image job ${data.job}${data.prompt_id ? ` (${data.prompt_id})` : ""}: ${data.phase}${data.outcome ? ` ${data.outcome}` : ""}\n`;
  if (event === "upstream") return `${t} ${data.name} ${data.up ? "up" : `down: ${data.reason ?? "?"}`}\n`;
  if (event === "lease") return `${t} GPU lease ${data.lease.id} of ${data.lease.holder}: ${data.event}${data.reason ? ` (${data.reason})` : ""}\n`;
  if (event === "holders") return `${t} ${holdersLine(data)}\n`;
  return undefined;
}

/**
 * The running instance to talk to (`--url`, else the config's LISTEN_*) and the headers that carry
 * the config's ADMIN_TOKEN. Undefined, with the reason on stderr, when neither can be had.
 */
export function findInstance(
  opts: { configPath?: string; url?: string; env?: Record<string, string | undefined> } & Pick<ClientConfigOptions, "execPath" | "installedService">,
): { base: string; headers: Record<string, string> } | undefined {
  let base = opts.url?.replace(/\/+$/, "");
  if (base !== undefined && !/^https?:\/\/[^/]/i.test(base)) {
    const guess = withScheme(base);
    process.stderr.write(`gpu-turnstile: --url: expected an absolute http:// or https:// URL${guess ? ` (did you mean "${guess}"?)` : ""}\n`);
    return undefined;
  }
  let token = "";
  try {
    const { loaded, said } = loadClientConfig({ ...opts, env: opts.env ?? process.env });
    if (said) process.stderr.write(`gpu-turnstile: ${said}\n`);
    const config = loaded.config;
    // The token goes only where this config's instance answers: its own address, loopback, or a
    // name ALLOWED_HOSTS lists. Sent to any other --url, it would give that host the card.
    if (base === undefined || carriesToken(base, config.allowedHosts)) token = config.adminToken;
    base ??= instanceUrl(config);
  } catch (err) {
    if (!(err instanceof ConfigError) || base === undefined) {
      process.stderr.write(`gpu-turnstile: ${err instanceof Error ? err.message : String(err)} (or name the instance with --url)\n`);
      return undefined;
    }
  }
  return { base, headers: token ? { authorization: `Bearer ${token}` } : {} };
}

function carriesToken(url: string, allowedHosts: string): boolean {
  const host = hostName(new URL(url).host);
  const allowed = parseAllowedHosts(allowedHosts);
  return isLoopbackBind(host) || allowed.any || allowed.names.has(host) || allowed.suffixes.some((s) => host.endsWith(s));
}

/**
 * Text for a terminal: every control character but the line end written out as `\u001b`. A status
 * carries names any client chose (a waiting chat's model, a job's client_id, a lease's holder), and
 * an escape sequence among them would act on the operator's terminal (clear it, retitle it, hide lines).
 */
function printable(text: string): string {
  return text.replace(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

export async function statusCommand(opts: StatusCommandOptions): Promise<number> {
  const write = opts.out ?? ((s: string) => void process.stdout.write(s));
  // JSON escapes control characters itself.
  const out = opts.json ? write : (s: string) => write(printable(s));
  const instance = findInstance(opts);
  if (!instance) return 1;
  const { base, headers } = instance;
  if (opts.watch) return watch(base, headers, opts, out);
  const path = "/turnstile/status";
  let res: Response;
  try {
    res = await fetch(`${base}${path}`, { headers, signal: opts.signal });
  } catch (err) {
    process.stderr.write(`gpu-turnstile: no turnstile answers at ${redactUrl(base)}: ${connectionFailure(err)} (is it running? --url names another instance)\n`);
    return 1;
  }
  if (!res.ok) {
    process.stderr.write(`gpu-turnstile: ${redactUrl(base)}${path} answered ${res.status}; is this a gpu-turnstile (version with /turnstile/)?\n`);
    return 1;
  }
  const doc = (await res.json()) as StatusDoc;
  out(opts.json ? JSON.stringify(doc, null, 2) + "\n" : renderStatus(doc));
  return 0;
}

/**
 * --watch: the event stream until Ctrl-C. A turnstile that restarts is waited for and followed
 * again, as the status page does: one line when it is lost, one when it is back, and no line
 * printed twice (a reconnect's snapshot, or `holders` that changed only where no line shows).
 */
async function watch(base: string, headers: Record<string, string>, opts: StatusCommandOptions, out: (text: string) => void): Promise<number> {
  const signal = opts.signal ?? new AbortController().signal;
  let connections = 0;
  let lastHolders = "";
  let lastModels = "";
  // The place in line moves at the hub's tick: a line each time it did (its estimate ages too).
  let lastPlace: string | undefined;
  const end = await followEvents({
    url: `${base}/turnstile/events`,
    headers,
    signal,
    onEvent({ event, data }, fresh) {
      if (fresh) connections++;
      if (opts.json) return out(`${JSON.stringify({ event, data })}\n`);
      if (event === "status") {
        const doc = data as StatusDoc;
        lastHolders = holdersLine(doc);
        lastModels = modelsLine(doc.models);
        const place = placeLine((doc as StatusDoc & { line?: LineClient[] }).line);
        const moved = connections > 1 && place !== undefined && place !== lastPlace;
        lastPlace = place;
        return out(connections === 1 ? renderStatus(doc) : `${clock()} back: GPU ${doc.state}; ${lastHolders}\n${moved ? `${clock()} ${place}\n` : ""}`);
      }
      if (event === "line") {
        const place = placeLine((data as { line: LineClient[] }).line);
        if (place === undefined || place === lastPlace) return;
        lastPlace = place;
        return out(`${clock()} ${place}\n`);
      }
      if (event === "holders") {
        const line = holdersLine(data);
        if (line === lastHolders) return;
        lastHolders = line;
      }
      if (event === "card") {
        // A load or an unload, not every read of the card.
        const line = modelsLine((data as CardView).models);
        if (line === lastModels || line === "") return;
        lastModels = line;
        return out(`${clock()} ${line}\n`);
      }
      out(renderEvent(event, data) ?? "");
    },
    onLost(reason) {
      process.stderr.write(`gpu-turnstile: ${clock()} lost the event stream (${reason}); reconnecting until it is back (Ctrl-C stops)\n`);
    },
  });
  if (!end.ok) {
    process.stderr.write(`gpu-turnstile: no turnstile answers at ${redactUrl(base)}: ${end.reason} (is it running? --url names another instance)\n`);
    return 1;
  }
  return 0;
}

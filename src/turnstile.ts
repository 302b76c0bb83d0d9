/**
 * The running turnstile: one lock, up to two listeners, the image-job machinery, health probes,
 * logs and metrics wired to events. Everything the CLI, the demo and the tests start goes
 * through `startTurnstile`.
 */
import { readFileSync } from "node:fs";
import { hostname, networkInterfaces } from "node:os";
import { redactUrl } from "./config/redact.ts";
import { ComfyLiveSocket, comfyNews, type ComfyNews } from "./comfy/live-socket.ts";
import type { Config } from "./config/types.ts";
import { parseListen } from "./config/listen.ts";
import { formatDuration } from "./config/duration.ts";
import type { JobListener } from "./jobs/events.ts";
import { BusyEstimator } from "./jobs/busy-estimate.ts";
import { ImageSessions } from "./jobs/session.ts";
import { JobTracker } from "./jobs/tracker.ts";
import { Nudges } from "./jobs/nudge.ts";
import { HeldPrompts } from "./jobs/held-prompts.ts";
import { JobStarts } from "./jobs/job-starts.ts";
import { GpuLock } from "./lock/index.ts";
import { fairSetup, type Fair } from "./fair/setup.ts";
import type { Identity, Seen } from "./fair/identity.ts";
import { ClientQuota } from "./fair/quota.ts";
import { GpuTime } from "./fair/gpu-time.ts";
import { GpuMeter } from "./jobs/gpu-meter.ts";
import type { LlmQuota } from "./proxy/llm-quota.ts";
import type { Logger } from "./observe/log.ts";
import { createCardMetrics } from "./observe/card-metrics.ts";
import { createClassMetrics } from "./observe/class-metrics.ts";
import { createTurnstileMetrics, type TurnstileMetrics, type Upstream } from "./observe/turnstile-metrics.ts";
import { jobObserver, lockLogger, requestObserver, upstreamHealthLogger } from "./observe/wire.ts";
import type { OllamaClient } from "./ollama/client.ts";
import { noGpuRule } from "./ollama/no-gpu-rule.ts";
import { HandoffCheck, offloadWarning } from "./ollama/offload.ts";
import { createListenerApp, type HealthBody, type ListenerAppDeps, type LlmBodyWatch } from "./proxy/app.ts";
import type { Listener } from "./proxy/classify.ts";
import type { RetryPolicy } from "./http/forward.ts";
import { hostGuard, hostName, isIpLiteral, namesThisMachine, parseAllowedHosts } from "./proxy/host-guard.ts";
import { IdleTicker } from "./http/idle-watch.ts";
import { WS_CLIENT_BACKLOG_BYTES } from "./proxy/ws-relay.ts";
import { idleSeconds } from "./proxy/client-idle.ts";
import { INFLATE_BUDGET_BYTES, MAX_INFLATED_BYTES, ZstdInflater } from "./http/zstd-body.ts";
import { startListener } from "./proxy/listener.ts";
import { drainCutWarning, startLlmDrainBound } from "./proxy/llm-drain.ts";
import { comfyCancelWatch } from "./proxy/comfy-cancels.ts";
import { startHealthMonitor, type HealthMonitor, type ProbeReport } from "./observe/health.ts";
import { CardRefresh } from "./status/card-refresh.ts";
import { EventHub } from "./status/events.ts";
import { LlmRequest, StatusModel } from "./status/model.ts";
import { statusRoutes } from "./status/routes.ts";
import { placeInLine } from "./status/line.ts";
import { Steering } from "./status/steer.ts";
import { startAgent } from "./balance/agent.ts";
import { HeldJobs } from "./balance/held-jobs.ts";
import { withWaitingLeases } from "./balance/comfy-queue.ts";
import { agentLine, readiness } from "./balance/readiness.ts";
import { readyzAnswer, type ReadyzDeps } from "./balance/readyz.ts";
import { LeaseFile } from "./status/lease-file.ts";
import { heldUntil } from "./proxy/start-gate.ts";
import { readAtStart } from "./jobs/adopt.ts";
import { pickTenants, type Tenants } from "./tenants/pick.ts";
import { residentsReader, tenantSide } from "./tenants/side.ts";
import { OllamaTenant } from "./tenants/ollama.ts";
import { ComfyTenant } from "./tenants/comfyui.ts";
import { coexistStatus, startCoexist } from "./observe/coexist-wire.ts";

export interface TurnstileOptions {
  config: Config;
  log: Logger;
  version: string;
  /** An extra subscriber to image-job phases (the demo's timeline). */
  onJobEvent?: JobListener;
  /** Drivers to use instead of LLM_KIND's and IMAGE_KIND's (a test's fake tenant), for the sides whose URL is set. */
  tenants?: Partial<Tenants>;
}

export interface BoundListener {
  name: Listener;
  url: string;
  port: number;
}

export interface Turnstile {
  readonly lock: GpuLock;
  readonly tracker: JobTracker;
  readonly metrics: TurnstileMetrics;
  /** What /turnstile/status shows. */
  readonly status: StatusModel;
  /** Force-release and GPU leases (POST /turnstile/release, /turnstile/lease). */
  readonly steering: Steering;
  readonly listeners: BoundListener[];
  /** CARD_NAME, or the host name. */
  readonly card: string;
  /** AGENT_LISTEN's bound port, when it is set. */
  readonly agentPort: number | undefined;
  listener(name: Listener): BoundListener | undefined;
  health(): HealthBody;
  /** The first round of upstream probes has been reported and the start has picked up what the card is doing. */
  readonly probed: Promise<void>;
  /** Resolves the next time the GPU is idle with no image job tracked (now, if it is). */
  whenIdle(): Promise<void>;
  /** Graceful stop: stop accepting, let in-flight requests finish within `timeoutMs`, then cut. */
  stop(timeoutMs?: number): Promise<void>;
}

function withExtra(base: JobListener, extra: JobListener | undefined): JobListener {
  return extra ? (e) => (base(e), extra(e)) : base;
}

/** A probe report that also updates what /healthz shows. */
function withHealth(status: HealthBody["upstreams"], report: ProbeReport): ProbeReport {
  return (upstream, up, detail) => {
    status[upstream] = up ? "up" : "down";
    report(upstream, up, detail);
  };
}


/** A listener that could not bind, said in one line that names its setting and address. */
/** A start that cannot go on, said in one line (a listener that cannot bind, a bad CLIENTS_FILE). */
export class BindError extends Error {
  override name = "BindError";
}

/** `bind()`, with a failure turned into a BindError for the `key` setting and its `listen` value. */
function bindOrSay<T>(key: string, listen: string, bind: () => T): T {
  try {
    return bind();
  } catch (err) {
    throw bindError(key, listen, err);
  }
}

function bindError(key: string, listen: string, err: unknown): BindError {
  const where = `${key} ${listen.trim()}`;
  switch ((err as { code?: unknown } | null)?.code) {
    case "EADDRINUSE": {
      // Bun says EADDRINUSE, too, for a host name it cannot bind (one that does not resolve, or not here).
      const host = parseListen(listen).hostname;
      if (host !== undefined && host !== "localhost" && !isIpLiteral(host)) {
        return new BindError(`${where}: cannot listen: the port is in use (another gpu-turnstile?) or ${host} is not an address of this machine`);
      }
      return new BindError(`${where} is already in use (another gpu-turnstile?)`);
    }
    case "EACCES":
      return new BindError(`${where}: permission denied (ports below 1024 need privileges)`);
    case "EADDRNOTAVAIL":
      return new BindError(`${where}: this machine has no such address`);
    default:
      return new BindError(`${where}: cannot listen (${err instanceof Error ? err.message : String(err)})`);
  }
}

/**
 * Which Hosts name this machine for steering: any IP literal (a rebinding page has a name, not an
 * address), and what a loopback listener lets through (localhost, this machine's names, ALLOWED_HOSTS).
 */
function steeringHost(allowedHosts: string): (host: string) => boolean {
  const guard = hostGuard({ bindHost: "127.0.0.1", allowed: parseAllowedHosts(allowedHosts), machineName: hostname(), machineAddresses });
  return (host) => isIpLiteral(hostName(host)) || guard(host);
}

/** Every address of this machine's interfaces (Ollama's isLocalIP asks the same). */
function machineAddresses(): string[] {
  return Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address));
}

/** Distinct refused Hosts that are logged; the rest are only counted (403 in the request metrics). */
const MAX_HOST_WARNINGS = 20;

/**
 * The blind unload's memory of one LLM request: its model once sent, forgotten if Ollama does not
 * know it. A success after a hand-off means a model is loaded: time for the offload check.
 */
function llmBodyWatch(ollama: OllamaClient, handoff: HandoffCheck): LlmBodyWatch {
  let model: string | undefined;
  return {
    sent(m) {
      model = m;
      ollama.memory.routed(m);
    },
    answered(status) {
      if (status === 404 && model !== undefined) ollama.memory.unknown(model);
      else if (status < 300 && handoff.armed) void handoff.loaded();
    },
  };
}

/** FAIR_CLASSES and CLIENTS_FILE (issue 30); a bad one stops the start with one line. */
function loadFair(config: Config): Fair {
  let text: string | undefined;
  if (config.clientsFile) {
    try {
      text = readFileSync(config.clientsFile, "utf8");
    } catch (err) {
      throw new BindError(`CLIENTS_FILE ${config.clientsFile}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  const r = fairSetup(config, text);
  if (!r.ok) throw new BindError(r.message);
  return r.fair;
}

/** Max number of 5xx replays of an idempotent request before the answer is passed back. */
const MAX_5XX_RETRIES = 4;

export function startTurnstile(opts: TurnstileOptions): Turnstile {
  const { config, log } = opts;
  const fair = loadFair(config);
  const lock = new GpuLock({
    imageSessionMaxMs: config.imageSessionMaxMs,
    turnClasses: fair.classes,
    onListenerError: (err) => log.error("lock event listener failed", { err: err instanceof Error ? err : String(err) }),
  });
  const tracker = new JobTracker();
  const upstreams: Upstream[] = [];
  if (config.ollamaUrl) upstreams.push("ollama");
  if (config.comfyUrl) upstreams.push("comfy");

  const card = config.cardName || hostname();
  const metrics = createTurnstileMetrics({ lockSnapshot: () => lock.snapshot(), upstreams, version: opts.version, card });
  metrics.attachLock(lock);
  lock.onEvent(lockLogger(log));
  // Both read per call: the busy answer's estimate and the steering's lease queue are made below.
  const upstreamUrls = { ollama: config.ollamaUrl && redactUrl(config.ollamaUrl), comfy: config.comfyUrl && redactUrl(config.comfyUrl) };
  // Who waits, in the order the lock will grant them (issue 30): the place in line and the waiters' reasons.
  const lockLines = () => ({ image: lock.imageLine(), llm: lock.llmLine() });
  const status = new StatusModel({ version: opts.version, upstreams, upstreamUrls, card, retryAfterS: () => common.busy.retryAfterS, leaseQueue: () => steering.waiting(), lockOrder: lockLines, coexist: config.coexist ? () => coexistStatus(coexist) : undefined });
  lock.onEvent((e) => status.onLock(e));
  const cardMetrics = createCardMetrics(metrics.registry, {
    // Exact counts: the status lists are cut at MAX_LISTED.
    waiting: () => {
      const h = status.holders(false);
      return { llm: h.llm.waiting, image: h.image.waiting, lease: steering.waiting().length };
    },
  });
  lock.onEvent((e) => cardMetrics.onLock(e));
  const classMetrics = createClassMetrics(metrics.registry, fair.classes.map((c) => c.name));
  // GPU seconds per client (QUOTA_GPU_SECONDS, issue 30): only when some client is held to them.
  const gpuMeter = !fair.gpuQuotas ? undefined : new GpuMeter({
    ledger: new GpuTime<Identity>(config.quotaGpuWindowMs),
    limitS: (who) => fair.gpuLimitS(who),
    now: () => performance.now(),
    onRefused: (who, work, usedS, limitS) => {
      classMetrics.onQuotaRefused(who.cls, work, "gpu_seconds");
      log.info(`${work === "image" ? "image job" : "LLM request"} refused: client ${who.client} used its GPU seconds`, { client: who.client, class: who.cls, used_s: usedS, quota_s: limitS });
    },
  });
  const hub = new EventHub({
    model: status,
    onDrop: (bytes) => log.info("dropped a /turnstile/events reader that fell behind", { queued_bytes: bytes }),
    onTick: (changed) => cardRefresh.tick(changed),
  });

  // LLM_KIND's and IMAGE_KIND's drivers (tenants/); Ollama and ComfyUI keep machinery of their own.
  const tenants = { ...pickTenants(config, (host) => namesThisMachine(host, hostname(), machineAddresses)), ...opts.tenants };
  const ollama = tenants.llm instanceof OllamaTenant ? tenants.llm.client : undefined;
  const comfy = tenants.image instanceof ComfyTenant ? tenants.image.client : undefined;
  const coexist = startCoexist(config, { ollama, comfy, registry: metrics.registry, log });
  if (ollama) ollama.onPs = (models) => status.onModels(models);
  // What the LLM side holds, for the status page: Ollama's /api/ps (onPs hears it), another kind's resident().
  const readLlm = ollama ? () => ollama.look(config.probeTimeoutMs) : tenants.llm && residentsReader(tenants.llm, config.probeTimeoutMs, (m) => status.onModels(m));
  if (comfy) comfy.onStats = (body) => status.onComfyStats(body);
  // Said when first seen (at start) and if ComfyUI comes back on another kind of device.
  if (comfy) {
    comfy.onSharedMemory = (device) =>
      device
        ? log.notice(`ComfyUI runs on ${device}: its memory is the system's, so its release after /free is not measured; the card is handed on once /free is answered and ComfyUI's queue is empty`, { device })
        : log.notice("ComfyUI runs on a card with memory of its own: its release after /free is measured again");
  }
  // While a page watches: the card's holdings read again when they can have changed (SPEC "Status page").
  const cardRefresh = new CardRefresh({
    read: () => Promise.allSettled([readLlm?.(), comfy?.systemStats(config.probeTimeoutMs)]),
    busy: () => lock.state !== "idle",
    nextExpiry: () => status.nextModelExpiry(),
  });

  // Down until the first probe (just after start) says otherwise: "up" means a probe reached it.
  const upstreamHealth: HealthBody["upstreams"] = { ollama: tenants.llm ? "down" : "disabled", comfy: tenants.image ? "down" : "disabled" };
  const health = (): HealthBody => {
    const s = lock.snapshot();
    return { state: s.state, llm_inflight: s.llmInflight, image_pending: s.imagePending, upstreams: { ...upstreamHealth } };
  };
  const estimator = new BusyEstimator();
  // Down only once a probe has said so: before the first probe a request still gets its retries.
  const probedDown = new Set<Upstream>();
  const held = new HeldJobs();
  // Every LLM exchange holding a slot is watched, so a force-release can cut it; with
  // LLM_IDLE_TIMEOUT 0 the ticker never ticks and only keeps that list.
  const llmWatches = new IdleTicker(config.llmIdleTimeoutMs, config.llmIdleTimeoutMs > 0);
  const fixedRetryAfter = config.busyRetryAfterS;
  const retry: RetryPolicy = {
    backoffInitialMs: config.backoffInitialMs,
    backoffMaxMs: config.backoffMaxMs,
    retryBodyLimit: config.retryBodyLimit,
    max5xxRetries: MAX_5XX_RETRIES,
    retryTimeoutMs: config.upstreamRetryTimeoutMs,
  };
  const drainBound = formatDuration(config.llmDrainTimeoutMs);
  const stopDrainBound = startLlmDrainBound({
    lock,
    llm: llmWatches,
    boundMs: config.llmDrainTimeoutMs,
    bound: drainBound,
    leaseHolder: () => steering.waiting()[0]?.holder,
    onCut: (r) => log.warn(...drainCutWarning(r, drainBound)),
  });
  // STATE_DIR is empty only where the CLI did not resolve it (tests, the demo): leases end with the process.
  const leaseFile = config.stateDir ? new LeaseFile(config.stateDir, config, log) : undefined;
  const steering = new Steering({
    lock,
    llm: llmWatches,
    jobs: tracker,
    comfy,
    llmTenant: tenants.llm,
    imageTenant: tenants.image,
    settings: {
      maxTtlMs: config.leaseMaxTtlMs,
      unloadTimeoutMs: config.unloadTimeoutMs,
      unloadPollIntervalMs: config.unloadPollIntervalMs,
      probeTimeoutMs: config.probeTimeoutMs,
      freeTimeoutMs: config.freeTimeoutMs,
      pollMs: config.historyPollIntervalMs,
    },
    log,
    onLease: (e) => {
      status.onLease(e);
      cardMetrics.onLease(e);
    },
    onForceRelease: () => cardMetrics.onForceRelease(),
    store: leaseFile,
  });
  const common = {
    lock,
    retry,
    busy: {
      mode: config.llmBusyMode,
      waitTimeoutMs: config.llmWaitTimeoutMs,
      status: config.llmBusyStatus,
      // Read per busy answer: with BUSY_RETRY_AFTER=auto it is estimated from the image work now.
      get retryAfterS() {
        return fixedRetryAfter === "auto" ? estimator.retryAfterS(lock.snapshot().imageWaiting) : fixedRetryAfter;
      },
    },
    observer: requestObserver(log, metrics),
    idle: llmWatches,
    health,
    metrics: () => {
      cardMetrics.flush();
      return { contentType: metrics.contentType, text: metrics.render() };
    },
    turnstile: statusRoutes({
      model: status,
      hub,
      adminToken: config.adminToken,
      trustedProxies: fair.trustedProxies,
      steering,
      card,
      // The loopback listener's Host rule, whatever the listener binds (issue 18: steering).
      machineHost: steeringHost(config.allowedHosts),
      // A place in line (issue 30): the lock's order, the busy answer's estimate per jobs ahead.
      line: (seen) =>
        placeInLine(lockLines(), (ahead) => (fixedRetryAfter === "auto" ? estimator.retryAfterS(ahead) : fixedRetryAfter), seen && fair.identify(seen).client),
      gpuUse: gpuMeter && ((seen) => gpuMeter.uses(seen && fair.identify(seen).client)),
    }),
    llmTracker: status,
    inflater: new ZstdInflater(INFLATE_BUDGET_BYTES, MAX_INFLATED_BYTES, {
      full: (r) => log.warn("zstd request bodies wait for their turn to be inflated: the inflate budget is spoken for", { waiting: r.waiting, budget_bytes: r.budgetBytes }),
    }),
  } satisfies Omit<ListenerAppDeps, "listener" | "upstream" | "hostAllowed">;
  const readyzDeps: ReadyzDeps = {
    lock: () => lock.snapshot(),
    upstream: (cls) => (cls === "llm" ? upstreamHealth.ollama : upstreamHealth.comfy),
    retryAfterS: () => common.busy.retryAfterS,
    activeImageJobs: () => held.active,
    card,
  };

  // After the image side hands the card on, the first model that loads is checked for a CPU split.
  const handoff =
    ollama &&
    new HandoffCheck(
      ollama,
      (m) => {
        metrics.partialOffload.inc({});
        log.warn(offloadWarning(m), { model: m.name, size: m.size, size_vram: m.sizeVram });
      },
      config.probeTimeoutMs,
    );
  if (handoff) {
    lock.onEvent((e) => {
      if (e.type !== "transition") return;
      if (e.to === "image" || e.to === "lease") handoff.disarm();
      else if (e.from === "image" || e.from === "lease") handoff.arm();
    });
  }
  // When each job began running, for the jobs a restart picks up (STATE_DIR; issue 27).
  const jobStarts = comfy && config.stateDir ? new JobStarts(config.stateDir, config.comfyUrl, log) : undefined;
  /** The prompt_id of each image job between its arrival and its end (held prompts' order, below). */
  const promptOfJob = new Map<number, string>();
  const emitJob = withExtra(
    withExtra(withExtra(withExtra(jobObserver(log, metrics, { llm: tenants.llm?.label, image: tenants.image?.label }), (e) => estimator.observe(e)), (e) => status.onJob(e)), (e) => (held.observe(e), jobStarts?.observe(e))),
    withExtra((e) => {
      classMetrics.onJob(e);
      gpuMeter?.onJob(e);
      if (e.phase === "received") promptOfJob.set(e.jobId, e.promptId);
      else if (e.phase === "released" || e.phase === "left") promptOfJob.delete(e.jobId);
      if (handoff && e.phase === "warmed" && !e.error) handoff.loaded();
      // ComfyUI refused an image job's attempt: the probes look again (suspectDown, below).
      if (e.phase === "retrying") suspectDown("comfy");
    }, opts.onJobEvent),
  );
  // A client's cancel or interrupt wakes the followers of the jobs it names (issue 19).
  const nudges = new Nudges();
  // Prompts waiting for the GPU, shown in ComfyUI's /queue and removable from it (issue 27),
  // numbered after every job ComfyUI has had (its last one is read when first needed).
  // Held prompts show in /queue in the lock's order (fair turns): its line names jobs by number.
  const heldPrompts = new HeldPrompts(
    comfy && (() => comfy.lastNumber()),
    () => new Map(lock.imageLine().flatMap((e, i) => (e.tag !== undefined && promptOfJob.has(e.tag) ? [[promptOfJob.get(e.tag)!, i] as const] : []))),
  );
  // ComfyUI's own word that its queue changed or a job ended wakes the followers (issue 27).
  const hear = (news: ComfyNews | undefined) => news && nudges.announce(news.kind === "queue" ? "all" : [news.promptId]);
  const live =
    comfy &&
    new ComfyLiveSocket({
      base: comfy.base,
      onNews: hear,
      connectTimeoutMs: config.probeTimeoutMs,
      backoffInitialMs: config.backoffInitialMs,
      backoffMaxMs: config.backoffMaxMs,
      onState: (up) => log.debug(up ? "ComfyUI websocket open: job ends are heard as they happen" : "ComfyUI websocket lost: job ends are seen by polling until it is back"),
    });
  const sessions = new ImageSessions(lock, (e) => emitJob({ phase: "session_ended", ...e }), {
    timeoutMs: config.freeTimeoutMs,
    onCut: (n) => {
      metrics.nestedCut.inc({}, n);
      log.warn(`cut ${n} nested LLM request(s) still running when their image job ended, after FREE_TIMEOUT (${formatDuration(config.freeTimeoutMs)})`);
    },
  });
  // Issue 30: who each image job is for (its fair turn, its quota), of every IMAGE_KIND.
  const fairJobs = {
    identify: (seen: Seen) => fair.identify(seen),
    fairTurns: config.fairTurns,
    gpuMeter,
    quota: {
      slots: new ClientQuota(),
      limit: config.quotaImageJobs,
      retryAfterS: () => common.busy.retryAfterS,
      refused: (who: Identity) => {
        classMetrics.onQuotaRefused(who.cls, "image", "concurrent");
        log.info(`image job refused: client ${who.client} is at its quota`, { client: who.client, class: who.cls });
      },
    },
  };
  const side = tenantSide({ tenants, lock, config, sessions, tracker, emit: emitJob, retry, log, nudges, held: heldPrompts, starts: jobStarts, fair: fairJobs });
  // COEXIST (jobs/coexist.ts): ComfyUI's jobs may keep one Ollama model beside them.
  const imageJob = side.imageJob && coexist ? { ...side.imageJob, coexist } : side.imageJob;

  // Concurrent LLM requests per client (issue 30): never on the nested listener (part of an image job).
  const llmSlots = new ClientQuota();
  // An LLM request's client: its key, else its address (no client_id on the LLM side), a trusted proxy's forwarded one.
  const llmClient = (req: Request, clientIp: string | undefined) => fair.identify({ authorization: req.headers.get("authorization"), address: clientIp, headers: req.headers });
  const llmQuota: LlmQuota | undefined = !(config.quotaLlmRequests > 0 || fair.llmQuotas || gpuMeter) ? undefined : {
    take: (req, clientIp) => {
      const who = llmClient(req, clientIp);
      const overGpu = gpuMeter?.refusal(who, "llm");
      if (overGpu) return { refused: overGpu };
      const limit = who.llm ?? config.quotaLlmRequests;
      const slot = llmSlots.take(who.client, limit);
      const meter = slot && gpuMeter?.llm(who);
      if (slot) return meter ? { release: () => (meter.ended(), slot.release()), granted: meter.granted, paused: meter.paused } : slot;
      classMetrics.onQuotaRefused(who.cls, "llm", "concurrent");
      log.info(`LLM request refused: client ${who.client} is at its quota`, { client: who.client, class: who.cls });
      const retryAfterS = common.busy.retryAfterS;
      return {
        refused: {
          type: "quota_exceeded",
          message: `gpu-turnstile: client ${who.client} already has ${limit} LLM requests waiting or running (its quota); retry in ${retryAfterS} s`,
          headers: { "retry-after": String(retryAfterS) },
        },
      };
    },
  };

  const allowedHosts = parseAllowedHosts(config.allowedHosts);
  // Said once per Host (and not without end: a rebinding page can make up names), so an operator
  // who reaches a loopback listener under a new name sees why at the default level.
  const warnedHosts = new Set<string>();
  const refusedHost = (name: Listener, host: string): false => {
    if (warnedHosts.size < MAX_HOST_WARNINGS && !warnedHosts.has(host)) {
      warnedHosts.add(host);
      log.warn(`${name} listener refused Host ${JSON.stringify(host)}: not a local name (DNS-rebinding guard); list it in ALLOWED_HOSTS to allow it`);
    }
    return false;
  };
  const servers: { name: Listener; server: ReturnType<typeof startListener> }[] = [];
  let agent: ReturnType<typeof startAgent> | undefined;
  const bound: BoundListener[] = [];
  const start = (name: Listener, key: string, listen: string, upstreamUrl: string, extra: Partial<ListenerAppDeps>) => {
    const addr = parseListen(listen);
    const upstream = new URL(upstreamUrl);
    const guard = hostGuard({ bindHost: addr.hostname, allowed: allowedHosts, machineName: hostname(), machineAddresses });
    const hostAllowed = (host: string) => guard(host) || refusedHost(name, host);
    // Bun has no call that closes one request's connection; the shortest idle timeout does it, silently.
    let serving: { timeout(req: Request, seconds: number): void } | undefined;
    const cutClient = (req: Request) => serving?.timeout(req, 1);
    // CLIENT_IDLE_TIMEOUT: set again just before each answer's last byte (proxy/client-idle.ts).
    const clientIdleS = idleSeconds(config.clientIdleTimeoutMs);
    const clientIdle = clientIdleS > 0 ? (req: Request) => serving?.timeout(req, clientIdleS) : undefined;
    // The nested listener's upstream is Ollama too: its health is Ollama's.
    const upstreamName: Upstream = name === "comfy" ? "comfy" : "ollama";
    const readyz = (classParam: string | null) => readyzAnswer(readyzDeps, classParam, upstreamName === "comfy" ? "image" : "llm");
    const app = heldUntil(createListenerApp({ ...common, ...extra, listener: name, upstream, hostAllowed, upstreamDown: () => probedDown.has(upstreamName), cutClient, clientIdle, readyz }), pickedUp);
    const server = bindOrSay(key, listen, () => startListener({
      name,
      hostname: addr.hostname,
      port: addr.port,
      upstream,
      app,
      wsConnectTimeoutMs: config.probeTimeoutMs,
      clientIdleS,
      observeWs:
        name === "comfy"
          ? (clientId, frame) => {
              status.onComfyFrame(clientId, frame);
              hear(comfyNews(frame));
            }
          : undefined,
      onWebsocket: (r) => {
        metrics.requests.inc({ listener: name, class: "ws", status: r.ok ? "101" : "502" });
        if (!r.ok) log.warn(`websocket ${r.path} not relayed`, { reason: r.reason });
        else log.info(`websocket ${r.path} relayed`);
      },
      onWsOverflow: (r) => log.warn(`websocket ${r.path} closed (1008): the client did not read what ComfyUI sent it (more than ${WS_CLIENT_BACKLOG_BYTES >> 20} MiB waiting)`, { backlog_bytes: r.backlogBytes }),
    }));
    serving = server;
    servers.push({ name, server });
    const host = addr.hostname ?? "127.0.0.1";
    const shown = host.includes(":") ? `[${host}]` : host;
    bound.push({ name, port: server.port!, url: `http://${shown}:${server.port}` });
  };
  // Start-up, once the ports are ours: the start-up read (readAtStart: the upstreams' first probes,
  // a kept lease, ComfyUI's work) decides the first answer. Requests wait at the door meanwhile.
  let pickUp!: () => void;
  const pickedUp = new Promise<void>((r) => (pickUp = r));
  // A balancer's agent check is answered at once, not held at the door: "drain" until the start has decided.
  let starting = true;
  try {
    // Only an image job reads the model memory: without ComfyUI, LLM bodies are not scanned.
    const watchLlmBody = ollama && comfy && handoff ? () => llmBodyWatch(ollama, handoff) : undefined;
    const noGpu = ollama && noGpuRule(ollama, log, config.probeTimeoutMs);
    // LLM waits by class (issue 30), the client told as for the LLM quota.
    const llmWaited = (req: Request, clientIp: string | undefined, waitedMs: number) => classMetrics.onLlmWait(llmClient(req, clientIp).cls, waitedMs);
    // A waiting LLM request's place in line (issue 30), under the status' number for it.
    const llmWaiter = (req: Request, clientIp: string | undefined, tracked: unknown) => {
      const who = llmClient(req, clientIp);
      return { client: who.client, cls: who.cls, tag: tracked instanceof LlmRequest ? tracked.id : undefined };
    };
    const llmSide = { watchLlmBody, noGpu: noGpu?.decide, watchPass: noGpu?.watchPass, classify: side.classifyLlm, refuse: side.refuseLlm, restored: side.restored, llmWaited, llmWaiter };
    if (config.ollamaUrl) start("ollama", "LISTEN_OLLAMA", config.listenOllama, config.ollamaUrl, { ...llmSide, llmQuota, coexist: coexist && ((m) => coexist.serve(m)) });
    if (config.ollamaUrl && config.listenOllamaNested) {
      const nested = tenants.image ? () => sessions.joinNested() : undefined;
      start("nested", "LISTEN_OLLAMA_NESTED", config.listenOllamaNested, config.ollamaUrl, { ...llmSide, nested });
    }
    // Several cards behind a balancer (balance/): views of the lock's state, never a second lock.
    const imageReady = () => readiness(lock.snapshot(), upstreamHealth.comfy).ready;
    const heldImageJobs = () => withWaitingLeases(heldPrompts, steering.waiting().length);
    if (config.comfyUrl) {
      start("comfy", "LISTEN_COMFY", config.listenComfy, config.comfyUrl, { imageDialect: tenants.image?.dialect, imageJob, syncJob: side.syncJob, classify: side.classifyImage, imageReady, heldImageJobs, watchPass: comfyCancelWatch((t) => nudges.nudge(t), (t) => heldPrompts.drop(t)) });
    }
    if (config.agentListen) {
      const addr = parseListen(config.agentListen);
      agent = bindOrSay("AGENT_LISTEN", config.agentListen, () => startAgent({ hostname: addr.hostname, port: addr.port, line: () => (starting ? "drain" : agentLine(lock.snapshot())) }));
    }
  } catch (err) {
    for (const s of servers) s.server.stop(true);
    live?.stop();
    stopDrainBound();
    throw err;
  }

  /** Resolves on the next transition to idle. */
  const nextIdle = () =>
    new Promise<void>((resolve) => {
      const off = lock.onEvent((e) => {
        if (e.type === "transition" && e.to === "idle") {
          off();
          resolve();
        }
      });
    });

  // An image job that finds ComfyUI refusing while the last probe saw it up has the probe look
  // again now, so /healthz and /readyz?class=image say "down" within a probe, not a HEALTH_INTERVAL,
  // later. Not a pass-through request's refusal: that would end its retries (knownDown) and turn an
  // upstream's restart into 502s.
  const suspectDown = (u: Upstream) => void (upstreamHealth[u] === "up" && monitor.probeNow());
  const upstreamLog = upstreamHealthLogger(log, metrics, side.otherKinds);
  const monitor: HealthMonitor = startHealthMonitor({
    ollama: tenants.llm,
    comfy: tenants.image,
    timeoutMs: config.probeTimeoutMs,
    intervalMs: config.healthIntervalMs,
    report: withHealth(upstreamHealth, (u, up, detail) => {
      upstreamLog(u, up, detail);
      status.onUpstream(u, up, detail);
      if (up) probedDown.delete(u);
      else probedDown.add(u);
    }),
    // The status page's resident models are at most one HEALTH_INTERVAL old (ComfyUI's memory
    // comes with its own probe, /system_stats).
    whenOllamaUp: readLlm,
  });

  const restoreLease = async () => {
    const kept = leaseFile?.load();
    if (kept) await steering.restore(kept);
  };
  void readAtStart({ probed: monitor.reported, restoreLease, image: imageJob, other: side.pickUpAtStart, log, probeTimeoutMs: config.probeTimeoutMs })
    .catch((err: unknown) => log.error("picking up the card's state at start failed", { err: err instanceof Error ? err : String(err) }))
    .finally(() => {
      starting = false;
      pickUp();
    });

  return {
    lock,
    tracker,
    metrics,
    status,
    steering,
    listeners: bound,
    card,
    agentPort: agent?.port,
    listener: (name) => bound.find((b) => b.name === name),
    health,
    probed: Promise.all([monitor.first, pickedUp]).then(() => {}),
    async whenIdle() {
      // Idle means the lock is idle AND no image job is still being tracked: a job releases the
      // lock before its tracking ends (and a warm-up may follow), so both are checked, in a loop.
      for (;;) {
        if (lock.state !== "idle") await nextIdle();
        await tracker.settled();
        if (lock.state === "idle") return;
      }
    },
    async stop(timeoutMs = config.shutdownTimeoutMs) {
      monitor.stop();
      live?.stop();
      steering.stop();
      stopDrainBound();
      agent?.stop(true);
      hub.closeAll();
      for (const job of tracker.active()) {
        if (job.promptId) log.warn("shutting down while an image job is tracked; a restart picks up what the card is doing", { prompt_id: job.promptId });
      }
      const graceful = Promise.all(servers.map((s) => s.server.stop(false)));
      const timer = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), timeoutMs).unref());
      if ((await Promise.race([graceful, timer])) === "timeout") {
        log.warn(`in-flight requests still open after SHUTDOWN_TIMEOUT, closing them`);
        await Promise.all(servers.map((s) => s.server.stop(true)));
      }
    },
  };
}

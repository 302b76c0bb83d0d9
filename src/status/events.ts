/**
 * GET /turnstile/events: Server-Sent Events (WHATWG HTML §9.2). The first event is a full
 * `status` snapshot; then `state`, `job`, `upstream`, `lease` and `card` (resident models and
 * ComfyUI's memory, after each read of them) as they happen, and `holders` (who holds and who
 * waits) at most once per tick when it changed — per-request events would cost every chat request
 * a JSON encoding for every open page. `line` (issue 30: the image jobs waiting, by client, with
 * position and estimate) is each reader's own view, sent at the same tick when it changed; the
 * estimate ages as the running job does, so it moves while nobody joins or leaves.
 *
 * A reader that falls behind never slows anything else: events are encoded once, appended to a
 * bounded per-client queue, and a client whose queue passes the bound is dropped and closed.
 */
import type { LineClient } from "./line.ts";
import type { StatusEvent, StatusModel } from "./model.ts";
import type { LeaseEvent, LeaseView } from "./steer.ts";

export interface EventHubOptions {
  model: StatusModel;
  /** A client with more than this many bytes not yet written is dropped. */
  maxQueuedBytes?: number;
  /** How often `holders` is checked for changes. */
  tickMs?: number;
  /** A comment line this often keeps idle connections (and proxies in between) open. */
  heartbeatMs?: number;
  /** Told when a client is dropped for falling behind. */
  onDrop?: (queuedBytes: number) => void;
  /**
   * Each tick while a reader is connected; `changed`: what readers see of the lock (holders,
   * state, jobs, leases) changed since the last tick, or a reader came. The card's reads hang
   * on it (status/card-refresh.ts): nobody watching, nothing read beyond the health probes.
   */
  onTick?: (changed: boolean) => void;
}

const DEFAULT_MAX_QUEUED = 256 * 1024;

class Client {
  readonly queue: string[] = [];
  queued = 0;
  closed = false;
  lastHolders = "";
  lastLine = "";
  wake: (() => void) | undefined;
  /** `line`: this reader's own place in line (only its entries, unless it may steer). */
  constructor(
    readonly withClients: boolean,
    readonly line: (() => LineClient[]) | undefined,
  ) {}

  push(chunk: string): void {
    this.queue.push(chunk);
    this.queued += chunk.length;
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  close(): void {
    this.closed = true;
    this.queue.length = 0;
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }
}

export class EventHub {
  readonly #model: StatusModel;
  readonly #maxQueued: number;
  readonly #tickMs: number;
  readonly #heartbeatMs: number;
  readonly #onDrop: (queuedBytes: number) => void;
  readonly #onTick: ((changed: boolean) => void) | undefined;
  #changed = false;
  readonly #clients = new Set<Client>();
  #unsubscribe: (() => void) | undefined;
  #tick: ReturnType<typeof setInterval> | undefined;
  #heartbeat: ReturnType<typeof setInterval> | undefined;

  constructor(opts: EventHubOptions) {
    this.#model = opts.model;
    this.#maxQueued = opts.maxQueuedBytes ?? DEFAULT_MAX_QUEUED;
    this.#tickMs = opts.tickMs ?? 1000;
    this.#heartbeatMs = opts.heartbeatMs ?? 15_000;
    this.#onDrop = opts.onDrop ?? (() => {});
    this.#onTick = opts.onTick;
  }

  get size(): number {
    return this.#clients.size;
  }

  /**
   * The SSE response for one reader; it ends when the reader goes away or is dropped. `line`: the
   * place in line this reader may see (routes.ts filters it by who asks, as for /turnstile/status).
   */
  connect(withClients: boolean, signal: AbortSignal, line?: () => LineClient[]): Response {
    const client = new Client(withClients, line);
    const snapshot = this.#model.snapshot(withClients);
    const place = line?.();
    client.lastLine = JSON.stringify(place) ?? "";
    client.push(sse("status", JSON.stringify(place ? { ...snapshot, line: place } : snapshot)));
    client.lastHolders = JSON.stringify(this.#model.holders(withClients));
    this.#add(client);
    signal.addEventListener("abort", () => this.#remove(client), { once: true });
    const hub = this;
    // Bun's "direct" stream writes straight to the socket; a promise from write means the reader
    // is behind, and while we wait on it new events only grow this client's bounded queue.
    const source: DirectSource = {
      type: "direct",
      async pull(c) {
        try {
          while (!client.closed) {
            if (client.queue.length === 0) {
              await new Promise<void>((r) => (client.wake = r));
              continue;
            }
            const chunk = client.queue.length === 1 ? client.queue[0]! : client.queue.join("");
            client.queue.length = 0;
            const w = c.write(chunk);
            if (w instanceof Promise) await w;
            client.queued -= chunk.length;
            const f = c.flush();
            if (f instanceof Promise) await f;
          }
        } catch {
          // The reader went away mid-write.
        } finally {
          hub.#remove(client);
          c.close();
        }
      },
      cancel() {
        hub.#remove(client);
      },
    };
    return new Response(new ReadableStream(source as unknown as UnderlyingDefaultSource<Uint8Array>), {
      headers: {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        // Tells nginx not to buffer the stream (a common reverse proxy in front of a home lab).
        "x-accel-buffering": "no",
      },
    });
  }

  /** Ends every stream (shutdown). */
  closeAll(): void {
    for (const c of [...this.#clients]) this.#remove(c);
  }

  #add(client: Client): void {
    this.#clients.add(client);
    // A new reader got the card as last read, up to a HEALTH_INTERVAL old: read it again now.
    this.#changed = true;
    if (this.#clients.size > 1) return;
    this.#unsubscribe = this.#model.subscribe((e) => this.#broadcast(e));
    this.#tick = setInterval(() => this.#onTickTimer(), this.#tickMs);
    this.#heartbeat = setInterval(() => this.#send(": keep-alive\n\n"), this.#heartbeatMs);
    this.#tick.unref();
    this.#heartbeat.unref();
  }

  #remove(client: Client): void {
    client.close();
    if (!this.#clients.delete(client) || this.#clients.size > 0) return;
    this.#unsubscribe?.();
    clearInterval(this.#tick);
    clearInterval(this.#heartbeat);
  }

  #onTickTimer(): void {
    this.#sendHolders();
    const changed = this.#changed;
    this.#changed = false;
    this.#onTick?.(changed);
  }

  #broadcast(e: StatusEvent): void {
    // The card's own news is what a change leads to reading; it must not lead to another read.
    if (e.type !== "card") this.#changed = true;
    const text = sse(e.type, JSON.stringify(e.data));
    this.#send(text, e.type === "lease" ? sse(e.type, JSON.stringify(leaseWithoutAddresses(e.data))) : text);
    // A state change moves holders too: tell readers now, not at the next tick.
    if (e.type === "state") this.#sendHolders();
  }

  /** `open`: the chunk for readers who may not see client addresses. */
  #send(chunk: string, open = chunk): void {
    for (const c of this.#clients) {
      c.push(c.withClients ? chunk : open);
      if (c.queued > this.#maxQueued) {
        this.#onDrop(c.queued);
        this.#remove(c);
      }
    }
  }

  /**
   * `holders` to each reader whose view changed since the last one it got. Compared as text,
   * once per tick while a reader is connected: the image queue has no event of its own.
   */
  #sendHolders(): void {
    const views = new Map<boolean, string>();
    const now = Date.now();
    for (const c of [...this.#clients]) {
      sendLine(c);
      let view = views.get(c.withClients);
      if (view === undefined) views.set(c.withClients, (view = JSON.stringify(this.#model.holders(c.withClients))));
      if (view !== c.lastHolders) {
        c.lastHolders = view;
        this.#changed = true;
        c.push(sse("holders", `{"now":${now},${view.slice(1)}`));
      }
      if (c.queued > this.#maxQueued) {
        this.#onDrop(c.queued);
        this.#remove(c);
      }
    }
  }
}

/**
 * `line` to a reader whose own place in line changed. Not a change of what the card holds (an
 * estimate that ages is not news for status/card-refresh.ts), so it leaves `#changed` alone;
 * a reader behind is dropped by #sendHolders' check, just after.
 */
function sendLine(c: Client): void {
  if (!c.line) return;
  const view = JSON.stringify(c.line());
  if (view === c.lastLine) return;
  c.lastLine = view;
  c.push(sse("line", `{"line":${view}}`));
}

/** A lease event without who took or revoked the lease (client addresses, shown only to those who may steer). */
function leaseWithoutAddresses(e: LeaseEvent): LeaseEvent {
  const { by: _taker, ...lease } = e.lease;
  if (e.event !== "end") return { ...e, lease: lease as LeaseView };
  const { by: _revoker, ...rest } = e;
  return { ...rest, lease: lease as LeaseView };
}

function sse(event: string, data: string): string {
  return `event: ${event}\ndata: ${data}\n\n`;
}

/** Bun's direct ReadableStream source (not in the DOM typings). */
interface DirectSource {
  type: "direct";
  pull(c: { write(chunk: string | Uint8Array): number | Promise<number>; flush(): number | Promise<number>; close(err?: unknown): void }): Promise<void>;
  cancel(reason: unknown): void;
}

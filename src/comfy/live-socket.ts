/**
 * The turnstile's own WebSocket to ComfyUI (issue 27): ComfyUI announces every queue change with
 * a `status` frame sent to every connected client, so a job's end is heard the moment it happens
 * instead of at the next poll. It is only a bell: what it hears makes the followers look again
 * at once, and /history (or the jobs API) stays the proof. It never takes the GPU, holds no
 * request, and is reopened with backoff when lost; polling goes on meanwhile.
 */
import { randomUUID } from "node:crypto";
import { backoffDelays } from "../http/backoff.ts";
import { basicAuth } from "../upstream/headers.ts";
import { isRecord } from "../upstream/http.ts";

/** What a frame from ComfyUI says: its queue changed, or a job ended (for its submitter). */
export type ComfyNews = { kind: "queue" } | { kind: "ended"; promptId: string };

const NEWS = /^\{\s*"type"\s*:\s*"(status|executing|execution_success|execution_error|execution_interrupted)"/;

/**
 * A text frame as news: `status` (the queue changed: sent on every change, and on connect), or the
 * end of a job — `executing` with `node: null`, `execution_success`, `execution_error`,
 * `execution_interrupted` (api-facts C6, R2). undefined for every other frame; ComfyUI writes
 * `{"type": …` first, so those are passed over without being parsed.
 */
export function comfyNews(frame: string): ComfyNews | undefined {
  const head = NEWS.exec(frame);
  if (!head) return undefined;
  if (head[1] === "status") return { kind: "queue" };
  const data = promptFrameData(frame);
  if (!data) return undefined;
  if (head[1] === "executing" && data.node !== null) return undefined;
  return { kind: "ended", promptId: data.prompt_id };
}

/**
 * The `data` of a ComfyUI /ws text frame when it names a prompt (`data.prompt_id`); undefined for
 * a frame that is not such JSON. The callers pick the frames worth parsing by their head first.
 */
export function promptFrameData(frame: string): (Record<string, unknown> & { prompt_id: string }) | undefined {
  let msg: unknown;
  try {
    msg = JSON.parse(frame);
  } catch {
    return undefined;
  }
  const data = isRecord(msg) && isRecord(msg.data) ? msg.data : undefined;
  return data && typeof data.prompt_id === "string" ? (data as Record<string, unknown> & { prompt_id: string }) : undefined;
}

/** ComfyUI's /ws URL under `base` (its path prefix kept), with a client id of the turnstile's own. */
export function liveSocketUrl(base: URL, clientId: string): URL {
  const url = new URL("ws", base.href.endsWith("/") ? base : new URL(`${base.href}/`));
  url.protocol = base.protocol === "https:" ? "wss:" : "ws:";
  url.username = "";
  url.password = "";
  url.searchParams.set("clientId", clientId);
  return url;
}

export interface LiveSocketOptions {
  base: URL;
  onNews(news: ComfyNews): void;
  /** A handshake that has not finished by then is given up and tried again. */
  connectTimeoutMs: number;
  /** Delays before reopening a lost socket (BACKOFF_INITIAL doubling to BACKOFF_MAX). */
  backoffInitialMs: number;
  backoffMaxMs: number;
  /** Told when the socket opens (true) or is lost (false). */
  onState?(up: boolean): void;
}

export class ComfyLiveSocket {
  /** Its own id: ComfyUI sends it nothing but what it sends everybody. */
  readonly clientId = `gpu-turnstile-${randomUUID().replace(/-/g, "")}`;
  #ws: WebSocket | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;
  #up = false;
  #delays: () => number;

  constructor(private readonly opts: LiveSocketOptions) {
    this.#delays = backoffDelays(opts.backoffInitialMs, opts.backoffMaxMs);
    this.#open();
  }

  /** Whether the socket is open now (while it is not, only polling sees a job's end). */
  get up(): boolean {
    return this.#up;
  }

  stop(): void {
    this.#stopped = true;
    this.#up = false;
    clearTimeout(this.#timer);
    this.#ws?.close(1000);
    this.#ws = undefined;
  }

  #open(): void {
    if (this.#stopped) return;
    let ws: WebSocket;
    try {
      // Credentials in COMFY_URL go as a header, as on every other call; never in the URL.
      const auth = basicAuth(this.opts.base);
      ws = new WebSocket(liveSocketUrl(this.opts.base, this.clientId).href, (auth ? { headers: { authorization: auth } } : undefined) as unknown as string[]);
    } catch {
      return this.#retry();
    }
    this.#ws = ws;
    ws.binaryType = "arraybuffer";
    this.#timer = setTimeout(() => ws.readyState === WebSocket.CONNECTING && ws.close(), this.opts.connectTimeoutMs);
    ws.onopen = () => {
      clearTimeout(this.#timer);
      this.#delays = backoffDelays(this.opts.backoffInitialMs, this.opts.backoffMaxMs);
      this.#up = true;
      this.opts.onState?.(true);
    };
    ws.onmessage = (e: MessageEvent) => {
      if (typeof e.data !== "string") return;
      const news = comfyNews(e.data);
      if (news) this.opts.onNews(news);
    };
    ws.onclose = () => {
      if (this.#ws !== ws) return;
      this.#ws = undefined;
      clearTimeout(this.#timer);
      // Reopened, ComfyUI greets it with a `status` frame: the followers then look at once.
      if (this.#up) {
        this.#up = false;
        this.opts.onState?.(false);
      }
      this.#retry();
    };
  }

  #retry(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => this.#open(), this.#delays());
    this.#timer.unref?.();
  }
}

/**
 * Websocket relay (ComfyUI's /ws and /api/ws). The upstream connection is opened first and the
 * client is upgraded only once it stands, so a refused upstream becomes an HTTP error instead of
 * an accepted socket that closes at once, and the subprotocol the upstream chose is the one the
 * client gets. Frames pass both ways unchanged (text stays text, binary stays binary). A websocket
 * never takes the GPU lock: it only carries progress messages about work the lock already covers.
 *
 * Flow control, toward ComfyUI: when it does not read, the client's reading is paused once
 * RELAY_BACKLOG_BYTES wait for it, and resumed when they have gone out.
 *
 * Toward the client: a client that does not read is closed with 1008 once WS_CLIENT_BACKLOG_BYTES
 * wait for it (issue 26). Pausing ComfyUI's side instead held ~19 MiB per such socket for as long
 * as it stayed open, and stalled ComfyUI's own sending; letting Bun drop frames would lose an
 * "executed" from a socket left open. A client that reads, even slowly, never gets near the bound:
 * ComfyUI's messages are progress lines and previews of a few hundred KiB at most.
 */
import type { Server, ServerWebSocket, WebSocketHandler } from "bun";
import { targetUrl } from "../http/forward.ts";
import { upstreamRequestHeaders } from "../upstream/headers.ts";
import { closeActionFor } from "./ws-close.ts";

/** What may wait unsent for ComfyUI before the client's reading is paused. */
export const RELAY_BACKLOG_BYTES = 16 * 1024 * 1024;
/** What may wait unsent for a client before it is closed as one that does not read. */
export const WS_CLIENT_BACKLOG_BYTES = 4 * 1024 * 1024;
/** The close code for it: 1008, policy violation (RFC 6455 §7.4.1). */
export const WS_BACKLOG_CLOSE = { code: 1008, reason: "gpu-turnstile: the client did not read its messages" } as const;
/** The largest frame passed (see relayHandlers); ComfyUI previews are small, but a 1 MiB frame must pass. */
const MAX_FRAME_BYTES = 64 * 1024 * 1024;
/** The upstream WebSocket has no drain event: while the client is paused for it, its backlog is looked at this often. */
const UPSTREAM_DRAIN_POLL_MS = 10;

/** Bun's client WebSocket can stop reading its socket (missing from the DOM type this project compiles with). */
type PausableWebSocket = WebSocket & { pause(): boolean; resume(): boolean };

export interface RelayData {
  upstream: PausableWebSocket;
  /** Set while the client's reading is paused for the upstream's backlog. */
  drainPoll?: ReturnType<typeof setInterval>;
  /** Upstream frames that arrived before the client side was open. */
  early: (string | ArrayBuffer)[];
  /** Set once Bun has opened the client side. */
  client: ServerWebSocket<RelayData> | undefined;
  clientClosed: boolean;
  /** Told when the client is closed for not reading, with what waited for it. */
  onOverflow?: (backlogBytes: number) => void;
}

export interface RelayOptions {
  upstream: URL;
  clientIp: string | undefined;
  /** How long to wait for the upstream handshake. */
  connectTimeoutMs: number;
  /** Shown each text frame ComfyUI sends, with the socket's `clientId` (the status page's progress). */
  observe?: (clientId: string | null, frame: string) => void;
  /** A client closed for not reading (WS_CLIENT_BACKLOG_BYTES), for the log. */
  onOverflow?: (backlogBytes: number) => void;
}

export type UpgradeResult = { ok: true } | { ok: false; status: number; reason: string };

export async function upgradeAndRelay(req: Request, server: Server<RelayData>, opts: RelayOptions): Promise<UpgradeResult> {
  // Same target as any other request (the upstream's path prefix included), in ws(s):// form.
  const target = new URL(targetUrl(opts.upstream, new URL(req.url)));
  target.protocol = opts.upstream.protocol === "https:" ? "wss:" : "ws:";

  const headers = upstreamRequestHeaders(req.headers, opts.upstream, { clientIp: opts.clientIp, proto: "http" });
  // The websocket client writes its own handshake fields.
  for (const h of ["sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol", "content-length"]) {
    headers.delete(h);
  }
  const protocols = (req.headers.get("sec-websocket-protocol") ?? "")
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean);

  const upstream = new WebSocket(target.href, { headers, protocols } as unknown as string[]) as PausableWebSocket;
  upstream.binaryType = "arraybuffer";
  const data: RelayData = { upstream, early: [], client: undefined, clientClosed: false, onOverflow: opts.onOverflow };

  const observe = opts.observe;
  const clientId = observe ? new URL(req.url).searchParams.get("clientId") : null;
  upstream.onmessage = (e: MessageEvent) => {
    const frame = e.data as string | ArrayBuffer;
    if (observe && typeof frame === "string") observe(clientId, frame);
    if (!data.client) {
      data.early.push(frame);
      return;
    }
    data.client.send(frame);
    closeIfNotReading(data.client);
  };

  const opened = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), opts.connectTimeoutMs);
    upstream.onopen = () => {
      clearTimeout(timer);
      resolve(true);
    };
    upstream.onerror = () => {
      clearTimeout(timer);
      resolve(false);
    };
    upstream.onclose = () => {
      clearTimeout(timer);
      resolve(false);
    };
  });
  if (!opened) {
    safeTerminate(upstream);
    return { ok: false, status: 502, reason: `websocket upstream ${target.host} did not accept the connection` };
  }

  upstream.onclose = (e: CloseEvent) => {
    const client = data.client;
    if (!client || data.clientClosed) return;
    data.clientClosed = true;
    const action = closeActionFor(e.code, e.reason);
    if (action.kind === "terminate") client.terminate();
    else client.close(action.code, action.reason);
  };
  upstream.onerror = () => {};

  const responseHeaders = upstream.protocol ? { "sec-websocket-protocol": upstream.protocol } : undefined;
  const upgraded = server.upgrade(req, { data, headers: responseHeaders });
  if (!upgraded) {
    upstream.close(1011, "client upgrade failed");
    return { ok: false, status: 400, reason: "not a valid websocket upgrade request" };
  }
  return { ok: true };
}

/** The Bun websocket handlers for relayed sockets. */
export const relayHandlers: WebSocketHandler<RelayData> = {
  open(ws) {
    ws.data.client = ws;
    for (const frame of ws.data.early) ws.send(frame);
    ws.data.early.length = 0;
    closeIfNotReading(ws);
    if (ws.data.upstream.readyState !== WebSocket.OPEN) {
      ws.data.clientClosed = true;
      ws.close(1011, "upstream closed");
    }
  },
  message(ws, message) {
    const up = ws.data.upstream;
    if (up.readyState !== WebSocket.OPEN) return;
    up.send(message);
    if (up.bufferedAmount > RELAY_BACKLOG_BYTES && !ws.data.drainPoll) {
      ws.pause();
      ws.data.drainPoll = setInterval(() => {
        if (up.bufferedAmount > RELAY_BACKLOG_BYTES / 2 && up.readyState === WebSocket.OPEN) return;
        stopDrainPoll(ws.data);
        ws.resume();
      }, UPSTREAM_DRAIN_POLL_MS);
    }
  },
  close(ws, code, reason) {
    ws.data.clientClosed = true;
    stopDrainPoll(ws.data);
    const up = ws.data.upstream;
    if (up.readyState === WebSocket.CLOSED || up.readyState === WebSocket.CLOSING) return;
    const action = closeActionFor(code, reason);
    if (action.kind === "terminate") safeTerminate(up);
    else up.close(action.code, action.reason);
  },
  // Beyond Bun's 16 MiB default, so that a 1 MiB preview passes.
  maxPayloadLength: MAX_FRAME_BYTES,
  // Past this Bun drops frames silently; closeIfNotReading closes the socket before.
  backpressureLimit: WS_CLIENT_BACKLOG_BYTES + 2 * MAX_FRAME_BYTES,
  idleTimeout: 0,
};

/** Closes a client that lets more than WS_CLIENT_BACKLOG_BYTES wait; its close handler closes the upstream. */
function closeIfNotReading(ws: ServerWebSocket<RelayData>): void {
  const backlog = ws.getBufferedAmount();
  if (backlog <= WS_CLIENT_BACKLOG_BYTES || ws.data.clientClosed) return;
  ws.data.onOverflow?.(backlog);
  ws.close(WS_BACKLOG_CLOSE.code, WS_BACKLOG_CLOSE.reason);
}

function stopDrainPoll(data: RelayData): void {
  clearInterval(data.drainPoll);
  data.drainPoll = undefined;
}

function safeTerminate(ws: WebSocket): void {
  const t = (ws as unknown as { terminate?: () => void }).terminate;
  try {
    if (t) t.call(ws);
    else ws.close();
  } catch {
    // already gone
  }
}

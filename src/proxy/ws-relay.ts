/**
 * Websocket relay (ComfyUI's /ws and /api/ws). The upstream connection is opened first and the
 * client is upgraded only once it stands, so a refused upstream becomes an HTTP error instead of
 * an accepted socket that closes at once, and the subprotocol the upstream chose is the one the
 * client gets. Frames pass both ways unchanged (text stays text, binary stays binary). A websocket
 * never takes the GPU lock: it only carries progress messages about work the lock already covers.
 */
import type { Server, ServerWebSocket, WebSocketHandler } from "bun";
import { targetUrl } from "../http/forward.ts";
import { upstreamRequestHeaders } from "../upstream/headers.ts";
import { closeActionFor } from "./ws-close.ts";

export interface RelayData {
  upstream: WebSocket;
  /** Upstream frames that arrived before the client side was open. */
  early: (string | ArrayBuffer)[];
  /** Set once Bun has opened the client side. */
  client: ServerWebSocket<RelayData> | undefined;
  clientClosed: boolean;
}

export interface RelayOptions {
  upstream: URL;
  clientIp: string | undefined;
  /** How long to wait for the upstream handshake. */
  connectTimeoutMs: number;
  /** Shown each text frame ComfyUI sends, with the socket's `clientId` (the status page's progress). */
  observe?: (clientId: string | null, frame: string) => void;
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

  const upstream = new WebSocket(target.href, { headers, protocols } as unknown as string[]);
  upstream.binaryType = "arraybuffer";
  const data: RelayData = { upstream, early: [], client: undefined, clientClosed: false };

  const observe = opts.observe;
  const clientId = observe ? new URL(req.url).searchParams.get("clientId") : null;
  upstream.onmessage = (e: MessageEvent) => {
    const frame = e.data as string | ArrayBuffer;
    if (observe && typeof frame === "string") observe(clientId, frame);
    if (data.client) data.client.send(frame);
    else data.early.push(frame);
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
    if (ws.data.upstream.readyState !== WebSocket.OPEN) {
      ws.data.clientClosed = true;
      ws.close(1011, "upstream closed");
    }
  },
  message(ws, message) {
    const up = ws.data.upstream;
    if (up.readyState === WebSocket.OPEN) up.send(message);
  },
  close(ws, code, reason) {
    ws.data.clientClosed = true;
    const up = ws.data.upstream;
    if (up.readyState === WebSocket.CLOSED || up.readyState === WebSocket.CLOSING) return;
    const action = closeActionFor(code, reason);
    if (action.kind === "terminate") safeTerminate(up);
    else up.close(action.code, action.reason);
  },
  // ComfyUI previews are small, but a 1 MiB frame must pass: leave room beyond Bun's 16 MiB default.
  maxPayloadLength: 64 * 1024 * 1024,
  idleTimeout: 0,
};

function safeTerminate(ws: WebSocket): void {
  const t = (ws as unknown as { terminate?: () => void }).terminate;
  try {
    if (t) t.call(ws);
    else ws.close();
  } catch {
    // already gone
  }
}

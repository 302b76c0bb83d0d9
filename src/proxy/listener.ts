/**
 * One Bun.serve listener in front of one upstream. Websocket upgrades are relayed here (they need
 * the server object); everything else goes to the listener's Hono app.
 */
import type { Server } from "bun";
import { INTERNAL_PATHS, type ListenerApp } from "./app.ts";
import type { Listener } from "./classify.ts";
import { requestPath } from "./front-door.ts";
import { relayHandlers, upgradeAndRelay, type RelayData } from "./ws-relay.ts";

export interface ListenerOptions {
  name: Listener;
  hostname: string | undefined;
  port: number;
  upstream: URL;
  app: ListenerApp;
  wsConnectTimeoutMs: number;
  onWebsocket?: (r: { path: string; ok: boolean; reason?: string }) => void;
  /** Shown ComfyUI's text frames on relayed websockets. */
  observeWs?: (clientId: string | null, frame: string) => void;
  /** A websocket client closed for not reading (ws-relay.ts WS_CLIENT_BACKLOG_BYTES). */
  onWsOverflow?: (r: { path: string; backlogBytes: number }) => void;
  /** CLIENT_IDLE_TIMEOUT in whole seconds (client-idle.ts); 0 = never. */
  clientIdleS: number;
}

export function startListener(opts: ListenerOptions): Server<RelayData> {
  const idleS = opts.clientIdleS;
  return Bun.serve<RelayData>({
    hostname: opts.hostname,
    port: opts.port,
    // Closes a kept-alive connection silent this long, also one stopped inside a request head;
    // each request lifts it while in flight and sets it again before its last byte (client-idle.ts).
    idleTimeout: idleS,
    // Never Bun's development error page (stack traces to clients); our own errors are JSON.
    development: false,
    // One turnstile per port: with `development: false` Bun would otherwise set SO_REUSEPORT, and
    // a second instance would bind the same port and get half the connections with its own lock.
    reusePort: false,
    // Model blobs (`ollama create`) and ComfyUI uploads stream through; the upstream sets limits.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    // Not async: a proxied request's promise goes back to Bun as `proxy` made it, with no async
    // frame around it (forward.ts says what they cost).
    fetch(req, server) {
      // An LLM request may wait minutes for the GPU without a byte on the wire: never cut it off.
      if (idleS > 0) server.timeout(req, 0);
      const clientIp = server.requestIP(req)?.address;
      if (req.headers.get("upgrade")?.toLowerCase() === "websocket") return websocket(opts, req, server, clientIp);
      // Proxied traffic skips Hono's routing and context: measured in bench/, that is 4-5 KiB
      // per open stream and a few µs per request, for a route table of one entry.
      if ((req.method === "GET" || req.method === "HEAD") && INTERNAL_PATHS.has(requestPath(req.url))) {
        const res = opts.app.internal(req, clientIp);
        if (idleS === 0) return res;
        // Answered whole: the connection's idle timer is set again before the answer goes out.
        if (res instanceof Promise) return res.then((r) => (server.timeout(req, idleS), r));
        server.timeout(req, idleS);
        return res;
      }
      // The app sets the idle timer again before the answer's last byte (ListenerAppDeps.clientIdle).
      return opts.app.proxy(req, clientIp);
    },
    websocket: relayHandlers,
  });
}

/** A websocket upgrade: the front-door checks, then the relay to the upstream (ws-relay.ts). */
async function websocket(opts: ListenerOptions, req: Request, server: Server<RelayData>, clientIp: string | undefined): Promise<Response | undefined> {
  const url = opts.app.admit(req, "ws");
  if (url instanceof Response) return url;
  const path = url.pathname;
  const r = await upgradeAndRelay(req, server, {
    upstream: opts.upstream,
    clientIp,
    connectTimeoutMs: opts.wsConnectTimeoutMs,
    observe: opts.observeWs,
    onOverflow: opts.onWsOverflow && ((backlogBytes) => opts.onWsOverflow!({ path, backlogBytes })),
  });
  opts.onWebsocket?.({ path, ok: r.ok, reason: r.ok ? undefined : r.reason });
  if (r.ok) return undefined;
  if (opts.clientIdleS > 0) server.timeout(req, opts.clientIdleS);
  return new Response(`${r.reason}\n`, { status: r.status, headers: { "content-type": "text/plain; charset=utf-8" } });
}

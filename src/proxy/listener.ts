/**
 * One Bun.serve listener in front of one upstream. Websocket upgrades are relayed here (they need
 * the server object); everything else goes to the listener's Hono app.
 */
import type { Server } from "bun";
import { isInternalPath, type ListenerApp } from "./app.ts";
import type { Listener } from "./classify.ts";
import { relayHandlers, upgradeAndRelay, type RelayData } from "./ws-relay.ts";

export interface ListenerOptions {
  name: Listener;
  hostname: string | undefined;
  port: number;
  upstream: URL;
  app: ListenerApp;
  wsConnectTimeoutMs: number;
  onWebsocket?: (r: { path: string; ok: boolean; reason?: string }) => void;
}

export function startListener(opts: ListenerOptions): Server<RelayData> {
  return Bun.serve<RelayData>({
    hostname: opts.hostname,
    port: opts.port,
    // An LLM request may wait minutes for the GPU without a byte on the wire: never cut it off.
    idleTimeout: 0,
    // Never Bun's development error page (stack traces to clients); our own errors are JSON.
    development: false,
    // Model blobs (`ollama create`) and ComfyUI uploads stream through; the upstream sets limits.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    async fetch(req, server) {
      const clientIp = server.requestIP(req)?.address;
      if (req.headers.get("upgrade")?.toLowerCase() === "websocket") {
        const path = new URL(req.url).pathname;
        const r = await upgradeAndRelay(req, server, {
          upstream: opts.upstream,
          clientIp,
          connectTimeoutMs: opts.wsConnectTimeoutMs,
        });
        opts.onWebsocket?.({ path, ok: r.ok, reason: r.ok ? undefined : r.reason });
        if (r.ok) return undefined;
        return new Response(`${r.reason}\n`, { status: r.status, headers: { "content-type": "text/plain; charset=utf-8" } });
      }
      // Proxied traffic skips Hono's routing and context: measured in bench/, that is 4-5 KiB
      // per open stream and a few µs per request, for a route table of one entry.
      const path = pathOf(req.url);
      if (!isInternalPath(path)) return opts.app.proxy(req, clientIp);
      return opts.app.app.fetch(req, { clientIp });
    },
    websocket: relayHandlers,
  });
}

/** The path of an absolute request URL, without building a URL object. */
function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const q = url.indexOf("?", start);
  return q < 0 ? url.slice(start) : url.slice(start, q);
}

/**
 * One Bun.serve listener in front of one upstream. Websocket upgrades are relayed here (they need
 * the server object); everything else goes to the listener's Hono app.
 */
import type { Server } from "bun";
import type { Hono } from "hono";
import type { AppEnv } from "./app.ts";
import type { Listener } from "./classify.ts";
import { relayHandlers, upgradeAndRelay, type RelayData } from "./ws-relay.ts";

export interface ListenerOptions {
  name: Listener;
  hostname: string | undefined;
  port: number;
  upstream: URL;
  app: Hono<AppEnv>;
  wsConnectTimeoutMs: number;
  onWebsocket?: (r: { path: string; ok: boolean; reason?: string }) => void;
}

export function startListener(opts: ListenerOptions): Server<RelayData> {
  return Bun.serve<RelayData>({
    hostname: opts.hostname,
    port: opts.port,
    // An LLM request may wait minutes for the GPU without a byte on the wire: never cut it off.
    idleTimeout: 0,
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
      return opts.app.fetch(req, { clientIp });
    },
    websocket: relayHandlers,
  });
}

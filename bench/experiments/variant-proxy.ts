/**
 * Proxy variants for bench/experiments/run.ts, each a step from the bare Bun proxy towards what
 * the turnstile does, so the cost of each step can be measured under the same load:
 *   bare     Bun.serve → fetch → return the upstream Response as it is
 *   rewrap   + new Response(body, {status, headers}) with hop-by-hop headers stripped both ways
 *            and X-Forwarded-* set (src/proxy/headers.ts, as the turnstile does)
 *   hono     + a Hono app in front (app.all("*")), as the turnstile's listener does
 *   wrapped  + the response body piped through a pull-based JS ReadableStream (onBodyDone)
 * Env: VARIANT, PORT, UPSTREAM.
 */
import { Hono } from "hono";
import { onBodyDone } from "../../src/proxy/forward.ts";
import { clientResponseHeaders, upstreamRequestHeaders } from "../../src/proxy/headers.ts";

type BunInit = RequestInit & { decompress: boolean; duplex: "half" };

const variant = process.env.VARIANT ?? "bare";
const upstream = new URL(process.env.UPSTREAM!);
const port = Number(process.env.PORT);

async function bare(req: Request): Promise<Response> {
  const url = new URL(req.url);
  const headers = new Headers(req.headers);
  headers.set("host", upstream.host);
  const init: BunInit = { method: req.method, headers, body: req.body, redirect: "manual", decompress: false, signal: req.signal, duplex: "half" };
  return fetch(`${upstream.origin}${url.pathname}${url.search}`, init);
}

async function rewrap(req: Request, clientIp?: string, wrapBody = false): Promise<Response> {
  const url = new URL(req.url);
  const headers = upstreamRequestHeaders(req.headers, upstream, { clientIp, proto: "http" });
  const init: BunInit = { method: req.method, headers, body: req.body, redirect: "manual", decompress: false, signal: req.signal, duplex: "half" };
  const res = await fetch(`${upstream.origin}${url.pathname}${url.search}`, init);
  const body = wrapBody ? onBodyDone(res.body, () => {}) : res.body;
  return new Response(body, { status: res.status, statusText: res.statusText, headers: clientResponseHeaders(res.headers) });
}

const app = new Hono<{ Bindings: { clientIp: string | undefined } }>();
app.all("*", (c) => rewrap(c.req.raw, c.env.clientIp, variant === "wrapped"));

Bun.serve({
  hostname: "127.0.0.1",
  port,
  idleTimeout: 0,
  fetch(req, server) {
    if (variant === "bare") return bare(req);
    const clientIp = server.requestIP(req)?.address;
    if (variant === "rewrap") return rewrap(req, clientIp);
    return app.fetch(req, { clientIp });
  },
});

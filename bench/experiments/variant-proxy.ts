/**
 * Proxy variants for bench/experiments/run.ts, each a step from the bare Bun proxy towards what
 * the turnstile does, so the cost of each step can be measured under the same load:
 *   bare     Bun.serve → fetch → return the upstream Response as it is
 *   rewrap   + new Response(body, {status, headers}) with hop-by-hop headers stripped both ways
 *            and X-Forwarded-* set (src/upstream/headers.ts, as the turnstile does)
 *   hono     + a Hono app in front (app.all("*")), as the turnstile's listener does
 *   wrapped  + the response body piped through a pull-based JS ReadableStream (onBodyDone)
 *   lean     the turnstile's pass-through semantics (hop-by-hop stripped both ways, Host and
 *            X-Forwarded-* set) with fewer allocations: no Hono on the proxy path, the URL cut
 *            as a string, headers edited in place, the upstream Response returned as it is
 *   pool     the floor of the turnstile's own upstream client: Bun.serve → src/upstream/h1-pool.ts
 *            with only Host set → its Response returned as it is (no front door, no headers rules)
 *   static   Bun.serve answering a fixed 1.3 KB JSON from memory: the server's own floor
 * Env: VARIANT, PORT, UPSTREAM.
 */
import { Hono } from "hono";
import { onBodyDone } from "../../src/http/forward.ts";
import { clientResponseHeaders, upstreamRequestHeaders } from "../../src/upstream/headers.ts";
import { poolFor } from "../../src/upstream/h1-pool.ts";

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

const HOP = ["connection", "proxy-connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"];

/** Strip hop-by-hop fields in place, touching the Headers only when one is there. */
function stripInPlace(h: Headers): void {
  const named = h.get("connection");
  if (named) for (const n of named.split(",")) if (n.trim()) h.delete(n.trim());
  for (const n of HOP) if (h.has(n)) h.delete(n);
}

async function lean(req: Request, clientIp: string | undefined): Promise<Response> {
  const raw = req.url;
  const pathAndQuery = raw.slice(raw.indexOf("/", raw.indexOf("//") + 2));
  const h = req.headers;
  const clientHost = h.get("host");
  stripInPlace(h);
  h.set("host", upstream.host);
  if (clientIp) {
    const prior = h.get("x-forwarded-for");
    h.set("x-forwarded-for", prior ? `${prior}, ${clientIp}` : clientIp);
  }
  if (!h.has("x-forwarded-proto")) h.set("x-forwarded-proto", "http");
  if (clientHost && !h.has("x-forwarded-host")) h.set("x-forwarded-host", clientHost);
  const init: BunInit = { method: req.method, headers: h, body: req.body, redirect: "manual", decompress: false, signal: req.signal, duplex: "half" };
  const res = await fetch(`${upstream.origin}${pathAndQuery}`, init);
  stripInPlace(res.headers);
  return res;
}

const pool = poolFor(upstream);
function pooled(req: Request): Promise<Response> {
  const raw = req.url;
  const target = raw.slice(raw.indexOf("/", raw.indexOf("//") + 2));
  return pool.request({ method: req.method, target, headers: { lines: `host: ${upstream.host}\r\n`, contentLength: null }, body: undefined, signal: req.signal });
}

const STATIC = JSON.stringify({ models: Array.from({ length: 6 }, (_, i) => ({ name: `model-${i}:latest`, size: 4_000_000_000 + i, digest: "0".repeat(64), details: { family: "llama" } })) }).slice(0, 1300);

const app = new Hono<{ Bindings: { clientIp: string | undefined } }>();
app.all("*", (c) => rewrap(c.req.raw, c.env.clientIp, variant === "wrapped"));

Bun.serve({
  hostname: "127.0.0.1",
  port,
  idleTimeout: 0,
  fetch(req, server) {
    if (variant === "bare") return bare(req);
    if (variant === "pool") return pooled(req);
    if (variant === "static") return new Response(STATIC, { headers: { "content-type": "application/json; charset=utf-8" } });
    const clientIp = server.requestIP(req)?.address;
    if (variant === "rewrap") return rewrap(req, clientIp);
    if (variant === "lean") return lean(req, clientIp);
    return app.fetch(req, { clientIp });
  },
});

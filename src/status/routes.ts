/**
 * Everything under /turnstile/ on both listeners: the status document, its event stream, the
 * page, and steering (force-release, GPU leases). Answers are JSON (errors included), never proxied.
 */
import { parseDuration } from "../config/duration.ts";
import { readCapped } from "../http/read-capped.ts";
import { hostName } from "../proxy/host-guard.ts";
import type { TrustedProxies } from "../fair/forwarded.ts";
import type { Seen } from "../fair/identity.ts";
import { authorise, clientBehindProxy, crossSiteRequest, forbidden } from "./auth.ts";
import type { LineClient } from "./line.ts";
import type { GpuUseView } from "../jobs/gpu-meter.ts";
import type { EventHub } from "./events.ts";
import type { StatusModel } from "./model.ts";
import { LeaseRefused, type Steering } from "./steer.ts";

// The page's text is loaded at its first request, not at start-up (page-text.ts says why).
let pageText: Promise<string> | undefined;
const loadPage = () => (pageText ??= import("./page-text.ts").then((m) => m.page));

/** The page loads nothing from anywhere: its own inline style and script, and the event stream. */
const PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'";

export interface StatusRoutesDeps {
  model: StatusModel;
  hub: EventHub;
  adminToken: string;
  /** Absent: the steering routes answer 404 (tests of the read-only part). */
  steering?: Steering;
  /**
   * Whether a Host header names this machine (localhost, an IP literal, its own names,
   * ALLOWED_HOSTS), whatever the listener binds. A loopback client needs such a Host to pass
   * without the token: a DNS-rebinding page comes from loopback too, but under its own name.
   * Default: `localhost` and IP literals only.
   */
  machineHost?: (host: string) => boolean;
  /** TRUSTED_PROXIES (fair/forwarded.ts): proxies whose forwarding headers are believed; only loopback ones vouch for a loopback client. */
  trustedProxies?: TrustedProxies;
  /** CARD_NAME, put in the page's title (before its script runs: a tab list tells the cards apart). */
  card?: string;
  /**
   * The image jobs waiting, by client, with their places (issue 30): every client's for someone who
   * may steer (`seen` undefined), else only the caller's own — told by its key, `?client_id=` or address.
   */
  line?: (seen: Seen | undefined) => LineClient[];
  /** Each client's GPU seconds in QUOTA_GPU_WINDOW (issue 30), told like `line`; absent when no quota is set. */
  gpuUse?: (seen: Seen | undefined) => GpuUseView[];
}

/** The page with CARD_NAME in its title (before its script runs: a tab list tells the cards apart). */
function titled(page: string, card: string | undefined): string {
  return card ? page.replace("<title>gpu-turnstile</title>", `<title>${escapeHtml(card)} · gpu-turnstile</title>`) : page;
}

const LEASE_PATH = /^\/turnstile\/lease\/([0-9a-f-]{1,64})(\/renew)?$/;

export function statusRoutes(deps: StatusRoutesDeps): (req: Request, clientIp: string | undefined) => Response | Promise<Response> {
  const machineHost = deps.machineHost ?? localOrIp;
  const namesMachine = (host: string | null) => host === null || machineHost(host);
  const trustedProxies = deps.trustedProxies ?? [];
  const judge = (req: Request, clientIp: string | undefined) => {
    const h = req.headers;
    const client = clientBehindProxy(clientIp, h, trustedProxies);
    return authorise(client.address, h.get("authorization"), deps.adminToken, namesMachine(h.get("host")), client.proxied);
  };
  return (req, clientIp) => {
    const path = new URL(req.url).pathname;
    // The page's links are relative to /turnstile/, so the bare prefix is sent there.
    if (path === "/turnstile") return new Response(null, { status: 308, headers: { location: "/turnstile/" } });
    if (deps.steering && (path === "/turnstile/release" || path === "/turnstile/lease" || path.startsWith("/turnstile/lease/"))) {
      const h = req.headers;
      const site = crossSiteRequest(h.get("origin"), h.get("host"), h.get("sec-fetch-site"));
      if (!site.ok) return forbidden(site);
      const auth = judge(req, clientIp);
      if (!auth.ok) return forbidden(auth);
      return steer(deps.steering, req, path, clientIp ?? "unknown").catch(refusal);
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      return Response.json({ error: `gpu-turnstile: ${req.method} is not allowed on ${path}` }, { status: 405, headers: { allow: "GET, HEAD" } });
    }
    // Client addresses are shown only to those who may steer (loopback under a name of this machine, or the admin token).
    const trusted = () => judge(req, clientIp).ok;
    switch (path) {
      case "/turnstile/":
        return loadPage().then(
          (page) =>
            new Response(titled(page, deps.card), {
              headers: { "content-type": "text/html; charset=utf-8", "content-security-policy": PAGE_CSP, "cache-control": "no-cache" },
            }),
        );
      case "/turnstile/status": {
        const canSteer = trusted();
        const seen = viewer(canSteer, req, clientIp);
        const line = deps.line?.(seen);
        const gpuUse = deps.gpuUse?.(seen);
        return Response.json(
          { ...deps.model.snapshot(canSteer), can_steer: canSteer && deps.steering !== undefined, ...(line ? { line } : {}), ...(gpuUse ? { gpu_use: gpuUse } : {}) },
          { headers: { "cache-control": "no-store" } },
        );
      }
      case "/turnstile/events": {
        // The stream's `line` is filtered for its reader as /turnstile/status's is, at each tick.
        const canSteer = trusted();
        const seen = viewer(canSteer, req, clientIp);
        const line = deps.line;
        return deps.hub.connect(canSteer, req.signal, line && (() => line(seen)));
      }
      default:
        return Response.json({ error: `gpu-turnstile: no such page: ${path}` }, { status: 404 });
    }
  };
}

/** Who asks, for its own place in line: undefined for one who may steer (it sees every client). */
function viewer(canSteer: boolean, req: Request, clientIp: string | undefined): Seen | undefined {
  if (canSteer) return undefined;
  return { authorization: req.headers.get("authorization"), clientId: new URL(req.url).searchParams.get("client_id") ?? undefined, address: clientIp, headers: req.headers };
}

async function steer(s: Steering, req: Request, path: string, by: string): Promise<Response> {
  if (path === "/turnstile/release") {
    if (req.method !== "POST") return notAllowed(req, path, "POST");
    return Response.json(await s.release(by));
  }
  if (path === "/turnstile/lease") {
    if (req.method !== "POST") return notAllowed(req, path, "POST");
    const body = await leaseBody(req);
    // Not the asker's address: the holder is shown to every reader (the address only to those who may steer).
    const lease = await s.take(body.holder ?? "unnamed", body.ttlMs, by, req.signal);
    // The asker hung up as the lease came: nobody would give it back before its TTL.
    if (req.signal.aborted) {
      s.giveBack(lease.id);
      return new Response(null, { status: 499 });
    }
    return Response.json({ id: lease.id, holder: lease.holder, expires_at: new Date(lease.expires_at).toISOString() });
  }
  const m = LEASE_PATH.exec(path);
  if (!m) return Response.json({ error: `gpu-turnstile: no such page: ${path}` }, { status: 404 });
  const id = m[1]!;
  if (m[2]) {
    if (req.method !== "POST") return notAllowed(req, path, "POST");
    const body = await leaseBody(req);
    const lease = s.renew(id, body.ttlMs);
    return Response.json({ id: lease.id, expires_at: new Date(lease.expires_at).toISOString() });
  }
  if (req.method !== "DELETE") return notAllowed(req, path, "DELETE");
  const lease = s.giveBack(id);
  return Response.json({ id: lease.id, ended: true });
}

/** A lease request's body is a few dozen bytes; more is a mistake. */
const MAX_LEASE_BODY = 4096;

/** `{"holder": "...", "ttl": "2h"}`, both optional; an empty body is `{}`. Cut at 4 KiB while it is read. */
async function leaseBody(req: Request): Promise<{ holder?: string; ttlMs?: number }> {
  const bytes = await readCapped(req, MAX_LEASE_BODY);
  if (bytes === undefined) throw new LeaseRefused(413, `gpu-turnstile: a lease request body is at most ${MAX_LEASE_BODY} bytes`);
  const text = new TextDecoder().decode(bytes);
  if (text.trim() === "") return {};
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new LeaseRefused(400, "gpu-turnstile: the body must be JSON, like {\"holder\":\"game\",\"ttl\":\"2h\"}");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw new LeaseRefused(400, "gpu-turnstile: the body must be a JSON object");
  const { holder, ttl } = body as Record<string, unknown>;
  if (holder !== undefined && (typeof holder !== "string" || holder.length === 0 || holder.length > 200)) {
    throw new LeaseRefused(400, "gpu-turnstile: holder must be a string of 1 to 200 characters");
  }
  if (ttl === undefined) return { holder };
  if (typeof ttl !== "string") throw new LeaseRefused(400, "gpu-turnstile: ttl must be a duration such as \"90s\", \"30m\" or \"2h\"");
  try {
    return { holder, ttlMs: parseDuration(ttl) };
  } catch (err) {
    throw new LeaseRefused(400, `gpu-turnstile: ttl: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** `localhost` (and names under it) or an IP literal: names no rebinding page can take. */
function localOrIp(hostHeader: string): boolean {
  const h = hostName(hostHeader);
  return h === "" || h === "localhost" || h.endsWith(".localhost") || /^[0-9.]+$/.test(h) || h.includes(":");
}

function notAllowed(req: Request, path: string, allow: string): Response {
  return Response.json({ error: `gpu-turnstile: ${req.method} is not allowed on ${path}` }, { status: 405, headers: { allow } });
}

function refusal(err: unknown): Response {
  if (err instanceof LeaseRefused) return Response.json({ error: err.message }, { status: err.status });
  // The asker left while the lease waited: nobody reads this answer.
  if (err instanceof DOMException || (err instanceof Error && err.name === "AbortError")) return new Response(null, { status: 499 });
  throw err;
}

function escapeHtml(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

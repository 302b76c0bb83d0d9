/**
 * Everything under /turnstile/ on both listeners: the status document, its event stream and the
 * page. Answers are JSON (errors included), never proxied.
 */
import { authorise } from "./auth.ts";
import type { EventHub } from "./events.ts";
import type { StatusModel } from "./model.ts";
// Imported as text so `bun build --compile` embeds the page in the binary.
import pageImport from "./page.html" with { type: "text" };

// Bun's typings describe an HTML import as a bundle; with `type: "text"` it is the file's text.
const page = pageImport as unknown as string;

/** The page loads nothing from anywhere: its own inline style and script, and the event stream. */
const PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'";

export interface StatusRoutesDeps {
  model: StatusModel;
  hub: EventHub;
  adminToken: string;
}

export function statusRoutes(deps: StatusRoutesDeps): (req: Request, clientIp: string | undefined) => Response {
  return (req, clientIp) => {
    const path = new URL(req.url).pathname;
    // The page's links are relative to /turnstile/, so the bare prefix is sent there.
    if (path === "/turnstile") return new Response(null, { status: 308, headers: { location: "/turnstile/" } });
    if (req.method !== "GET" && req.method !== "HEAD") {
      return Response.json({ error: `gpu-turnstile: ${req.method} is not allowed on ${path}` }, { status: 405, headers: { allow: "GET, HEAD" } });
    }
    // Client addresses are shown to those who may steer (loopback or the admin token) only.
    const trusted = () => authorise(clientIp, req.headers.get("authorization"), deps.adminToken).ok;
    switch (path) {
      case "/turnstile/":
        return new Response(page, {
          headers: { "content-type": "text/html; charset=utf-8", "content-security-policy": PAGE_CSP, "cache-control": "no-cache" },
        });
      case "/turnstile/status":
        return Response.json(deps.model.snapshot(trusted()), { headers: { "cache-control": "no-store" } });
      case "/turnstile/events":
        return deps.hub.connect(trusted(), req.signal);
      default:
        return Response.json({ error: `gpu-turnstile: no such page: ${path}` }, { status: 404 });
    }
  };
}

/**
 * Everything under /turnstile/ on both listeners: the status document, its event stream and the
 * page. Answers are JSON (errors included), never proxied.
 */
import { authorise } from "./auth.ts";
import type { EventHub } from "./events.ts";
import type { StatusModel } from "./model.ts";

export interface StatusRoutesDeps {
  model: StatusModel;
  hub: EventHub;
  adminToken: string;
}

export function statusRoutes(deps: StatusRoutesDeps): (req: Request, clientIp: string | undefined) => Response {
  return (req, clientIp) => {
    const path = new URL(req.url).pathname;
    if (req.method !== "GET" && req.method !== "HEAD") {
      return Response.json({ error: `gpu-turnstile: ${req.method} is not allowed on ${path}` }, { status: 405, headers: { allow: "GET, HEAD" } });
    }
    // Client addresses are shown to those who may steer (loopback or the admin token) only.
    const trusted = () => authorise(clientIp, req.headers.get("authorization"), deps.adminToken).ok;
    switch (path) {
      case "/turnstile/status":
        return Response.json(deps.model.snapshot(trusted()), { headers: { "cache-control": "no-store" } });
      case "/turnstile/events":
        return deps.hub.connect(trusted(), req.signal);
      default:
        return Response.json({ error: `gpu-turnstile: no such page: ${path}` }, { status: 404 });
    }
  };
}

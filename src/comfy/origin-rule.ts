/**
 * ComfyUI's own cross-site rule, applied by the turnstile before a `/prompt` takes the GPU, so a
 * page on another site that posts to /prompt gets ComfyUI's 403 before Ollama is emptied for a
 * job ComfyUI would refuse anyway (issue 18).
 *
 * Replicates `create_origin_only_middleware` of ComfyUI's server.py (Comfy-Org/ComfyUI,
 * server.py at 002c3fb9; newer trees move it to middleware/origin_middleware.py), which runs on
 * every request unless ComfyUI was started with `--enable-cors-header`:
 *
 *   1. `Sec-Fetch-Site` exactly `cross-site` → 403 (the newer versions' first check).
 *   2. With both Host and Origin: host_domain = Host lower-cased; origin_domain = the Origin's
 *      netloc lower-cased. If the Origin has no port, host_domain becomes the Host's hostname; if
 *      the Host has no port, origin_domain becomes the Origin's hostname. When the Host's hostname
 *      is loopback and both are non-empty and differ → 403.
 *
 * It is evaluated on the headers ComfyUI will receive, not the client's: the turnstile sends
 * ComfyUI its own Host (COMFY_URL's) and rewrites an Origin naming the turnstile to COMFY_URL's
 * origin (upstream/headers.ts), so only a foreign Origin is compared.
 *
 * `is_loopback` resolves names with getaddrinfo; here an IP literal is judged by its address and
 * `localhost` (and `*.localhost`) counts as loopback, any other name as not (no DNS at the door).
 */
import { originHost } from "../upstream/headers.ts";

export function comfyRefusesOrigin(headers: Headers, comfy: URL): boolean {
  if (headers.get("sec-fetch-site") === "cross-site") return true;
  const origin = headers.get("origin");
  if (origin === null) return false;
  const clientHost = headers.get("host");
  // The Origin ComfyUI sees: ours rewritten to its own, a foreign one as sent.
  const seen = clientHost && originHost(origin) === clientHost.toLowerCase() ? comfy.origin : origin;
  return hostOriginMismatch(comfy.host, seen);
}

/** The middleware's second check on a Host and an Origin as ComfyUI receives them. */
export function hostOriginMismatch(host: string, origin: string): boolean {
  let hostDomain = host.toLowerCase();
  const o = splitOrigin(origin);
  let originDomain = o.netloc;
  const h = splitNetloc(hostDomain);
  if (!isLoopback(h.hostname)) return false;
  if (o.port === undefined) hostDomain = h.hostname;
  if (h.port === undefined) originDomain = o.hostname;
  return hostDomain !== "" && originDomain !== "" && hostDomain !== originDomain;
}

/** urllib.parse.urlparse(origin): netloc, hostname and port (a netloc needs `scheme://`). */
function splitOrigin(origin: string): { netloc: string; hostname: string; port: string | undefined } {
  const m = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?#]*)/.exec(origin);
  const netloc = (m?.[1] ?? "").toLowerCase();
  return { netloc, ...splitNetloc(netloc) };
}

/** hostname (lower, brackets and userinfo stripped) and port of a netloc, as urllib splits them. */
function splitNetloc(netloc: string): { hostname: string; port: string | undefined } {
  const hostPort = netloc.slice(netloc.lastIndexOf("@") + 1);
  if (hostPort.startsWith("[")) {
    const close = hostPort.indexOf("]");
    const after = hostPort.slice(close + 1);
    return { hostname: hostPort.slice(1, close), port: after.startsWith(":") && after.length > 1 ? after.slice(1) : undefined };
  }
  const colon = hostPort.lastIndexOf(":");
  if (colon < 0) return { hostname: hostPort, port: undefined };
  const port = hostPort.slice(colon + 1);
  return { hostname: hostPort.slice(0, colon), port: port === "" ? undefined : port };
}

function isLoopback(hostname: string): boolean {
  if (hostname === "localhost" || hostname.endsWith(".localhost")) return true;
  if (/^\d+\.\d+\.\d+\.\d+$/.test(hostname)) return hostname.startsWith("127.");
  return hostname === "::1" || hostname === "0:0:0:0:0:0:0:1";
}

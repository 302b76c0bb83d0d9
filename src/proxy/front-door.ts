/**
 * What every proxied request passes before it is classified: a Host the turnstile can use and
 * may serve (host-guard.ts), a path the upstream can route (classify.ts's routedPath), and one
 * Content-Length. A request that fails gets a 4xx the caller writes in the client's dialect; none
 * of these checks throws, so a client's mistake is never a 500 or a stack trace.
 */
import type { RequestTarget } from "../http/forward.ts";
import type { ErrorReply } from "../http/dialect.ts";
import { routedPath } from "./classify.ts";

export type { RequestTarget };

export type Admission =
  | {
      ok: true;
      /** The request's path and query exactly as received (Bun has already normalised them). */
      url: RequestTarget;
      /** The path the upstream will route on, for classification. */
      routed: string;
    }
  | { ok: false; reply: ErrorReply };

/**
 * Check `req`; `hostAllowed` is the listener's host guard. A repeated Content-Length whose values
 * agree (Bun folds two equal fields into `5, 5`) is reduced to one value in `req.headers`.
 */
export function admit(req: Request, hostAllowed: (host: string) => boolean): Admission {
  const host = req.headers.get("host");
  // Bun gives a relative URL when the Host is missing or not a host name, and an absolute one
  // the URL parser refuses for `[zz]` or `x:99999`.
  const url = host !== null && !host.includes(",") && req.url.charCodeAt(0) !== 47 /* "/" */ ? parseTarget(req.url, host) : undefined;
  if (url === undefined) return refuse(400, "invalid_request", hostProblem(host));
  if (!hostAllowed(host!)) {
    return refuse(
      403,
      "forbidden_host",
      `gpu-turnstile: Host ${JSON.stringify(host)} is not allowed on a listener bound to loopback (DNS-rebinding guard, as Ollama's); add the name to ALLOWED_HOSTS to allow it`,
    );
  }
  const routed = routedPath(url.pathname);
  if (routed === undefined) {
    return refuse(400, "invalid_request", `gpu-turnstile: the path ${JSON.stringify(url.pathname)} has an invalid percent-encoding`);
  }
  const length = req.headers.get("content-length");
  if (length !== null && length.includes(",")) {
    // RFC 9110 §8.6: a list of one repeated value may be taken as that value; differing ones are an error.
    const values = length.split(",").map((v) => v.trim());
    if (values.some((v) => v !== values[0])) {
      return refuse(400, "invalid_request", `gpu-turnstile: conflicting Content-Length values (${length})`);
    }
    req.headers.set("content-length", values[0]!);
  }
  return { ok: true, url, routed };
}

/** Host values the URL parser accepted, with a plain host[:port] form: their URLs are cut as strings. */
const goodHosts = new Map<string, true>();
const GOOD_HOST_LIMIT = 1024;
const PLAIN_HOST = /^[A-Za-z0-9._~:[\]-]+$/;

/**
 * The path and query of Bun's absolute request URL. Bun hands over a URL it has already parsed
 * and serialised (dot segments resolved, characters percent-encoded), so once its host is known
 * to parse, path and query are plain cuts of the string — `new URL` per request costs more than
 * the rest of the front door. A host seen for the first time is parsed by `new URL` and
 * remembered only when the cut agrees with it; undefined when the URL does not parse.
 */
function parseTarget(href: string, host: string): RequestTarget | undefined {
  if (goodHosts.has(host)) return cut(href);
  let url: URL;
  try {
    url = new URL(href);
  } catch {
    return undefined;
  }
  const fast = cut(href);
  if (PLAIN_HOST.test(host) && fast.pathname === url.pathname && fast.search === url.search) {
    if (goodHosts.size >= GOOD_HOST_LIMIT) goodHosts.clear();
    goodHosts.set(host, true);
  }
  return { pathname: url.pathname, search: url.search };
}

function cut(href: string): RequestTarget {
  const start = href.indexOf("/", href.indexOf("//") + 2);
  if (start < 0) return { pathname: "/", search: "" };
  let end = href.indexOf("#", start);
  if (end < 0) end = href.length;
  const q = href.indexOf("?", start);
  return q < 0 || q > end ? { pathname: href.slice(start, end), search: "" } : { pathname: href.slice(start, q), search: q + 1 === end ? "" : href.slice(q, end) };
}

function hostProblem(host: string | null): string {
  if (host === null || host === "") return "gpu-turnstile: the request has no Host header (HTTP/1.1 requires one)";
  if (host.includes(",")) return "gpu-turnstile: the request has more than one Host header";
  return `gpu-turnstile: the Host header ${JSON.stringify(host)} is not a valid host[:port]`;
}

function refuse(status: number, type: string, message: string): Admission {
  return { ok: false, reply: { status, type, message } };
}

/** The path of a request URL as Bun gives it (absolute, or relative when the Host was unusable), without parsing it. */
export function requestPath(url: string): string {
  const start = url.charCodeAt(0) === 47 /* "/" */ ? 0 : url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const q = url.indexOf("?", start);
  return q < 0 ? url.slice(start) : url.slice(start, q);
}

/**
 * Header rules for a forwarding hop, after Go's net/http/httputil.ReverseProxy.
 *
 * RFC 9110 §7.6.1: Connection and the fields it names apply to one connection only and must
 * not be forwarded; the fixed list below are the hop-by-hop fields that predate that rule
 * (RFC 2616 §13.5.1, plus Proxy-Connection which old clients still send).
 */
const HOP_BY_HOP = [
  "connection",
  "proxy-connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
] as const;

/** RFC 9110 §5.6.2 token. Headers#delete throws on anything else, and a peer's junk must not fail the request. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

const HOP_BY_HOP_SET: ReadonlySet<string> = new Set(HOP_BY_HOP);

/** True for a field name (lower-case) that is hop-by-hop whatever `Connection` says. */
export function isHopByHop(lowerName: string): boolean {
  return HOP_BY_HOP_SET.has(lowerName);
}

/** True when `h` carries any hop-by-hop field (names come lower-cased from Headers iteration). */
export function hasHopByHop(h: Headers): boolean {
  for (const name of h.keys()) if (HOP_BY_HOP_SET.has(name)) return true;
  return false;
}

/** Remove hop-by-hop fields, including every field named in `Connection`, in place. */
export function stripHopByHop(h: Headers): Headers {
  const named = h.get("connection");
  if (named) {
    for (const name of named.split(",")) {
      const n = name.trim();
      if (TOKEN.test(n)) h.delete(n);
    }
  }
  for (const name of HOP_BY_HOP) h.delete(name);
  return h;
}

export interface ForwardedInfo {
  /** The client's address as the listener saw it. */
  clientIp: string | undefined;
  /** "http" — the turnstile terminates no TLS. */
  proto: string;
}

/**
 * Build the header set sent upstream.
 *
 * Host: the upstream's own authority. Ollama answers 403 to a Host it does not consider local
 * when it listens on loopback (api-facts O5), so the client's Host (the turnstile's name) cannot
 * be passed on; the client's Host travels in X-Forwarded-Host instead.
 *
 * Origin: ComfyUI refuses a loopback Host whose Origin names another host (C7) — its CSRF guard.
 * A browser page loaded through the turnstile sends Origin = the turnstile; that request is
 * same-origin from the user's point of view, so it is rewritten to the upstream's origin. A
 * foreign Origin is left alone so ComfyUI's guard still protects against cross-site requests.
 */
export function upstreamRequestHeaders(incoming: Headers, upstream: URL, info: ForwardedInfo): Headers {
  const h = new Headers();
  forEachUpstreamField(incoming, upstream, info, (name, value) => h.append(name, value));
  return h;
}

/**
 * The same fields as `upstreamRequestHeaders`, rendered as HTTP/1.1 field lines (`name: value\r\n`)
 * for the pooled client, without a Headers object in between; the framing fields are left to the
 * pool, which is handed the client's declared length.
 */
export function upstreamRequestHead(incoming: Headers, upstream: URL, info: ForwardedInfo): { lines: string; contentLength: string | null } {
  let lines = "";
  let contentLength: string | null = null;
  forEachUpstreamField(incoming, upstream, info, (name, value) => {
    if (name === "content-length") contentLength = value;
    else lines += `${name}: ${value}\r\n`;
  });
  return { lines, contentLength };
}

/**
 * The rules of both: one pass over the incoming fields (lower-case names, repeated fields joined,
 * as Headers iterates them), Host first.
 */
function forEachUpstreamField(incoming: Headers, upstream: URL, info: ForwardedInfo, emit: (name: string, value: string) => void): void {
  const connection = incoming.get("connection");
  const named = connection ? connectionOptions(connection) : undefined;
  const clientHost = incoming.get("host");
  emit("host", upstream.host);
  let hasAuth = false;
  let hasProto = false;
  let hasForwardedHost = false;
  let prior: string | undefined;
  incoming.forEach((value, name) => {
    switch (name) {
      case "host":
      // The turnstile's own mark for a request served during an image job (proxy/app.ts NESTED_MARK): never a client's.
      case "x-gpu-turnstile-nested":
        return;
      case "origin":
        if (clientHost && originHost(value) === clientHost.toLowerCase()) return emit(name, upstream.origin);
        break;
      case "x-forwarded-for":
        if (info.clientIp) {
          prior = value;
          return;
        }
        break;
      case "x-forwarded-proto":
        hasProto = true;
        break;
      case "x-forwarded-host":
        hasForwardedHost = true;
        break;
      // The turnstile's own request header (proxy/app.ts, NO_WAIT_HEADER): for this hop only.
      case "x-turnstile-wait":
        return;
    }
    if (HOP_BY_HOP_SET.has(name) || named?.has(name)) return;
    if (name === "authorization") hasAuth = true;
    emit(name, value);
  });
  // Credentials written into OLLAMA_URL/COMFY_URL (a basic-auth front of the upstream) are sent
  // unless the client brought its own.
  if (!hasAuth) {
    const auth = basicAuth(upstream);
    if (auth) emit("authorization", auth);
  }
  if (info.clientIp) emit("x-forwarded-for", prior ? `${prior}, ${info.clientIp}` : info.clientIp);
  if (!hasProto) emit("x-forwarded-proto", info.proto);
  if (clientHost && !hasForwardedHost) emit("x-forwarded-host", clientHost);
}

/** The field names a Connection value lists (lower-case); a token that is no field name names nothing. */
function connectionOptions(value: string): Set<string> {
  const named = new Set<string>();
  for (const t of value.split(",")) {
    const n = t.trim();
    if (TOKEN.test(n)) named.add(n.toLowerCase());
  }
  return named;
}

/** The Authorization value for credentials written into an upstream URL (`http://user:pass@host`). */
export function basicAuth(upstream: URL): string | undefined {
  if (!upstream.username) return undefined;
  const user = decodeURIComponent(upstream.username);
  const pass = decodeURIComponent(upstream.password);
  return `Basic ${Buffer.from(`${user}:${pass}`).toString("base64")}`;
}

/** Response headers for the client: everything the upstream sent except hop-by-hop fields. */
export function clientResponseHeaders(upstream: Headers): Headers {
  return stripHopByHop(new Headers(upstream));
}

/** The host (and port) an Origin names, lower-case; undefined when it is no URL. */
export function originHost(origin: string): string | undefined {
  try {
    return new URL(origin).host.toLowerCase();
  } catch {
    return undefined;
  }
}

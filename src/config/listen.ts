/**
 * Listen addresses in Go's forms (`:11434`, `127.0.0.1:11434`, `[::1]:11434`, `host:port`),
 * turned into what Bun.serve takes.
 */

export interface ListenAddress {
  /**
   * undefined for ":port": Bun.serve then binds every interface, IPv6 and IPv4 together where the
   * host has IPv6 and IPv4 alone where it has not — Go's meaning of ":port". "0.0.0.0" would drop
   * IPv6 clients (Windows resolves "localhost" to ::1 first) and "::" fails on IPv6-less hosts.
   */
  hostname: string | undefined;
  /** 0..65535; 0 = any free port (tests) */
  port: number;
}

export class ListenError extends Error {
  override name = "ListenError";
}

const HOSTNAME = /^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/;
const IPV6 = /^[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?$/;

export function parseListen(text: string): ListenAddress {
  const s = text.trim();
  const expected = 'expected ":port", "host:port" or "[ipv6]:port"';
  let host: string;
  let portText: string;
  if (s.startsWith("[")) {
    const close = s.indexOf("]");
    if (close < 0 || s[close + 1] !== ":") throw new ListenError(expected);
    host = s.slice(1, close);
    portText = s.slice(close + 2);
    if (!IPV6.test(host) || !host.includes(":")) throw new ListenError(`invalid IPv6 address "${host}"`);
  } else {
    const colon = s.lastIndexOf(":");
    if (colon < 0) {
      throw new ListenError(/^[0-9]+$/.test(s) ? `${expected} (did you mean ":${s}"?)` : expected);
    }
    host = s.slice(0, colon);
    portText = s.slice(colon + 1);
    if (host.includes(":")) throw new ListenError(`an IPv6 address needs brackets, e.g. "[::1]:11434"`);
    if (host !== "" && !HOSTNAME.test(host)) throw new ListenError(`invalid host "${host}"`);
    // Digits and dots are an IPv4 address to the resolver, never a name; Bun, failing to bind one, says "in use".
    if (/^[0-9.]+$/.test(host) && !/^(?:(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])$/.test(host)) {
      throw new ListenError(`invalid IPv4 address "${host}"`);
    }
  }
  if (!/^[0-9]{1,5}$/.test(portText) || Number(portText) > 65535) {
    throw new ListenError(`invalid port "${portText}" (0-65535)`);
  }
  return { hostname: host === "" ? undefined : host, port: Number(portText) };
}

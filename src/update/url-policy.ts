/**
 * Where the updater may connect. Everything it downloads comes from the host named in
 * UPDATE_REPO, over HTTPS; plain http is accepted for loopback hosts alone (a local fake in
 * tests). Redirects are followed only to that same host: the signature is what makes a binary
 * trustworthy, but an operator who firewalls the service down to its Gitea host should not see
 * it reach out elsewhere, and Gitea serves release attachments from its own host unless
 * object storage with SERVE_DIRECT is configured (then updates are refused and say so).
 */

export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** Why `url` may not be fetched, or null when it may. `allowedHost` is host[:port] of UPDATE_REPO. */
export function urlRefusal(url: URL, allowedHost: string): string | null {
  if (url.username || url.password) return `refusing ${url.origin}: credentials in the URL`;
  if (url.protocol !== "https:" && !(url.protocol === "http:" && isLoopbackHost(url.hostname))) {
    return `refusing ${url.protocol}//${url.host}: only https is allowed (plain http only for loopback hosts)`;
  }
  if (url.host.toLowerCase() !== allowedHost.toLowerCase()) {
    return `refusing ${url.host}: not the update host ${allowedHost}`;
  }
  return null;
}

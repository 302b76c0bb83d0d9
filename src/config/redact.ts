/**
 * Credentials written into an upstream URL (`http://admin:S3cretPW@host`) are for the upstream
 * only: every rendering of such a URL, and every line of output that may carry one (log lines, error
 * messages, response bodies), goes through these two functions. The whole user-info is masked, not
 * just the password: a bare `http://token@host` carries its secret in the user name.
 */

/** `scheme://userinfo@` — userinfo stops at the first `/`, `?`, `#`, whitespace or quote (RFC 3986 §3.2.1). */
const USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@"'<>\\]+@/gi;

/** Masks the user-info of every URL in `text` as `***`; everything else is kept. */
export function redactCredentials(text: string): string {
  return text.includes("@") ? text.replace(USERINFO, "$1***@") : text;
}

/** An upstream URL as it may be shown: `http://***@host:port/path` when it carries credentials. */
export function redactUrl(url: string | URL): string {
  return redactCredentials(typeof url === "string" ? url : url.href);
}

/**
 * Credentials written into an upstream URL (`http://admin:S3cretPW@host`) are for the upstream
 * only: every rendering of such a URL, and every line of output that may carry one (log lines, error
 * messages, response bodies), goes through these two functions. The whole user-info is masked, not
 * just the password: a bare `http://token@host` carries its secret in the user name.
 */

/**
 * `scheme://userinfo@`: the authority ends at the first `/`, `?` or `#` (RFC 3986 §3.2), and a URL
 * parser takes its last `@` as the end of the user-info, so a password holding `@` or `'` is
 * masked whole. Whitespace, `"`, `<`, `>` and `\` end a URL in free text (a stored upstream URL
 * has them percent-encoded, see schema.ts).
 */
const USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#"<>\\]+@/gi;

/** Masks the user-info of every URL in `text` as `***`; everything else is kept. */
export function redactCredentials(text: string): string {
  return text.includes("@") ? text.replace(USERINFO, "$1***@") : text;
}

/**
 * An upstream URL as it may be shown: `http://***@host:port/path` when it carries credentials.
 * A string that is not a URL at all (`admin:pw@host`, a forgotten scheme) is masked up to its
 * last `@` before any `/`, as a parser would read it.
 */
export function redactUrl(url: string | URL): string {
  if (typeof url !== "string") return redactCredentials(url.href);
  const scheme = url.indexOf("://");
  const start = scheme < 0 ? 0 : scheme + 3;
  const end = url.slice(start).search(/[/?#]/);
  const authority = end < 0 ? url.slice(start) : url.slice(start, start + end);
  const at = authority.lastIndexOf("@");
  return at < 0 ? url : `${url.slice(0, start)}***${url.slice(start + at)}`;
}

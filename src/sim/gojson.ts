/**
 * Go `encoding/json` compact output. JSON.stringify already matches Go's key order (we build
 * objects in struct-field order) and number formatting for the values we emit; Go additionally
 * escapes HTML-significant characters and the JS line separators, which a byte-comparing client
 * would notice.
 */
const GO_ESCAPES: Record<string, string> = {
  "<": "\\u003c",
  ">": "\\u003e",
  "&": "\\u0026",
  "\u2028": "\\u2028",
  "\u2029": "\\u2029",
};

export function goJson(value: unknown): string {
  // These characters can only occur inside string literals of the output, so a global replace is safe.
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => GO_ESCAPES[c] ?? c);
}

/** Mimics the message of Go's json decoder for a body that is not JSON (gin answers it verbatim). */
export function goJsonSyntaxError(text: string): string | undefined {
  try {
    JSON.parse(text);
    return undefined;
  } catch {
    const trimmed = text.trimStart();
    const c = trimmed[0];
    if (c === undefined) return "unexpected EOF";
    if (!"{[\"-0123456789tfn".includes(c)) return `invalid character '${c}' looking for beginning of value`;
    const key = /^\{\s*([^\s"}])/.exec(trimmed);
    if (key) return `invalid character '${key[1]}' looking for beginning of object key string`;
    return "unexpected EOF";
  }
}

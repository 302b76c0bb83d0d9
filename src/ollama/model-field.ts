/**
 * The top-level `"model"` of a JSON request body, found as the body's bytes go by, chunk by
 * chunk, without parsing it. Used on every LLM request (the hot path): no JSON.parse, no string
 * per field, and the inside of strings — where a chat's bulk is: messages, base64 images — is
 * skipped with native `indexOf`, so a body costs little more than a pass over its structure.
 *
 * Clients put `model` first (Ollama's libraries, LiteLLM) or after the messages (OpenAI's SDKs),
 * and the scan stops at the first one, so the usual body costs a few bytes. Keys are matched as
 * Go's encoding/json matches them (any case: `"Model"` works). Go lets a later duplicate key win;
 * a body with two model keys is not what any client sends, and the worst it can do is hide its
 * model from a blind unload, which still unloads whatever the last good /api/ps listed. A body that
 * is not a JSON object (multipart audio uploads) reports nothing.
 */

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const LBRACE = 0x7b;
const RBRACE = 0x7d;
const LBRACKET = 0x5b;
const RBRACKET = 0x5d;
const COLON = 0x3a;
const COMMA = 0x2c;

/** Bytes of a key or value captured at most: anything longer is neither "model" nor a model name. */
const MAX_CAPTURE = 512;

const decoder = new TextDecoder();

/** Feeds the body's chunks in order; `found` is called once, with the first top-level model name. */
export type BodyWatcher = (chunk: Uint8Array) => void;

export function modelFieldWatcher(found: (model: string) => void): BodyWatcher {
  let done = false;
  let depth = 0;
  let inString = false;
  // Inside a string, the previous byte was a backslash (it may end one chunk and the escaped byte start the next).
  let escaped = false;
  // What the current string is: a key at depth 1, the value of a "model" key, or anything else.
  let role: "key" | "model" | "skip" = "skip";
  let captured: number[] = [];
  // Depth 1 bookkeeping: a key comes next; the last key was "model"; its value comes next.
  let expectKey = false;
  let keyIsModel = false;
  let valueIsModel = false;

  const endString = () => {
    if (role === "skip") return;
    const text = decode(captured);
    if (role === "key") {
      keyIsModel = text?.toLowerCase() === "model";
      expectKey = false;
    } else {
      valueIsModel = false;
      if (text) {
        found(text);
        done = true;
      }
    }
  };

  return (chunk) => {
    if (done) return;
    const n = chunk.length;
    // The next backslash at or after i in this chunk: -2 not yet looked for, -1 none.
    let bs = -2;
    let i = 0;
    while (i < n) {
      if (inString) {
        if (escaped) {
          escaped = false;
          if (role !== "skip") captured.push(chunk[i]!);
          i++;
          continue;
        }
        if (role === "skip") {
          const q = chunk.indexOf(QUOTE, i);
          if (bs !== -1 && bs < i) bs = chunk.indexOf(BACKSLASH, i);
          if (bs !== -1 && (q === -1 || bs < q)) {
            escaped = true;
            i = bs + 1;
          } else if (q === -1) {
            i = n;
          } else {
            inString = false;
            i = q + 1;
          }
          continue;
        }
        const b = chunk[i++]!;
        if (b === QUOTE) {
          inString = false;
          endString();
          if (done) return;
          continue;
        }
        if (captured.length >= MAX_CAPTURE) {
          // Too long to be "model" or a model name: skip the rest of it like any other string.
          if (role === "key") expectKey = keyIsModel = false;
          else valueIsModel = false;
          role = "skip";
          i--;
          continue;
        }
        if (b === BACKSLASH) escaped = true;
        captured.push(b);
        continue;
      }
      const b = chunk[i++]!;
      if (b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09) continue;
      if (depth === 0) {
        // Only an object has a "model"; after it (or for anything else) there is nothing to find.
        if (b !== LBRACE) {
          done = true;
          return;
        }
        depth = 1;
        expectKey = true;
        continue;
      }
      switch (b) {
        case QUOTE:
          inString = true;
          role = depth !== 1 ? "skip" : expectKey ? "key" : valueIsModel ? "model" : "skip";
          if (role !== "skip") captured = [];
          break;
        case COLON:
          if (depth === 1) {
            valueIsModel = keyIsModel;
            keyIsModel = false;
          }
          break;
        case COMMA:
          if (depth === 1) {
            expectKey = true;
            valueIsModel = false;
          }
          break;
        case LBRACE:
        case LBRACKET:
          if (depth === 1) valueIsModel = false;
          depth++;
          break;
        case RBRACE:
        case RBRACKET:
          depth--;
          if (depth === 0) {
            done = true;
            return;
          }
          break;
        default:
          // A number or a literal: not a model name.
          if (depth === 1) valueIsModel = false;
      }
    }
  };
}

/** A captured JSON string's text; escapes (`\u0065`, `\/`) decoded as JSON would. */
function decode(bytes: number[]): string | undefined {
  const raw = decoder.decode(Uint8Array.from(bytes));
  if (!raw.includes("\\")) return raw;
  try {
    return JSON.parse(`"${raw}"`) as string;
  } catch {
    return undefined;
  }
}

/**
 * The `/prompt` requests the turnstile holds for the GPU (issue 27): admitted, with their prompt_id
 * already chosen, but not yet sent to ComfyUI (waiting at the lock, or for Ollama to empty).
 * ComfyUI's `/queue` cannot show them, so the turnstile shows each as the pending item it will be
 * (balance/comfy-queue.ts): `[number, prompt_id, prompt, extra_data, outputs_to_execute]`, with the
 * job's own workflow and a number above every one ComfyUI has given. A queue panel's delete or
 * clear through the turnstile removes a held prompt here (proxy/comfy-cancels.ts): it is never
 * sent, and its request is answered at once.
 *
 * Texts are cut out of the client's body, not re-serialised: a workflow's 64-bit seeds would lose
 * digits through a JavaScript number.
 */

interface Entry {
  readonly bytes: Uint8Array;
  readonly clientId: string | undefined;
  /** On its way to ComfyUI (or answered): too late to remove here; ComfyUI has it or will. */
  sending: boolean;
  readonly onDelete: () => void;
  /** The item after its number (`, "id", {prompt}, {extra}, []]`), made at the first /queue read. */
  tail?: string;
}

export interface HeldPrompt {
  /** The request has gone to ComfyUI: a queue edit no longer finds it here. */
  sending(): void;
  /** Back to waiting (its attempt failed; it waits for the GPU again before the next). */
  waiting(): void;
  /** Answered, refused or gone: no longer held. */
  done(): void;
}

export class HeldPrompts {
  /** In arrival order (a Map keeps insertion order): the order the lock grants them in. */
  readonly #held = new Map<string, Entry>();
  #highest = -1;
  #learnt: Promise<void> | undefined;

  /**
   * `lastNumber`: the number of the job ComfyUI finished last (jobs sent before this process started).
   * `places`: each held prompt's place in the lock's line (fair turns, issue 30), so /queue shows
   * them in the order they will really be sent; none = arrival order.
   */
  constructor(
    private readonly lastNumber?: () => Promise<number | undefined>,
    private readonly places?: () => ReadonlyMap<string, number>,
  ) {}

  /**
   * Reads ComfyUI's last number once, before the first /queue answer shows held prompts; a failed
   * read is tried again next time.
   */
  prepare(): Promise<void> {
    if (!this.lastNumber) return Promise.resolve();
    this.#learnt ??= this.lastNumber().then(
      (n) => void (n !== undefined && this.sawNumber(n)),
      () => void (this.#learnt = undefined),
    );
    return this.#learnt;
  }

  /** Holds a prompt; `onDelete` runs when a queue edit removes it. */
  hold(promptId: string, bytes: Uint8Array, clientId: string | undefined, onDelete: () => void): HeldPrompt {
    const entry: Entry = { bytes, clientId, sending: false, onDelete };
    this.#held.set(promptId, entry);
    return {
      sending: () => void (entry.sending = true),
      waiting: () => void (entry.sending = false),
      done: () => {
        if (this.#held.get(promptId) === entry) this.#held.delete(promptId);
      },
    };
  }

  /** A `number` ComfyUI gave a job (its /prompt answer, or an item of its /queue). */
  sawNumber(n: number): void {
    if (Number.isFinite(n) && n > this.#highest) this.#highest = n;
  }

  get size(): number {
    return this.#held.size;
  }

  /**
   * The held prompts as ComfyUI's queue items (JSON texts), numbered from just above `top` (the
   * highest number in the queue read) and every number ComfyUI has given before.
   */
  items(top: number): string[] {
    this.sawNumber(top);
    let n = Math.floor(this.#highest) + 1;
    const out: string[] = [];
    let held = [...this.#held];
    const places = this.places?.();
    // Those on their way to ComfyUI (no longer in the line) first, then the line's order.
    if (places) held = held.map((h, i) => ({ h, at: places.get(h[0]) ?? i - held.length })).sort((a, b) => a.at - b.at).map((x) => x.h);
    for (const [id, e] of held) {
      e.tail ??= itemTail(id, e.bytes, e.clientId);
      out.push(`[${n++}${e.tail}`);
    }
    return out;
  }

  /** Removes the held prompts a queue edit names (`all`: a clear); returns their ids. */
  drop(target: readonly string[] | "all"): string[] {
    const ids = target === "all" ? [...this.#held.keys()] : target;
    const dropped: string[] = [];
    for (const id of ids) {
      const e = this.#held.get(id);
      if (!e || e.sending) continue;
      this.#held.delete(id);
      dropped.push(id);
      e.onDelete();
    }
    return dropped;
  }
}

/**
 * `, "id", prompt, extra_data, []]` as ComfyUI would queue the body: extra_data is the body's own
 * with `client_id` written in (post_prompt does the same); `outputs_to_execute` is ComfyUI's
 * validation result, which only ComfyUI knows, so it stays empty.
 */
function itemTail(promptId: string, bytes: Uint8Array, clientId: string | undefined): string {
  const text = new TextDecoder().decode(bytes);
  const members = topLevelMembers(text);
  const prompt = members.get("prompt") ?? "{}";
  let extra = members.get("extra_data");
  if (extra === undefined || !extra.startsWith("{")) extra = "{}";
  if (clientId !== undefined) extra = withClientId(extra, clientId);
  return `, ${JSON.stringify(promptId)}, ${prompt}, ${extra}, []]`;
}

function withClientId(extra: string, clientId: string): string {
  const value = JSON.stringify(clientId);
  const members = topLevelMembers(extra);
  if (members.has("client_id")) {
    // Rare (a client_id in both places): ComfyUI's wins; a re-serialised extra_data is acceptable here.
    const o = JSON.parse(extra) as Record<string, unknown>;
    return JSON.stringify({ ...o, client_id: clientId });
  }
  const close = extra.lastIndexOf("}");
  return `${extra.slice(0, close).trimEnd()}${members.size > 0 ? ", " : ""}"client_id": ${value}}`;
}

/**
 * The top-level members of a JSON object's text, each as its value's own text. The text is
 * known to be valid JSON (prompt-body.ts parsed it); anything else gives an empty map.
 */
export function topLevelMembers(text: string): Map<string, string> {
  const out = new Map<string, string>();
  let i = text.indexOf("{");
  if (i < 0) return out;
  i++;
  for (;;) {
    i = skipSpace(text, i);
    if (text[i] !== '"') return out;
    const keyEnd = stringEnd(text, i);
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    i = skipSpace(text, keyEnd);
    if (text[i] !== ":") return out;
    const start = skipSpace(text, i + 1);
    const end = valueEnd(text, start);
    if (end <= start) return out;
    out.set(key, text.slice(start, end));
    i = skipSpace(text, end);
    if (text[i] !== ",") return out;
    i++;
  }
}

function skipSpace(t: string, i: number): number {
  while (i < t.length && (t[i] === " " || t[i] === "\n" || t[i] === "\r" || t[i] === "\t")) i++;
  return i;
}

/** Index just past the string that opens at `i`. */
function stringEnd(t: string, i: number): number {
  for (let j = i + 1; j < t.length; j++) {
    if (t[j] === "\\") j++;
    else if (t[j] === '"') return j + 1;
  }
  return t.length;
}

/** Index just past the value that starts at `i`. */
function valueEnd(t: string, i: number): number {
  if (t[i] === '"') return stringEnd(t, i);
  if (t[i] !== "{" && t[i] !== "[") {
    let j = i;
    while (j < t.length && !",}] \n\r\t".includes(t[j]!)) j++;
    return j;
  }
  let depth = 0;
  for (let j = i; j < t.length; j++) {
    const c = t[j];
    if (c === '"') j = stringEnd(t, j) - 1;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      if (--depth === 0) return j + 1;
    }
  }
  return t.length;
}

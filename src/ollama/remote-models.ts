/**
 * Whether a model runs on another host, as Ollama itself says it: `remote_host` / `remote_model`
 * in its /api/show answer (a cloud model, `ollama pull x:cloud`, or any copy of one). A name that
 * only looks like a cloud model (`-cloud`, `:CLOUD`, stray whitespace) proves nothing: anybody can
 * `ollama cp` a local model to `llama3.2:8b-cloud`. So a cloud-looking request passes the GPU lock
 * only when Ollama says that very name is remote; every doubt holds it like a local model.
 *
 * Answers are kept, bounded, so a flood of cloud chats is not a flood of /api/show calls:
 * - keyed by the name exactly as the request wrote it (Ollama is asked about those very bytes,
 *   so one name's answer never stands for another's);
 * - at most REMOTE_MODELS_KEPT names, the least recently used dropped first;
 * - each kept REMOTE_MODEL_TTL_MS at most: a model re-created under the same name behind the
 *   turnstile's back (`ollama cp`/`create`/`rm` on Ollama's own port) is seen again within it;
 * - all dropped whenever a copy, create, pull or delete passes through the turnstile (`changed`);
 * - no answer is kept when Ollama could not be asked (down, slow, an error): held, and asked again
 *   next time;
 * - at most REMOTE_CHECKS_AT_ONCE questions in flight (one per name, shared by its askers): a
 *   request past that is held like a local model rather than asking more.
 */
import { callJson, isRecord, parseJson } from "../upstream/http.ts";

/** Names whose answer is kept. */
export const REMOTE_MODELS_KEPT = 256;
/** The longest an answer is kept. */
export const REMOTE_MODEL_TTL_MS = 10_000;
/** /api/show questions in flight at once. */
export const REMOTE_CHECKS_AT_ONCE = 8;

/** The routes after which a name may stand for another model (server/routes.go). */
const CHANGING: ReadonlySet<string> = new Set(["POST /api/copy", "POST /api/create", "POST /api/pull", "DELETE /api/delete"]);

/** Whether a model-management request (method, routed path) may change what a name stands for. */
export function changesModels(method: string, path: string): boolean {
  return CHANGING.has(`${method} ${path}`);
}

/** Whether an /api/show answer says the model runs elsewhere. */
export function remoteInShow(body: unknown): boolean {
  if (!isRecord(body)) return false;
  const said = (v: unknown) => typeof v === "string" && v.trim() !== "";
  return said(body.remote_host) || said(body.remote_model);
}

/** What Ollama says of `name`: remote or not, or undefined when it could not be asked. */
export type AskShow = (name: string) => Promise<boolean | undefined>;

/** /api/show on `base`, bounded by `timeoutMs`. 404 (no such model) is "not remote": Ollama would not run it elsewhere. */
export function showAsker(base: URL, timeoutMs: number): AskShow {
  return async (name) => {
    try {
      const { status, text } = await callJson(base, "/api/show", { body: { model: name }, timeoutMs });
      if (status === 200) return remoteInShow(parseJson(text));
      return status === 404 || status === 400 ? false : undefined;
    } catch {
      return undefined;
    }
  };
}

export interface RemoteModelsLog {
  warn(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
}

export class RemoteModels {
  readonly #kept = new Map<string, { remote: boolean; at: number }>();
  readonly #asking = new Map<string, Promise<boolean>>();
  /** Said once until Ollama answers again: a down Ollama is not a warning per chat. */
  #warned = false;
  /** Said once until the questions in flight drain. */
  #saturated = false;
  /** Bumped by `changed`: an answer asked before it is not kept. */
  #generation = 0;

  constructor(
    private readonly ask: AskShow,
    private readonly log: RemoteModelsLog,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Whether Ollama says `name` is remote (kept, or asked now). Never rejects; every doubt is false. */
  isRemote(name: string): Promise<boolean> {
    const kept = this.#kept.get(name);
    if (kept && this.now() - kept.at < REMOTE_MODEL_TTL_MS) {
      // Most recently used last: the Map's order is the eviction order.
      this.#kept.delete(name);
      this.#kept.set(name, kept);
      return Promise.resolve(kept.remote);
    }
    const asking = this.#asking.get(name);
    if (asking) return asking;
    if (this.#asking.size >= REMOTE_CHECKS_AT_ONCE) {
      if (!this.#saturated) this.log.warn(`${REMOTE_CHECKS_AT_ONCE} cloud-model checks already wait for Ollama; more cloud-looking requests are held like local ones meanwhile`, { model: name });
      this.#saturated = true;
      return Promise.resolve(false);
    }
    const generation = this.#generation;
    const p = this.ask(name).then((said) => {
      this.#asking.delete(name);
      if (this.#asking.size === 0) this.#saturated = false;
      if (said === undefined) {
        if (!this.#warned) this.log.warn("could not ask Ollama whether a cloud-looking model is remote; held like a local model until it answers", { model: name });
        this.#warned = true;
        return false;
      }
      this.#warned = false;
      // A model changed while it was asked about: this answer may be the old one.
      if (generation === this.#generation) this.#keep(name, said);
      return said;
    });
    this.#asking.set(name, p);
    return p;
  }

  /** A name may stand for another model now (a copy, create, pull or delete went through). */
  changed(): void {
    this.#generation++;
    this.#kept.clear();
  }

  #keep(name: string, remote: boolean): void {
    this.#kept.delete(name);
    if (this.#kept.size >= REMOTE_MODELS_KEPT) {
      const oldest = this.#kept.keys().next().value!;
      this.#kept.delete(oldest);
      this.log.debug("cloud-model answers full; the least recently used is dropped", { dropped: oldest, limit: REMOTE_MODELS_KEPT });
    }
    this.#kept.set(name, { remote, at: this.now() });
  }
}

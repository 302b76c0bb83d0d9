/**
 * Which Ollama models may be on the GPU, as far as the turnstile can know without asking: the
 * models it routed LLM requests to since /api/ps was last seen empty, and the models the last
 * good /api/ps listed. An image job unloads these blind when /api/ps cannot be read (SPEC "Image
 * job flow"), so an Ollama that hangs on /api/ps cannot keep a model loaded under ComfyUI.
 */

/**
 * Routed names kept at most; the oldest goes first. Ollama keeps a few models loaded at once
 * (OLLAMA_MAX_LOADED_MODELS, 3 per GPU by default), so the recent ones are the ones that matter,
 * and a client sending endless made-up names can neither grow memory nor lengthen an unload.
 */
export const MAX_ROUTED = 32;

export class ModelMemory {
  // A Set iterates in insertion order: re-inserting on every request keeps the most recent last.
  private readonly routedSet = new Set<string>();
  private lastListed: readonly string[] = [];

  /** An LLM request for `model` went to Ollama (or a warm-up loaded it). */
  routed(model: string): void {
    if (model === "") return;
    this.routedSet.delete(model);
    this.routedSet.add(model);
    if (this.routedSet.size > MAX_ROUTED) this.routedSet.delete(this.routedSet.values().next().value!);
  }

  /**
   * Ollama answered a request for `model` with 404: it has no such model, so nothing under that
   * name can be loaded. Forgetting it keeps a client that sends made-up names from pushing the real
   * ones out of the last MAX_ROUTED.
   */
  unknown(model: string): void {
    this.routedSet.delete(model);
  }

  /** A good /api/ps answer. An empty one proves nothing is loaded, so what was routed is forgotten. */
  listed(models: readonly string[]): void {
    this.lastListed = [...models];
    if (models.length === 0) this.routedSet.clear();
  }

  /**
   * Every model that may be loaded: the last good /api/ps list first, then the routed ones not
   * already in it (`llama3.2` is `llama3.2:latest` to Ollama).
   */
  suspects(): string[] {
    const out = new Map<string, string>();
    for (const m of [...this.lastListed, ...this.routedSet]) if (!out.has(withTag(m))) out.set(withTag(m), m);
    return [...out.values()];
  }
}

/** Ollama's default tag: a name whose last path part has no `:tag` means `:latest`. */
function withTag(name: string): string {
  return name.slice(name.lastIndexOf("/") + 1).includes(":") ? name : `${name}:latest`;
}

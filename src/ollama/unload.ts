/**
 * Empty Ollama before an image job (SPEC "Image job flow", step 2): `keep_alive:0` to every loaded
 * model, then poll /api/ps until it is empty, all within UNLOAD_TIMEOUT. Ollama answers an unload
 * at once and frees the model afterwards, so only an empty /api/ps counts as done.
 *
 * When /api/ps cannot be read (it hangs, fails, or answers nonsense) the unload goes on blind: to
 * every model the turnstile may have loaded (ModelMemory), and polling continues. An Ollama that
 * cannot say what it holds must not get to keep it under ComfyUI.
 *
 * Except when nothing runs at all: an Ollama on this machine whose port refuses the connection
 * holds no memory (its process is gone, and the memory with it), so the step ends at once instead
 * of polling a dead port for UNLOAD_TIMEOUT. Only a refusal, and only from this machine
 * (`refusalMeansGone`): a timeout, a reset or a remote refusal (a firewall's) proves nothing.
 */
import { sleep } from "../http/backoff.ts";
import { describeFetchError, isConnectionRefused } from "../upstream/upstream-errors.ts";
import { UpstreamHttpError } from "../upstream/http.ts";
import type { OllamaClient } from "./client.ts";

export interface UnloadSettings {
  /** UNLOAD_TIMEOUT: the whole step. */
  timeoutMs: number;
  /** UNLOAD_POLL_INTERVAL. */
  pollMs: number;
  /** One /api/ps read; after it the list counts as unreadable. */
  psTimeoutMs: number;
  /**
   * A model admitted to stay beside the image job (COEXIST, jobs/coexist.ts): neither unloaded nor
   * waited for. Only when /api/ps is read: an unreadable list is unloaded blind, this one included.
   */
  keep?: string;
}

export interface UnloadResult {
  /** The models keep_alive:0 was sent to (answered or not), in order. */
  tried: string[];
  /** /api/ps was read empty. */
  complete: boolean;
  /** Why not, when not. */
  error?: string;
  /** Ollama refused the connection on this machine: nothing runs, so nothing is loaded. */
  notRunning?: string;
}

export async function emptyOllama(ollama: OllamaClient, s: UnloadSettings): Promise<UnloadResult> {
  const deadline = Date.now() + s.timeoutMs;
  const signal = AbortSignal.timeout(s.timeoutMs);
  const tried: string[] = [];
  // Each model gets one keep_alive:0 that Ollama accepted; a failed one is sent again next poll.
  const accepted = new Set<string>();
  let psError: string | undefined;
  let unloadError: string | undefined;
  let listed: string[] | undefined;
  try {
    for (;;) {
      listed = undefined;
      try {
        listed = (await ollama.ps(signal, s.psTimeoutMs)).map((m) => m.name).filter((m) => m !== s.keep);
        psError = undefined;
      } catch (err) {
        if (signal.aborted) throw err;
        if (ollama.refusalMeansGone && isConnectionRefused(err)) return { tried, complete: true, notRunning: describeFetchError(err) };
        psError = `/api/ps unreadable: ${describeFetchError(err)}`;
      }
      if (listed?.length === 0) return { tried, complete: true };
      const targets = listed ?? ollama.memory.suspects();
      // Unreadable, and nothing the turnstile knows of can be loaded: nothing to send or wait for.
      if (targets.length === 0 && tried.length === 0) {
        return { tried, complete: false, error: `${psError}; nothing was routed to Ollama since it was last seen empty` };
      }
      let acceptedNow = false;
      for (const m of targets) {
        if (accepted.has(m)) continue;
        if (!tried.includes(m)) tried.push(m);
        try {
          await ollama.unload(m, signal);
          accepted.add(m);
          acceptedNow = true;
        } catch (err) {
          if (signal.aborted) throw err;
          // Ollama does not know the name (a client asked for a model that does not exist): nothing
          // under it can be loaded, so it is not sent again.
          if (err instanceof UpstreamHttpError && err.status === 404) accepted.add(m);
          else unloadError = `unload ${m}: ${describeFetchError(err)}`;
        }
      }
      const left = deadline - Date.now();
      if (left <= 0) break;
      // Right after an unload Ollama's /api/ps may block until the model is gone (api-facts O1):
      // ask again at once rather than a poll interval later.
      if (!acceptedNow) await sleep(Math.min(s.pollMs, left), signal);
    }
  } catch (err) {
    if (!signal.aborted) throw err;
  }
  const still = listed ? `still loaded after UNLOAD_TIMEOUT (${s.timeoutMs} ms): ${listed.join(", ")}` : undefined;
  const reasons = [still ?? psError ?? `no answer within UNLOAD_TIMEOUT (${s.timeoutMs} ms)`, unloadError];
  return { tried, complete: false, error: reasons.filter(Boolean).join("; ") };
}

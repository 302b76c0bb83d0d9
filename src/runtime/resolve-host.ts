/**
 * The card claim's name lookup (card-claim.ts ResolveHost), through the system resolver as a
 * client's connect would (getaddrinfo: /etc/hosts first, so Debian's `127.0.1.1 <hostname>` is
 * seen), every address of every family. Bounded: a resolver that does not answer would otherwise
 * hold the start without a word.
 */
/** The longest a start waits for the resolver for one upstream name; reaching it fails the start, said. */
export const RESOLVE_TIMEOUT_MS = 5000;

export async function resolveHost(name: string, timeoutMs = RESOLVE_TIMEOUT_MS): Promise<string[]> {
  // Loaded at the first name: most upstreams are IP addresses, and every start pays for an import.
  const { lookup } = await import("node:dns/promises");
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer from the resolver within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    const found = await Promise.race([lookup(name, { all: true, verbatim: true }), late]);
    if (found.length === 0) throw new Error("no addresses");
    return found.map((a) => a.address);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    throw new Error(typeof code === "string" && code !== "" ? code : err instanceof Error ? err.message : String(err));
  } finally {
    clearTimeout(timer);
  }
}

/** FAIR_CLASSES, FAIR_CHATS_FIRST, TRUSTED_PROXIES, QUOTA_GPU_SECONDS and CLIENTS_FILE's text, checked together into what the lock and the jobs use. */
import { parseClasses } from "./classes.ts";
import { clientAddress, parseTrustedProxies, type TrustedProxies } from "./forwarded.ts";
import { anyGpuLimit, gpuLimitS, parseGpuSeconds } from "./gpu-quota.ts";
import { identify, parseClients, type Identity, type Seen } from "./identity.ts";
import type { TurnClass } from "./turns.ts";

const DEFAULT_CHATS_FIRST = "batch";

export interface Fair {
  readonly classes: readonly TurnClass[];
  /** Some client of CLIENTS_FILE has its own LLM quota (`llm=N`). */
  readonly llmQuotas: boolean;
  /** TRUSTED_PROXIES: their forwarding headers name the client (forwarded.ts). */
  readonly trustedProxies: TrustedProxies;
  /** Who sent a request: behind a trusted proxy, by the address it forwards (seen.headers). */
  /** Some client is held to GPU seconds per window (QUOTA_GPU_SECONDS or a client's `gpu=N`). */
  readonly gpuQuotas: boolean;
  identify(seen: Seen): Identity;
  /** The client's GPU seconds per QUOTA_GPU_WINDOW; 0 = no limit. */
  gpuLimitS(who: Identity): number;
}

/** `clientsText`: CLIENTS_FILE's content (undefined = no file). An error names the setting and line. */
export function fairSetup(
  settings: { fairClasses: string; fairChatsFirst: string; clientsFile: string; trustedProxies?: string; quotaGpuSeconds?: string },
  clientsText: string | undefined,
): { ok: true; fair: Fair } | { ok: false; message: string } {
  const { clientsFile } = settings;
  const c = parseClasses(settings.fairClasses);
  if (!c.ok) return { ok: false, message: `FAIR_CLASSES: ${c.message}` };
  const chatsFirst = settings.fairChatsFirst.split(",").map((x) => x.trim()).filter(Boolean);
  const unknown = chatsFirst.find((n) => !c.classes.some((k) => k.name === n));
  // The default (batch) names a class a FAIR_CLASSES of one's own may not have: then it means none.
  if (unknown && settings.fairChatsFirst.trim() !== DEFAULT_CHATS_FIRST) return { ok: false, message: `FAIR_CHATS_FIRST: "${unknown}" is not a class of FAIR_CLASSES (${c.classes.map((k) => k.name).join(", ")})` };
  const classes = c.classes.map((k) => (chatsFirst.includes(k.name) ? { ...k, chatsFirst: true } : k));
  const p = parseClients(clientsText ?? "", c.classes.map((k) => k.name));
  if (!p.ok) return { ok: false, message: `CLIENTS_FILE ${clientsFile} line ${p.line}: ${p.message}` };
  const rules = p.rules;
  const t = parseTrustedProxies(settings.trustedProxies ?? "");
  if (!t.ok) return { ok: false, message: `TRUSTED_PROXIES: ${t.message}` };
  const proxies = t.proxies;
  const g = parseGpuSeconds(settings.quotaGpuSeconds ?? "0", c.classes.map((k) => k.name));
  if (!g.ok) return { ok: false, message: `QUOTA_GPU_SECONDS: ${g.message}` };
  const gpu = g.limits;
  return {
    ok: true,
    fair: {
      classes,
      llmQuotas: rules.some((r) => (r.llm ?? 0) > 0),
      trustedProxies: proxies,
      gpuQuotas: anyGpuLimit(gpu, rules.map((r) => r.gpu)),
      identify: (seen) => identify({ ...seen, address: clientAddress(seen.address, seen.headers, proxies) }, rules),
      gpuLimitS: (who) => gpuLimitS(gpu, who),
    },
  };
}

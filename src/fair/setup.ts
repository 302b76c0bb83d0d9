/** FAIR_CLASSES and CLIENTS_FILE's text, checked together into what the lock and the jobs use. */
import { parseClasses } from "./classes.ts";
import { identify, parseClients, type Identity, type Seen } from "./identity.ts";
import type { TurnClass } from "./turns.ts";

export interface Fair {
  readonly classes: readonly TurnClass[];
  /** How many clients CLIENTS_FILE names. */
  readonly named: number;
  identify(seen: Seen): Identity;
}

/** `clientsText`: CLIENTS_FILE's content (undefined = no file). An error names the setting and line. */
export function fairSetup(fairClasses: string, clientsFile: string, clientsText: string | undefined): { ok: true; fair: Fair } | { ok: false; message: string } {
  const c = parseClasses(fairClasses);
  if (!c.ok) return { ok: false, message: `FAIR_CLASSES: ${c.message}` };
  const p = parseClients(clientsText ?? "", c.classes.map((k) => k.name));
  if (!p.ok) return { ok: false, message: `CLIENTS_FILE ${clientsFile} line ${p.line}: ${p.message}` };
  const rules = p.rules;
  return { ok: true, fair: { classes: c.classes, named: rules.length, identify: (seen) => identify(seen, rules) } };
}

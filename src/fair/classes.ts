/**
 * FAIR_CLASSES: the classes of clients, best first, as `name:weight,…` (default
 * `interactive:4,normal:2,batch:1`). A weight is how many turns a class's clients get against one
 * turn of a weight-1 client while both wait. `normal` must be among them: it is the class of every
 * client CLIENTS_FILE does not name.
 */
import type { TurnClass } from "./turns.ts";
import { DEFAULT_CLASS } from "./identity.ts";

export type ParsedClasses = { ok: true; classes: TurnClass[] } | { ok: false; message: string };

export function parseClasses(text: string): ParsedClasses {
  const classes: TurnClass[] = [];
  for (const part of text.split(",").map((p) => p.trim())) {
    const m = /^([a-z][a-z0-9_-]{0,31}):(\d{1,3})$/.exec(part);
    if (!m) return { ok: false, message: `"${part}" is not name:weight (e.g. interactive:4, a weight of 1 to 100)` };
    const weight = Number(m[2]);
    if (weight < 1 || weight > 100) return { ok: false, message: `class ${m[1]}: weight ${weight} is outside 1-100` };
    if (classes.some((c) => c.name === m[1])) return { ok: false, message: `class ${m[1]} is named twice` };
    classes.push({ name: m[1]!, weight });
  }
  if (!classes.some((c) => c.name === DEFAULT_CLASS)) return { ok: false, message: `the class "${DEFAULT_CLASS}" is missing (every client no rule names is in it)` };
  return { ok: true, classes };
}

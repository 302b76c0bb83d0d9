/** The settings table for README.md and SPEC.md, generated so the docs cannot drift from SETTINGS. */
import { SETTINGS, type SettingDef } from "./settings.ts";

function defaultCell(def: SettingDef): string {
  if (def.defaultDoc !== undefined) return def.defaultDoc;
  if (typeof def.default === "function") return "_(depends on the platform)_";
  return def.default === "" ? "_(empty)_" : `\`${def.default}\``;
}

const cell = (s: string): string => s.replace(/\|/g, "\\|");

/** `| Var | Default | Meaning |`, one row per setting in table order. */
export function renderSettingsMarkdownTable(): string {
  const rows = SETTINGS.map((d) => `| \`${d.key}\` | ${cell(defaultCell(d))} | ${cell(d.doc)} |`);
  return `${["| Var | Default | Meaning |", "|---|---|---|", ...rows].join("\n")}\n`;
}

/** The settings table for README.md and SPEC.md, generated so the docs cannot drift from SETTINGS. */
import { defaultText, SETTINGS, type Platform, type SettingDef } from "./settings.ts";

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

/** The Markdown of a `defaultDoc` as plain text: `_(empty = disabled)_` → `(empty = disabled)`. */
const plain = (s: string): string => s.replace(/`/g, "").replace(/(^|\W)_(.+?)_(?=\W|$)/g, "$1$2");

/** Words of `text` on lines of at most `width` columns, each starting with `indent`. */
function wrap(text: string, indent: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(/\s+/)) {
    if (line !== "" && indent.length + line.length + 1 + word.length > width) {
      lines.push(indent + line);
      line = word;
    } else {
      line = line === "" ? word : `${line} ${word}`;
    }
  }
  if (line !== "") lines.push(indent + line);
  return lines;
}

/**
 * The same table for a terminal: `KEY=default` as it would be written in the config file (the
 * default for `platform`), then its meaning, indented and wrapped.
 */
export function renderSettingsText(platform: Platform, width = 80): string {
  const out: string[] = [];
  for (const def of SETTINGS) {
    const value = defaultText(def, platform);
    const note = value === "" && def.defaultDoc !== undefined ? `  ${plain(def.defaultDoc)}` : "";
    out.push(`  ${def.key}=${value}${note}`, ...wrap(def.doc, "      ", width));
  }
  return `${out.join("\n")}\n`;
}

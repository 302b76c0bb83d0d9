/**
 * Every config knob is documented where operators look: the SPEC table and the README table match
 * the settings table the binary validates against, row for row.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { renderSettingsMarkdownTable, SETTINGS } from "../../src/config/index.ts";

const rows = renderSettingsMarkdownTable().trim().split("\n");

for (const doc of ["SPEC.md", "README.md"]) {
  describe(doc, () => {
    const text = readFileSync(new URL(`../../${doc}`, import.meta.url), "utf8");
    test("holds the settings table exactly as the binary knows it", () => {
      const missing = rows.filter((r) => !text.includes(r));
      expect(missing).toEqual([]);
    });
    test("names every setting", () => {
      expect(SETTINGS.map((s) => s.key).filter((k) => !text.includes(`\`${k}\``))).toEqual([]);
    });
  });
}

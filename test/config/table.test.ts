import { expect, test } from "bun:test";
import { SETTINGS } from "../../src/config/settings.ts";
import { renderSettingsText } from "../../src/config/table.ts";

const WIN = { os: "win32", arch: "x64" } as const;

test("the terminal table: every setting as KEY=default, its meaning wrapped under it, no Markdown", () => {
  const text = renderSettingsText(WIN, 60);
  const lines = text.trimEnd().split("\n");
  expect(lines.filter((l) => /^ {2}\S/.test(l)).map((l) => l.trim().split("=")[0])).toEqual(SETTINGS.map((d) => d.key));
  const meaning = lines.filter((l) => l.startsWith("      "));
  expect(meaning.length).toBeGreaterThan(SETTINGS.length);
  for (const l of meaning) expect(l.length).toBeLessThanOrEqual(60);
  // The platform's own default, not the Markdown list of all of them.
  expect(text).toContain("  UPDATE_ASSET=gpu-turnstile.exe\n");
  expect(text).toContain("  OLLAMA_URL=  (empty = disabled)\n");
  expect(text).not.toMatch(/[`_]\(/);
});

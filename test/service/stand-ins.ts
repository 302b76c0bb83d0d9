/** Simple stand-ins for src/config/sample.ts, so these tests do not depend on its exact text. */
import type { ConfigOps, SampleOptions } from "../../src/service/install-config.ts";

export function sampleText(o: SampleOptions): string {
  return `CFG_VER=${o.version}\nAPP_VER=stable\n# OLLAMA_URL=\n# COMFY_URL=\n${o.logFile ? `LOG_FILE=${o.logFile}\n` : "# LOG_FILE=\n"}`;
}

export const standInConfig: ConfigOps = {
  renderSample: sampleText,
  migrateConfig(text, o) {
    const m = /^CFG_VER=(\S+)/m.exec(text);
    if (!m) return { action: "migrated", text: `CFG_VER=${o.version}\n${text}`, unknown: [] };
    if (m[1] === o.version) return { action: "unchanged", text, unknown: [] };
    const upgraded = text.replace(/^CFG_VER=\S+/m, `CFG_VER=${o.version}`);
    return { action: "migrated", text: `${upgraded}# NEW_SETTING=\n`, unknown: [] };
  },
  check: (text, file) => (/^(OLLAMA_URL|COMFY_URL)=\S/m.test(text) ? [] : [`neither OLLAMA_URL nor COMFY_URL is set in ${file}`]),
};

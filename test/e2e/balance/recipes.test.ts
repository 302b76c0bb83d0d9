/**
 * Every recipe in deploy/ is either run for real (HAProxy and nginx, packaged in Debian: their own
 * tests start the program on the recipe) or, where the program is not packaged in Debian (LiteLLM
 * is a pip package, Olla a Go binary), checked here: the YAML parses and uses only keys and values
 * the program knows, and it points at the turnstile the way deploy/README.md says. The README's
 * table says which is which, and this test holds it to that.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const DEPLOY = join(import.meta.dir, "..", "..", "..", "deploy");
const ROOT = join(DEPLOY, "..");
const read = (file: string) => readFileSync(join(DEPLOY, file), "utf8");
type Yaml = Record<string, unknown>;
const yaml = (file: string) => Bun.YAML.parse(read(file)) as Yaml;
const keysOf = (v: unknown) => Object.keys((v ?? {}) as object);

/** How each recipe is covered: run by a real program in the named test, or only checked here. */
const COVERAGE: Record<string, { run: string } | { checked: string }> = {
  "haproxy.cfg": { run: "test/e2e/balance/haproxy.test.ts" },
  "nginx.conf": { run: "test/e2e/balance/nginx.test.ts" },
  "litellm.yaml": { checked: "test/e2e/balance/recipes.test.ts" },
  "olla.yaml": { checked: "test/e2e/balance/recipes.test.ts" },
};

/** The two cards every recipe names (each test rewrites only these). */
const CARDS = ["http://192.168.1.11:11434", "http://192.168.1.12:11434"];

describe("deploy/: every recipe is run or checked, and the README says which", () => {
  test("each recipe file has its coverage, and the README's table states it", () => {
    const recipes = readdirSync(DEPLOY).filter((f) => f !== "README.md").sort();
    expect(recipes).toEqual(Object.keys(COVERAGE).sort());
    const readme = read("README.md");
    for (const [file, how] of Object.entries(COVERAGE)) {
      const row = readme.split("\n").find((l) => l.startsWith(`| [\`${file}\`]`));
      const [word, testFile] = "run" in how ? ["**run here**", how.run] : ["**checked here**", how.checked];
      expect({ file, row: row?.includes(word) && row.includes(testFile) }).toEqual({ file, row: true });
      expect({ file, testExists: existsSync(join(ROOT, testFile)) }).toEqual({ file, testExists: true });
    }
  });
});

describe("deploy/litellm.yaml (LiteLLM is not packaged in Debian: checked, not run)", () => {
  const cfg = yaml("litellm.yaml");

  test("only sections and router settings LiteLLM's proxy config knows", () => {
    expect(keysOf(cfg).filter((k) => !["model_list", "router_settings", "general_settings", "litellm_settings", "environment_variables"].includes(k))).toEqual([]);
    const router = cfg.router_settings as Yaml;
    expect(keysOf(router).filter((k) => !["routing_strategy", "num_retries", "allowed_fails", "cooldown_time", "timeout", "retry_after", "fallbacks"].includes(k))).toEqual([]);
    expect(["simple-shuffle", "least-busy", "usage-based-routing", "usage-based-routing-v2", "latency-based-routing", "cost-based-routing"]).toContain(router.routing_strategy as string);
    for (const k of ["num_retries", "allowed_fails", "cooldown_time"]) expect({ k, int: Number.isInteger(router[k]) && (router[k] as number) >= 0 }).toEqual({ k, int: true });
    // Background checks send real completions, which load a model on a card.
    expect((cfg.general_settings as Yaml).background_health_checks).toBe(false);
  });

  test("one Ollama deployment per card for each model, each asking a busy card to refuse at once", () => {
    const list = cfg.model_list as { model_name: string; litellm_params: Yaml }[];
    expect(Array.isArray(list) && list.length > 0).toBe(true);
    const byModel = new Map<string, string[]>();
    for (const d of list) {
      const p = d.litellm_params;
      expect(typeof d.model_name).toBe("string");
      expect(p.model as string).toMatch(/^ollama(_chat)?\//);
      expect(CARDS).toContain(p.api_base as string);
      expect(p.extra_headers).toEqual({ "X-Turnstile-Wait": "0" });
      byModel.set(d.model_name, [...(byModel.get(d.model_name) ?? []), p.api_base as string]);
    }
    for (const [model, bases] of byModel) expect({ model, cards: [...bases].sort() }).toEqual({ model, cards: CARDS });
  });
});

describe("deploy/olla.yaml (Olla is not packaged in Debian: checked, not run)", () => {
  const cfg = yaml("olla.yaml");
  /** Go's time.ParseDuration, as Olla reads durations. */
  const goDuration = /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/;

  test("only sections, keys and values Olla's config knows", () => {
    expect(keysOf(cfg).filter((k) => !["server", "proxy", "discovery", "model_registry", "routing", "logging", "engineering"].includes(k))).toEqual([]);
    const proxy = cfg.proxy as Yaml;
    expect(keysOf(proxy).filter((k) => !["engine", "profile", "load_balancer", "connection_timeout", "response_timeout", "read_timeout", "stream_buffer_size", "profile_filter"].includes(k))).toEqual([]);
    // Olla's balancer factory knows exactly these names; any other and Olla refuses to start.
    expect(["priority", "round-robin", "least-connections"]).toContain(proxy.load_balancer as string);
    expect(proxy.response_timeout as string).toMatch(goDuration);
    const discovery = cfg.discovery as Yaml;
    expect(discovery.type).toBe("static");
  });

  test("each card is an Ollama endpoint whose health check is the turnstile's /readyz?class=llm", () => {
    const endpoints = ((cfg.discovery as Yaml).static as Yaml).endpoints as Yaml[];
    const known = ["url", "name", "type", "priority", "preserve_path", "health_check_url", "model_url", "check_interval", "check_timeout", "model_filter"];
    for (const e of endpoints) {
      expect(keysOf(e).filter((k) => !known.includes(k))).toEqual([]);
      expect(e.type).toBe("ollama");
      expect(e.health_check_url).toBe("/readyz?class=llm");
      expect(e.check_interval as string).toMatch(goDuration);
      expect(e.check_timeout as string).toMatch(goDuration);
    }
    expect(endpoints.map((e) => e.url).sort()).toEqual(CARDS);
    expect(new Set(endpoints.map((e) => e.name)).size).toBe(endpoints.length);
  });
});

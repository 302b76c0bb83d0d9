/**
 * .gitea/workflows/ci.yml: tests on every push; image, signed binaries and release on a vX.Y.Z
 * tag only, never from a branch.
 */
import { describe, expect, test } from "bun:test";
import * as fs from "node:fs";
import * as path from "node:path";

interface Step {
  name?: string;
  uses?: string;
  run?: string;
  with?: Record<string, string | boolean>;
  env?: Record<string, string>;
  if?: string;
}
interface Job {
  needs?: string | string[];
  if?: string;
  env?: Record<string, string>;
  steps: Step[];
}
interface Workflow {
  on: { push: { branches?: string[]; tags?: string[] } };
  jobs: Record<string, Job>;
}

const repo = path.resolve(import.meta.dir, "../..");
const wf = Bun.YAML.parse(fs.readFileSync(path.join(repo, ".gitea/workflows/ci.yml"), "utf8")) as Workflow;
const jobs = Object.entries(wf.jobs);
const text = (s: Step): string => [s.uses, s.run, JSON.stringify(s.with ?? {}), JSON.stringify(s.env ?? {})].join("\n");
/** A step that produces or publishes something. */
const produces = (s: Step): boolean => /build\.ts|docker\/build-push-action|scripts\/sign\.ts|\/releases/.test(text(s));

describe("every push", () => {
  const testJob = wf.jobs.test;
  test("runs on pushes to any branch and on version tags", () => {
    expect(wf.on.push.branches).toEqual(["**"]);
    expect(wf.on.push.tags).toEqual(["v*"]);
  });
  test("installs, type-checks, lints if configured, tests", () => {
    const runs = testJob?.steps.map((s) => s.run ?? "") ?? [];
    expect(runs).toContain("npm ci --no-audit --no-fund");
    expect(runs).toContain("npx tsc --noEmit");
    expect(runs).toContain("npm run lint --if-present");
    expect(runs).toContain("npm test");
    expect(testJob?.if).toBeUndefined();
  });
});

describe("releases", () => {
  const [releaseName, release] = jobs.find(([, j]) => j.steps.some(produces)) ?? ["", undefined];
  const steps = release?.steps ?? [];
  const step = (re: RegExp): Step | undefined => steps.find((s) => re.test(text(s)));

  test("nothing is built or published from a branch", () => {
    for (const [name, job] of jobs) {
      if (!job.steps.some(produces)) continue;
      expect(`${name}: ${job.if}`).toBe(`${name}: startsWith(gitea.ref, 'refs/tags/v')`);
      expect(job.needs).toBe("test");
      // the first step refuses a tag that is not exactly vX.Y.Z
      const check = job.steps[0]?.run ?? "";
      expect(check).toContain("^v(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$");
      expect(check).toContain("exit 1");
    }
    expect(releaseName).toBe("release");
  });

  test("the tag pattern check accepts vX.Y.Z only", () => {
    const m = /"\$TAG" =~ (\S+) \]\]/.exec(steps[0]?.run ?? "");
    const re = new RegExp(m?.[1] ?? "^$");
    for (const ok of ["v1.2.3", "v0.1.0", "v10.20.30"]) expect(re.test(ok)).toBe(true);
    for (const bad of ["v1.2", "v1.2.3-rc1", "1.2.3", "v01.2.3", "main", "v1.2.3.4"]) expect(re.test(bad)).toBe(false);
  });

  test("pushes the image to the Gitea registry under the lowercased path, as :<tag> and :latest", () => {
    expect(step(/\$\{repository,,\}/)?.run).toContain('echo "IMAGE=${registry}/${repository,,}"');
    const login = step(/docker\/login-action/);
    expect(login?.with).toMatchObject({ username: "${{ gitea.actor }}", password: "${{ secrets.REGISTRY_TOKEN }}" });
    const push = step(/docker\/build-push-action/);
    expect(push?.with?.push).toBe(true);
    expect(String(push?.with?.tags).trim().split("\n")).toEqual(["${{ env.IMAGE }}:${{ gitea.ref_name }}", "${{ env.IMAGE }}:latest"]);
    expect(String(push?.with?.["build-args"])).toContain("VERSION=${{ gitea.ref_name }}");
    expect(step(/docker\/setup-buildx-action/)).toBeDefined();
  });

  test("builds the Windows exe, signs it for the tag with RELEASE_SIGNING_KEY, attaches .exe, .sig and .sha256 to a release", () => {
    const buildIdx = steps.findIndex((s) => /bun build\.ts .*--target windows-x64/.test(s.run ?? ""));
    const sign = steps.findIndex((s) => /scripts\/sign\.ts .*dist\/gpu-turnstile\.exe/.test(s.run ?? ""));
    const publish = steps.findIndex((s) => /curl .*-X POST "\$API"/.test(s.run ?? ""));
    expect(buildIdx).toBeGreaterThan(0);
    expect(sign).toBeGreaterThan(buildIdx);
    expect(publish).toBeGreaterThan(sign);
    expect(steps[sign]?.env?.RELEASE_SIGNING_KEY).toBe("${{ secrets.RELEASE_SIGNING_KEY }}");
    // A signature covers the tag: it must be the tag being released.
    expect(release?.env?.TAG).toBe("${{ gitea.ref_name }}");
    expect(steps[sign]?.run).toMatch(/^npx bun scripts\/sign\.ts --tag "\$TAG" /);
    const upload = steps[publish]?.run ?? "";
    expect(steps[publish]?.env?.API).toBe("${{ gitea.server_url }}/api/v1/repos/${{ gitea.repository }}/releases");
    expect(upload).toContain('for asset in "$f" "$f.sig" "$f.sha256"');
    expect(upload).toMatch(/for f in gpu-turnstile\.exe /);
    expect(upload).toContain('-F "attachment=@dist/$asset"');
    // A signature covers the asset name too: each binary is attached under the name it was signed as.
    const signed = (steps[sign]?.run ?? "").split(/\s+/).filter((w) => w.startsWith("dist/")).map((w) => w.slice("dist/".length));
    expect(/for f in ([^;]+);/.exec(upload)?.[1]?.trim().split(/\s+/)).toEqual(signed);
    expect(upload).toContain('"$API/$id/assets?name=$asset"');
  });
});

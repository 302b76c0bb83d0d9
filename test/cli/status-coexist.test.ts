/** `status` with COEXIST on (issue 31): the model beside the image job, its headroom, the learned peak, the last eject. */
import { expect, test } from "bun:test";
import { renderStatus } from "../../src/cli/status.ts";
import { type CoexistStatus, StatusModel } from "../../src/status/model.ts";

const GiB = 2 ** 30;

function rendered(coexist?: CoexistStatus): string[] {
  const model = new StatusModel({ version: "v1", upstreams: [], ...(coexist ? { coexist: () => coexist } : {}) });
  return renderStatus(model.snapshot(false)).split("\n");
}

test("with a model beside the job: its name, headroom and the learned peak; then the last eject", () => {
  const lines = rendered({
    model: "nomic-embed-text:latest",
    headroom_bytes: 14.5 * GiB,
    learned_peak_bytes: 8 * GiB,
    free_bytes: 15 * GiB,
    last_eject: { at: Date.now() - 5000, model: "qwen2.5:3b", why: "free memory 900000000 below COEXIST_MARGIN 1073741824", free_bytes: 9e8 },
  });
  expect(lines).toContain("beside the image job: nomic-embed-text:latest, headroom 14.5 GiB, learned peak 8.0 GiB");
  expect(lines.find((l) => l.startsWith("last eject: "))).toMatch(/^last eject: qwen2\.5:3b \d+(\.\d)?s ago: free memory 900000000 below COEXIST_MARGIN 1073741824$/);
});

test("nothing beside the job says so; with COEXIST off there is no such line at all", () => {
  expect(rendered({ model: null, headroom_bytes: null, learned_peak_bytes: null, free_bytes: null, last_eject: null })).toContain("beside the image job: none");
  expect(rendered().some((l) => l.includes("beside the image job"))).toBe(false);
});

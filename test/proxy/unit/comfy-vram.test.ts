import { expect, test } from "bun:test";
import { VRAM_RELEASED_FLOOR, vramReleased } from "../../../src/comfy/client.ts";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

test("the floor is 256 MiB", () => {
  expect(VRAM_RELEASED_FLOOR).toBe(256 * MiB);
});

test.each([
  ["dropped to a tenth of a large reservation", 10 * GiB, 1 * GiB, true],
  ["dropped to just above a tenth", 10 * GiB, 1 * GiB + 1, false],
  ["barely moved", 10 * GiB, 9 * GiB, false],
  ["not moved at all", 10 * GiB, 10 * GiB, false],
  ["down to the CUDA context slack (at the floor)", 1 * GiB, 256 * MiB, true],
  ["just above the floor, above a tenth", 1 * GiB, 256 * MiB + 1, false],
  ["nothing was held and nothing is", 0, 0, true],
  ["nothing was held, a little is now (below floor)", 0, 100 * MiB, true],
  ["nothing was held before but a lot is now", 0, 4 * GiB, false],
  ["grew during free", 2 * GiB, 3 * GiB, false],
] as const)("%s", (_name, before, now, released) => {
  expect(vramReleased(before, now)).toBe(released);
});

import { expect, test } from "bun:test";
import { ClientQuota } from "../../src/fair/quota.ts";

test("a client gets at most `limit` slots; a released one (once) frees a place; 0 = no limit", () => {
  const q = new ClientQuota();
  const a = [q.take("alice", 2), q.take("alice", 2)];
  expect(a.every(Boolean)).toBe(true);
  expect(q.take("alice", 2)).toBeUndefined();
  expect(q.take("bob", 2)).toBeDefined();
  a[0]!.release();
  a[0]!.release();
  expect(q.held("alice")).toBe(1);
  expect(q.take("alice", 2)).toBeDefined();
  expect(q.take("alice", 2)).toBeUndefined();
  for (let i = 0; i < 100; i++) expect(q.take("carol", 0)).toBeDefined();
});

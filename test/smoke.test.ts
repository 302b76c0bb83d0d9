import { test, expect } from "bun:test"; test("x", () => expect(1).toBe(1));

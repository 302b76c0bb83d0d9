import { describe, expect, test } from "bun:test";
import {
  encodeStatus,
  ERROR_CALL_NOT_IMPLEMENTED,
  ERROR_SERVICE_SPECIFIC_ERROR,
  initialScmState,
  scmStep,
  SERVICE_ACCEPT_SHUTDOWN,
  SERVICE_ACCEPT_STOP,
  SERVICE_CONTROL_INTERROGATE,
  SERVICE_CONTROL_SHUTDOWN,
  SERVICE_CONTROL_STOP,
  SERVICE_RUNNING,
  SERVICE_START_PENDING,
  SERVICE_STOP_PENDING,
  SERVICE_STOPPED,
  type ScmEvent,
  type ScmState,
  type StepResult,
} from "../../src/service/windows-scm-state.ts";

const hints = { startMs: 30_000, stopMs: 15_000 };

/** Runs events from the start; returns every step's result. */
function run(...events: ScmEvent[]): StepResult[] {
  let state: ScmState = initialScmState;
  return events.map((e) => {
    const r = scmStep(state, e, hints);
    state = r.state;
    return r;
  });
}

const main: ScmEvent = { type: "main" };
const ready: ScmEvent = { type: "ready" };
const tick: ScmEvent = { type: "tick" };
const stop: ScmEvent = { type: "control", code: SERVICE_CONTROL_STOP };

describe("scmStep", () => {
  test("a normal life: START_PENDING → RUNNING → STOP_PENDING → STOPPED", () => {
    const [m, r, s, done] = run(main, ready, stop, { type: "stopped", exitCode: 0 });
    expect(m!.report).toMatchObject({ currentState: SERVICE_START_PENDING, controlsAccepted: 0, checkPoint: 1, waitHint: 30_000 });
    expect(r!.report).toMatchObject({
      currentState: SERVICE_RUNNING,
      controlsAccepted: SERVICE_ACCEPT_STOP | SERVICE_ACCEPT_SHUTDOWN,
      checkPoint: 0,
      waitHint: 0,
    });
    expect(s!.report).toMatchObject({ currentState: SERVICE_STOP_PENDING, controlsAccepted: 0, checkPoint: 1, waitHint: 15_000 });
    expect(s!.requestStop).toBe(true);
    expect(done!.report).toMatchObject({ currentState: SERVICE_STOPPED, win32ExitCode: 0, serviceSpecificExitCode: 0 });
  });

  test("ticks raise the checkpoint only while pending", () => {
    const results = run(main, tick, tick, ready, tick, stop, tick);
    expect(results.map((r) => r.report?.checkPoint)).toEqual([1, 2, 3, 0, undefined, 1, 2]);
    expect(results[4]!.report).toBeUndefined();
  });

  test("SHUTDOWN stops like STOP; a second stop request is not passed on", () => {
    const results = run(main, ready, { type: "control", code: SERVICE_CONTROL_SHUTDOWN }, stop);
    expect(results[2]!.requestStop).toBe(true);
    expect(results[3]!.requestStop).toBe(false);
    expect(results[3]!.report).toBeUndefined();
  });

  test("a stop during startup is honoured, and a late 'ready' does not claim RUNNING", () => {
    const results = run(main, stop, ready);
    expect(results[1]!.requestStop).toBe(true);
    expect(results[2]!.report).toBeUndefined();
    expect(results[2]!.state.phase).toBe("stopping");
  });

  test("a non-zero exit is a service-specific error, so recovery restarts the service", () => {
    const [, , done] = run(main, ready, { type: "stopped", exitCode: 3 });
    expect(done!.report).toMatchObject({
      currentState: SERVICE_STOPPED,
      win32ExitCode: ERROR_SERVICE_SPECIFIC_ERROR,
      serviceSpecificExitCode: 3,
    });
  });

  test("the application stopping by itself reports STOP_PENDING without asking itself to stop", () => {
    const [, , s] = run(main, ready, { type: "stopping" });
    expect(s!.report?.currentState).toBe(SERVICE_STOP_PENDING);
    expect(s!.requestStop).toBe(false);
  });

  test("INTERROGATE repeats the last status; unknown controls are not implemented", () => {
    const results = run(main, ready, { type: "control", code: SERVICE_CONTROL_INTERROGATE }, { type: "control", code: 0x0b });
    expect(results[2]!.report).toEqual(results[1]!.report!);
    expect(results[3]!.handlerResult).toBe(ERROR_CALL_NOT_IMPLEMENTED);
  });

  test("nothing is reported before ServiceMain or after STOPPED", () => {
    expect(run(ready, stop, tick).every((r) => r.report === undefined)).toBe(true);
    const after = run(main, { type: "stopped", exitCode: 0 }, stop, { type: "stopped", exitCode: 1 });
    expect(after[2]!.report).toBeUndefined();
    expect(after[3]!.report).toBeUndefined();
  });

  test("encodeStatus lays out SERVICE_STATUS's seven DWORDs in order", () => {
    const [m] = run(main);
    expect([...encodeStatus(m!.report!)]).toEqual([0x10, SERVICE_START_PENDING, 0, 0, 0, 1, 30_000]);
  });
});

/**
 * The simulated ComfyUI prompt queue and worker thread (execution.PromptQueue + main.py's
 * prompt_worker): jobs run FIFO one at a time, report over the websocket, land in /history only
 * when finished, and keep their models on the GPU afterwards until `/free` — whose flags the
 * worker reads only after the current job, then unloads `freeDelayMs` later.
 */
import { randomUUID } from "node:crypto";
import { classOf, executionOrder, inputsOf, isOutputNode, isSampler } from "./comfy-nodes.ts";
import { ENHANCER_CLASS, runEnhancer } from "./comfy-enhancer.ts";
import type { FileStore } from "./comfy-files.ts";
import type { SocketHub } from "./comfy-ws.ts";
import type { Hold, SimGpu } from "./gpu.ts";
import { type PyDict, PyFloat, type PyLike, type PyValue, pyNumber } from "./pyjson.ts";
import { AbortedError, type Timers } from "./timers.ts";

export type JobState = "queued" | "running" | "done" | "error";

export interface JobInfo {
  id: string;
  state: JobState;
  startedAt?: number;
  endedAt?: number;
}

/** A queued or running job as the jobs API reads it (wall-clock milliseconds). */
export interface QueuedJob {
  id: string;
  number: number | PyFloat;
  running: boolean;
  createTime: number;
  startTime?: number;
}

export interface WorkerOptions {
  jobMs: number;
  /** Loading the checkpoint cold (after a /free that unloaded it), before the first node runs. */
  loadMs: number;
  modelBytes: number;
  freeDelayMs: number;
  /** History never shows finished jobs (a ComfyUI that restarted and forgot them). */
  forgetJobs: boolean;
  /** Bytes of each generated output image served by /view. */
  outputBytes: number;
  /** When > 0, a PREVIEW_IMAGE binary frame of this size follows each sampler step. */
  previewBytes: number;
  /** Makes a job fail with execution_error (also `extra_data.sim_fail: true` per prompt). */
  fail?: (promptId: string) => boolean;
  /** Where a prompt-enhancer node with an empty URL field calls Ollama (comfy-enhancer.ts). */
  ollamaUrl?: string;
  /**
   * The device's memory is the system's (cpu, mps): the cached checkpoint stays in RAM between
   * jobs, so the card is counted held only while a job runs.
   */
  sharedMemory?: boolean;
  /**
   * Working memory at the sampler's last step, above the checkpoint (issue 31): it grows with each
   * step and is given back at the job's end (default 0: none). `extra_data.sim_work_bytes` sets it
   * per prompt, so a test gives each workflow its curve, and a peak that grows from run to run.
   * A step that would not fit on the card ends the job with torch.OutOfMemoryError, and the card's
   * ledger records the moment it ran out.
   */
  workBytes?: number;
}

interface Job extends JobInfo {
  number: number | PyFloat;
  seq: number;
  prompt: PyDict;
  extraData: PyDict;
  outputs: string[];
  clientId: string | undefined;
  abort: AbortController;
  createTime: number;
  startWall?: number;
}

type Message = [string, Map<string, PyLike>];

/** Share of a job's time per node: samplers do the real work. */
const SAMPLER_WEIGHT = 8;

export class ComfyWorker {
  /** Finished jobs by prompt_id, oldest first (the /history dict). */
  readonly history = new Map<string, Map<string, PyLike>>();
  private readonly all: Job[] = [];
  private pending: Job[] = [];
  private current: Job | undefined;
  private currentNode: string | undefined;
  private flags = new Map<string, PyValue>();
  private modelsHold: Hold | undefined;
  /** The running job's working memory (WorkerOptions.workBytes), while it has any. */
  private workHold: Hold | undefined;
  /** The checkpoint is loaded (on the card, or in RAM on a shared-memory device): no cold load. */
  private cached = false;
  private wake: (() => void) | undefined;
  private seq = 0;
  /** How often the checkpoint was loaded cold. */
  checkpointLoads = 0;
  private imageCounter = 0;
  private readonly done: Promise<void>;

  constructor(
    private readonly gpu: SimGpu,
    private readonly timers: Timers,
    private readonly hub: SocketHub,
    private readonly files: FileStore,
    private readonly opts: WorkerOptions,
  ) {
    this.done = this.loop();
  }

  /** PromptQueue.put: queue a validated prompt; returns its id. */
  enqueue(number: number | PyFloat, promptId: string | undefined, prompt: PyDict, extraData: PyDict, outputs: string[]): string {
    const id = promptId ?? randomUUID();
    const client = extraData.get("client_id");
    const job: Job = {
      id,
      state: "queued",
      number,
      seq: this.seq++,
      prompt,
      extraData,
      outputs,
      clientId: typeof client === "string" ? client : undefined,
      abort: new AbortController(),
      createTime: Date.now(),
    };
    this.all.push(job);
    this.pending.push(job);
    this.gpu.note("job-queued", "comfy", id);
    this.queueUpdated();
    this.wake?.();
    return id;
  }

  queueRemaining(): number {
    return this.pending.length + (this.current ? 1 : 0);
  }

  /** [running items, pending items] as /queue shows them. */
  queueItems(): [PyLike[], PyLike[]] {
    const item = (j: Job): PyLike => [j.number, j.id, j.prompt, j.extraData, j.outputs];
    return [this.current ? [item(this.current)] : [], this.sorted().map(item)];
  }

  jobs(): JobInfo[] {
    return this.all.map(({ id, state, startedAt, endedAt }) => ({ id, state, startedAt, endedAt }));
  }

  /** The running job first, then the pending ones in run order. */
  queued(): QueuedJob[] {
    const view = (j: Job, running: boolean): QueuedJob => ({ id: j.id, number: j.number, running, createTime: j.createTime, startTime: j.startWall });
    return [...(this.current ? [view(this.current, true)] : []), ...this.sorted().map((j) => view(j, false))];
  }

  /** When the job was queued (wall-clock ms), for the jobs API. */
  createTime(id: string): number | undefined {
    return this.all.find((j) => j.id === id)?.createTime;
  }

  /** Whether the job is pending (removed: true) or running (interrupted: true); false for anything else. */
  cancel(id: string): boolean {
    if (this.current?.id === id) {
      this.current.abort.abort();
      return true;
    }
    if (!this.pending.some((j) => j.id === id)) return false;
    this.deletePending([id]);
    return true;
  }

  running(): JobInfo | undefined {
    const j = this.current;
    return j ? { id: j.id, state: j.state, startedAt: j.startedAt, endedAt: j.endedAt } : undefined;
  }

  /** The node the running job is executing, for a client that reconnects mid-job. */
  runningNodeFor(sid: string): string | undefined {
    return this.current?.clientId === sid ? this.currentNode : undefined;
  }

  /** POST /free: just sets flags; the worker acts when it is idle or after the current job. */
  requestFree(unloadModels: PyValue, freeMemory: PyValue): void {
    if (unloadModels) this.flags.set("unload_models", unloadModels);
    if (freeMemory) this.flags.set("free_memory", freeMemory);
    if (!unloadModels && !freeMemory) return;
    this.gpu.note("free-requested", "comfy", this.current ? `after ${this.current.id}` : "idle");
    this.wake?.();
  }

  /** POST /interrupt: the running job (or only the given one) stops at its next step. */
  interrupt(promptId?: string): void {
    const j = this.current;
    if (j && (promptId === undefined || j.id === promptId)) j.abort.abort();
  }

  deletePending(ids: string[]): void {
    const before = this.pending.length;
    this.pending = this.pending.filter((j) => !ids.includes(j.id));
    this.forgetUnrun();
    if (this.pending.length !== before) this.queueUpdated();
  }

  clearPending(): void {
    this.pending = [];
    this.forgetUnrun();
    this.queueUpdated();
  }

  /** Torch's reserved memory: the cached models; part of it is free once no job is running. */
  torchMemory(): { total: number; free: number } {
    if (!this.modelsHold) return { total: 0, free: 0 };
    const total = this.modelsHold.bytes + (this.workHold?.bytes ?? 0);
    // Activations go back to torch's cache when a job ends: reserved but unused.
    return { total, free: this.current ? 0 : Math.round(total * 0.21875) };
  }

  /** Stops the loop and gives back the GPU memory, as a killed ComfyUI process would. */
  async shutdown(): Promise<void> {
    this.wake?.();
    this.current?.abort.abort();
    await this.done;
    this.releaseCard();
  }

  /** The running job's working memory grows to `bytes`; false when the card has no room for it. */
  private growWork(id: string, bytes: number): boolean {
    this.workHold ??= this.gpu.acquire("comfy", `${id} working memory`, 0);
    const room = this.gpu.vramTotal - this.gpu.vramUsed() + this.workHold.bytes;
    this.gpu.resize(this.workHold, bytes);
    return bytes <= room;
  }

  private dropWork(): void {
    if (this.workHold) this.gpu.release(this.workHold);
    this.workHold = undefined;
  }

  private releaseCard(): void {
    this.dropWork();
    if (this.modelsHold) this.gpu.release(this.modelsHold);
    this.modelsHold = undefined;
  }

  // ------------------------------------------------------------ worker thread

  private async loop(): Promise<void> {
    while (!this.timers.stopped) {
      const job = this.takeNext();
      if (!job && this.flags.size === 0) {
        await new Promise<void>((resolve) => {
          const onStop = (): void => resolve();
          this.timers.signal.addEventListener("abort", onStop, { once: true });
          this.wake = () => {
            this.timers.signal.removeEventListener("abort", onStop);
            resolve();
          };
        });
        this.wake = undefined;
        continue;
      }
      try {
        if (job) await this.execute(job);
        await this.applyFlags();
      } catch (e) {
        // A bug in one job must not kill the worker (nobody awaits this loop until shutdown).
        if (!(e instanceof AbortedError)) console.error("comfy simulator worker:", e);
        if (job && this.current === job) this.current = undefined;
      }
    }
  }

  private sorted(): Job[] {
    return [...this.pending].sort((a, b) => pyNumber(a.number)! - pyNumber(b.number)! || a.seq - b.seq);
  }

  private takeNext(): Job | undefined {
    const next = this.sorted()[0];
    if (!next) return undefined;
    this.pending = this.pending.filter((j) => j !== next);
    this.current = next;
    this.queueUpdated();
    return next;
  }

  private forgetUnrun(): void {
    const keep = new Set(this.pending);
    for (let i = this.all.length - 1; i >= 0; i--) {
      const j = this.all[i] as Job;
      if (j.state === "queued" && !keep.has(j)) this.all.splice(i, 1);
    }
  }

  private queueUpdated(): void {
    this.hub.send("status", { status: { exec_info: { queue_remaining: this.queueRemaining() } } });
  }

  private async applyFlags(): Promise<void> {
    const freeMemory = this.flags.get("free_memory") ?? false;
    const unload = this.flags.has("unload_models") ? this.flags.get("unload_models") : freeMemory;
    this.flags.clear();
    if (!unload && !freeMemory) return;
    this.cached = false;
    const hold = this.modelsHold;
    if (!hold) return;
    // The /free reply went out long ago; the memory comes back only now.
    await this.timers.sleep(this.opts.freeDelayMs);
    this.gpu.release(hold);
    this.modelsHold = undefined;
    this.gpu.note("freed", "comfy", hold.detail);
  }

  private async execute(job: Job): Promise<void> {
    const { id, clientId } = job;
    job.state = "running";
    job.startedAt = this.gpu.now();
    job.startWall = Date.now();
    this.gpu.note("job-start", "comfy", id);
    // Loading the checkpoint is the first thing a job does; later jobs reuse the cached models.
    // Cold it takes loadMs (a real SDXL checkpoint is ~7 GB read from disk); the memory is held
    // from the start of the load.
    this.modelsHold ??= this.gpu.acquire("comfy", id, this.opts.modelBytes);
    if (!this.cached) {
      this.cached = true;
      this.checkpointLoads++;
      this.gpu.note("load-start", "comfy", id);
      await this.timers.sleep(this.opts.loadMs);
      this.gpu.note("loaded", "comfy", id);
    }

    const messages: Message[] = [];
    // execution.py add_message: recorded for /history, sent only to the prompt's client; the
    // `broadcast` ones (execution_interrupted) go to every socket (api-facts S3).
    const addMessage = (event: string, data: Record<string, PyLike>, broadcast = false): void => {
      const withTs = new Map<string, PyLike>([...Object.entries(data), ["timestamp", Math.floor(Date.now())]]);
      messages.push([event, withTs]);
      if (clientId !== undefined || broadcast) this.hub.send(event, withTs, broadcast ? undefined : clientId);
    };
    const toClient = (event: string, data: PyLike): void => {
      if (clientId !== undefined) this.hub.send(event, data, clientId);
    };

    addMessage("execution_start", { prompt_id: id });
    addMessage("execution_cached", { nodes: [], prompt_id: id });

    const order = executionOrder(job.prompt, job.outputs);
    const simMs = pyNumber(job.extraData.get("sim_job_ms"));
    const jobMs = simMs ?? this.opts.jobMs;
    const weights = order.map((n) => (isSampler(classOf(job.prompt, n)) ? SAMPLER_WEIGHT : 1));
    const totalWeight = weights.reduce((a, b) => a + b, 0) || 1;
    const workPeak = Math.max(0, pyNumber(job.extraData.get("sim_work_bytes")) ?? this.opts.workBytes ?? 0);
    let outOfMemory = false;
    const failAt = this.shouldFail(job) ? (order.find((n) => isSampler(classOf(job.prompt, n))) ?? order.at(-1)) : undefined;

    const progress = new Map<string, Map<string, PyLike>>();
    const progressState = (node: string, value: number | PyFloat, max: number | PyFloat, state: string): void => {
      progress.set(
        node,
        new Map<string, PyLike>([
          ["value", value],
          ["max", max],
          ["state", state],
          ["node_id", node],
          ["prompt_id", id],
          ["display_node_id", node],
          ["parent_node_id", null],
          ["real_node_id", node],
        ]),
      );
      this.hub.send("progress_state", { prompt_id: id, nodes: new Map(progress) }, clientId);
    };

    const outputs = new Map<string, PyLike>();
    const meta = new Map<string, PyLike>();
    const executed: string[] = [];
    let outcome: "success" | "error" | "interrupted" = "success";

    for (const [i, node] of order.entries()) {
      const classType = classOf(job.prompt, node);
      const nodeMs = (jobMs * (weights[i] as number)) / totalWeight;
      this.currentNode = node;
      progressState(node, new PyFloat(0), new PyFloat(1), "running");
      toClient("executing", { node, display_node: node, prompt_id: id });
      let finalValue: number | PyFloat = new PyFloat(1);
      let finalMax: number | PyFloat = new PyFloat(1);
      let nodeError: string | undefined;
      try {
        if (classType === ENHANCER_CLASS) {
          nodeError = await this.enhance(inputsOf(job.prompt, node), job.abort.signal);
        } else if (isSampler(classType)) {
          const steps = Math.min(Math.max(1, Math.trunc(pyNumber(inputsOf(job.prompt, node).get("steps")) ?? 20)), 1000);
          finalValue = steps;
          finalMax = steps;
          for (let s = 1; s <= steps; s++) {
            await this.timers.sleep(nodeMs / steps, job.abort.signal);
            if (workPeak > 0 && !this.growWork(id, Math.round((workPeak * s) / steps))) {
              outOfMemory = true;
              break;
            }
            this.hub.send("progress", { value: s, max: steps, prompt_id: id, node }, clientId);
            progressState(node, s, steps, "running");
            if (this.opts.previewBytes > 0) this.hub.sendBinary(previewFrame(this.opts.previewBytes, s), clientId);
          }
        } else {
          await this.timers.sleep(nodeMs, job.abort.signal);
        }
      } catch (e) {
        if (this.timers.stopped) throw e;
        outcome = "interrupted";
        addMessage("execution_interrupted", { prompt_id: id, node_id: node, node_type: classType, executed: [...executed] }, true);
        break;
      }
      if (node === failAt || outOfMemory || nodeError !== undefined) {
        outcome = "error";
        addMessage("execution_error", {
          prompt_id: id,
          node_id: node,
          node_type: classType,
          executed: [...executed],
          exception_message:
            nodeError ??
            "Allocation on device \nThis error means you ran out of memory on your GPU.\n\nTIPS: If the workflow worked before you might have accidentally set the batch_size to a large number.",
          exception_type: nodeError === undefined ? "torch.OutOfMemoryError" : "ollama._types.ResponseError",
          traceback: ['  File "/opt/ComfyUI/execution.py", line 496, in execute\n    output_data, output_ui, has_subgraph, has_pending_tasks = await get_output_data(...)\n'],
          current_inputs: currentInputs(inputsOf(job.prompt, node)),
          current_outputs: [],
        });
        break;
      }
      if (isOutputNode(classType)) {
        const output = { images: [this.newImage(job, node, classType)] };
        outputs.set(node, output);
        meta.set(node, { node_id: node, display_node: node, parent_node: null, real_node_id: node });
        toClient("executed", { node, display_node: node, output, prompt_id: id });
      }
      progressState(node, finalValue, finalMax, "finished");
      executed.push(node);
    }
    this.currentNode = undefined;
    this.dropWork();
    if (outcome === "success") addMessage("execution_success", { prompt_id: id });

    // task_done: the history entry appears only now, then the queue status, then executing:null.
    job.state = outcome === "success" ? "done" : "error";
    job.endedAt = this.gpu.now();
    if (!this.opts.forgetJobs) {
      this.history.set(
        id,
        new Map<string, PyLike>([
          ["prompt", [job.number, id, job.prompt, job.extraData, job.outputs]],
          ["outputs", outputs],
          ["status", { status_str: outcome === "success" ? "success" : "error", completed: outcome === "success", messages }],
          ["meta", meta],
        ]),
      );
    }
    if (this.opts.sharedMemory) this.releaseCard();
    this.current = undefined;
    this.queueUpdated();
    toClient("executing", { node: null, prompt_id: id });
    this.gpu.note("job-end", "comfy", id);
  }

  /**
   * A prompt-enhancer node's call to Ollama; its failure as ComfyUI reports it (undefined on
   * success). An interrupt aborts the call and surfaces as the interrupt it is.
   */
  private async enhance(inputs: PyDict, signal: AbortSignal): Promise<string | undefined> {
    const text = (k: string) => {
      const v = inputs.get(k);
      return typeof v === "string" ? v : "";
    };
    const keepAlive = pyNumber(inputs.get("keep_alive"));
    try {
      await runEnhancer({ prompt: text("prompt"), model: text("model"), url: text("url"), keepAliveMin: keepAlive }, this.opts.ollamaUrl, signal);
      return undefined;
    } catch (err) {
      if (signal.aborted) throw err;
      return err instanceof Error ? err.message : String(err);
    }
  }

  private shouldFail(job: Job): boolean {
    const marker = job.extraData.get("sim_fail");
    return (marker !== undefined && marker !== null && marker !== false) || (this.opts.fail?.(job.id) ?? false);
  }

  private newImage(job: Job, node: string, classType: string): Record<string, PyLike> {
    this.imageCounter++;
    const n = String(this.imageCounter).padStart(5, "0");
    if (classType === "PreviewImage") {
      const filename = `ComfyUI_temp_${job.id.slice(0, 5)}_${n}_.png`;
      this.files.addOutput("temp", filename);
      return { filename, subfolder: "", type: "temp" };
    }
    const prefix = inputsOf(job.prompt, node).get("filename_prefix");
    const filename = `${typeof prefix === "string" && prefix !== "" ? prefix : "ComfyUI"}_${n}_.png`;
    this.files.addOutput("output", filename);
    return { filename, subfolder: "", type: "output" };
  }
}

/** execution_error's current_inputs: each literal input wrapped in a list. */
function currentInputs(inputs: PyDict): Map<string, PyLike> {
  const out = new Map<string, PyLike>();
  for (const [k, v] of inputs) out.set(k, [Array.isArray(v) ? `<link to node ${String(v[0])}>` : v]);
  return out;
}

/** Binary PREVIEW_IMAGE frame: u32 event type 1, u32 image type 2 (PNG), then the image. */
function previewFrame(size: number, step: number): Uint8Array {
  const buf = new Uint8Array(8 + size);
  const view = new DataView(buf.buffer);
  view.setUint32(0, 1);
  view.setUint32(4, 2);
  buf.fill(step & 0xff, 8);
  return buf;
}

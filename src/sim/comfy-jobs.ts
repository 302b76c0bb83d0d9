/**
 * The simulated ComfyUI's jobs API (api-facts C8, S3; newer versions only): one view over the
 * queue and the history, where history `success` is `completed` and `error` is `failed`, or
 * `cancelled` when its last message is `execution_interrupted`. The routes are declared under a
 * literal `/api/jobs`, so there is no `/jobs` alias. A cancelled pending job leaves the queue
 * like a `/queue` delete and is then unknown (an assumption: what ComfyUI keeps of it is unseen).
 */
import type { ComfyWorker } from "./comfy-worker.ts";
import { isDict, type PyDict, type PyLike, type PyValue, pyNumber, parsePy } from "./pyjson.ts";

export type JobStatus = "pending" | "in_progress" | "completed" | "failed" | "cancelled";
const STATUSES: readonly JobStatus[] = ["pending", "in_progress", "completed", "failed", "cancelled"];

interface JobView {
  status: JobStatus;
  fields: Map<string, PyLike>;
  createTime: number;
  duration: number;
}

function fromHistory(id: string, entry: Map<string, PyLike>, queuedAt: number | undefined): JobView {
  // The worker stores status and outputs as plain objects inside the history Map.
  const status = entry.get("status") as { status_str: string; messages: [string, PyDict][] };
  const messages = status.messages;
  const last = messages.at(-1)?.[0];
  const result: JobStatus = status.status_str === "success" ? "completed" : last === "execution_interrupted" ? "cancelled" : "failed";
  const item = entry.get("prompt") as PyValue[];
  const stamp = (m: [string, PyDict] | undefined): number | undefined => pyNumber(m?.[1].get("timestamp") as PyValue) ?? undefined;
  const start = stamp(messages.find(([e]) => e === "execution_start"));
  const end = stamp(messages.at(-1));
  const createTime = queuedAt ?? start ?? 0;
  const outputs = entry.get("outputs") as Map<string, { images?: Record<string, string>[] }>;
  const images = [...outputs].flatMap(([node, o]) => (o.images ?? []).map((img) => [node, img] as const));
  const fields = new Map<string, PyLike>([
    ["id", id],
    ["status", result],
    ["priority", item[0] as PyLike],
    ["create_time", createTime],
    ["execution_start_time", start ?? null],
    ["execution_end_time", end ?? null],
    ["outputs_count", images.length],
    ["previewable_outputs_count", images.length],
  ]);
  const first = images[0];
  if (first) {
    const [node, img] = first;
    fields.set("preview_output", { filename: img.filename ?? "", subfolder: img.subfolder ?? "", type: img.type ?? "output", nodeId: node, mediaType: "images" });
  }
  return { status: result, fields, createTime, duration: start !== undefined && end !== undefined ? end - start : 0 };
}

function allJobs(worker: ComfyWorker): JobView[] {
  const queued = worker.queued().map((q): JobView => {
    const fields = new Map<string, PyLike>([
      ["id", q.id],
      ["status", q.running ? "in_progress" : "pending"],
      ["priority", q.number],
      ["create_time", q.createTime],
    ]);
    if (q.startTime !== undefined) fields.set("execution_start_time", q.startTime);
    fields.set("outputs_count", 0);
    fields.set("previewable_outputs_count", 0);
    return { status: q.running ? "in_progress" : "pending", fields, createTime: q.createTime, duration: 0 };
  });
  return [...queued, ...[...worker.history].map(([id, entry]) => fromHistory(id, entry, worker.createTime(id)))];
}

function nonNegativeInt(raw: string | null): number | undefined | "bad" {
  if (raw === null) return undefined;
  const n = Number(raw);
  return Number.isInteger(n) && n >= 0 ? n : "bad";
}

type Reply = { status: number; body: PyLike };
const error = (status: number, message: string): Reply => ({ status, body: { error: message } });

/** `GET /api/jobs?status=&sort_by=&sort_order=&limit=&offset=`. */
export function listJobs(worker: ComfyWorker, query: URLSearchParams): Reply {
  const wanted = query.get("status")?.split(",").map((s) => s.trim()).filter((s) => s !== "");
  if (wanted?.some((s) => !STATUSES.includes(s as JobStatus))) return error(400, `Invalid status value. Must be one of: ${STATUSES.join(", ")}`);
  const sortBy = query.get("sort_by") ?? "created_at";
  if (sortBy !== "created_at" && sortBy !== "execution_duration") return error(400, "sort_by must be 'created_at' or 'execution_duration'");
  const order = query.get("sort_order") ?? "desc";
  if (order !== "asc" && order !== "desc") return error(400, "sort_order must be 'asc' or 'desc'");
  const limit = nonNegativeInt(query.get("limit"));
  const offset = nonNegativeInt(query.get("offset")) ?? 0;
  if (limit === "bad" || offset === "bad") return error(400, "limit and offset must be non-negative integers");
  const key = (j: JobView): number => (sortBy === "created_at" ? j.createTime : j.duration);
  const jobs = allJobs(worker)
    .filter((j) => wanted === undefined || wanted.includes(j.status))
    .sort((a, b) => (order === "asc" ? key(a) - key(b) : key(b) - key(a)));
  const page = jobs.slice(offset, limit === undefined ? undefined : offset + limit);
  return {
    status: 200,
    body: { jobs: page.map((j) => j.fields), pagination: { offset, limit: limit ?? null, total: jobs.length, has_more: offset + page.length < jobs.length } },
  };
}

/** `GET /api/jobs/{id}`. */
export function getJob(worker: ComfyWorker, id: string): Reply {
  const job = allJobs(worker).find((j) => j.fields.get("id") === id);
  return job ? { status: 200, body: job.fields } : error(404, "Job not found");
}

/** `POST /api/jobs/{id}/cancel`. */
export function cancelJob(worker: ComfyWorker, id: string): Reply {
  return { status: 200, body: { cancelled: worker.cancel(id) } };
}

/** `POST /api/jobs/cancel {"job_ids":[...]}`: cancelled is true when any of them was. */
export function cancelJobs(worker: ComfyWorker, body: Uint8Array): Reply {
  let data: PyValue;
  try {
    data = parsePy(new TextDecoder().decode(body));
  } catch {
    return error(400, "Invalid JSON body");
  }
  const ids = isDict(data) ? data.get("job_ids") : undefined;
  if (!Array.isArray(ids) || ids.some((x) => typeof x !== "string")) return error(400, "job_ids must be a list of strings");
  let any = false;
  for (const id of ids as string[]) any = worker.cancel(id) || any;
  return { status: 200, body: { cancelled: any } };
}

/** What every scenario gets: the subjects under test, each with a base URL per upstream. */

/** "nginx-1w": nginx with `worker_processes 1`, the like-for-like reference for one JavaScript thread. */
export type SubjectName = "direct" | "turnstile" | "nginx" | "nginx-1w" | "bun-bare";

export interface Target {
  subject: SubjectName;
  /** Base URL, no trailing slash. */
  url: string;
  /** CPU ms used so far by the subject's processes (absent for the direct connection). */
  cpuMs?: () => number;
}

export const CHAT_BODY = (content: string, numPredict?: number): string =>
  JSON.stringify({
    model: "llama3.2",
    messages: [{ role: "user", content }],
    stream: true,
    ...(numPredict === undefined ? {} : { options: { num_predict: numPredict } }),
  });

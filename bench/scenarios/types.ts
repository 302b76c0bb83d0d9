/** What every scenario gets: the subjects under test, each with a base URL per upstream. */

export type SubjectName = "direct" | "turnstile" | "nginx" | "bun-bare";

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

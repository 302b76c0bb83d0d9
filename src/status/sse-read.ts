/**
 * The reading side of /turnstile/events: Server-Sent Events off a response body, one
 * `{ event, data }` per block, `data` parsed as JSON. Blocks without an event name or data
 * (comments, keep-alives) are skipped. Shared by `gpu-turnstile status --watch` and the tests.
 */
export interface SseEvent {
  event: string;
  data: unknown;
}

export async function* readSse(body: ReadableStream): AsyncGenerator<SseEvent> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buf += value;
    for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (event && data) yield { event, data: JSON.parse(data) };
    }
  }
}

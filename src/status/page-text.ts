/**
 * The status page's HTML, in a module of its own so it loads at the page's first request: a
 * 13 KB string every start-up would otherwise evaluate before the first answer (docs/BENCHMARKS.md).
 */
// Imported as text so `bun build --compile` embeds the page in the binary.
import pageImport from "./page.html" with { type: "text" };

// Bun's typings describe an HTML import as a bundle; with `type: "text"` it is the file's text.
export const page = pageImport as unknown as string;

/** Injected by build.ts with `--define`; absent when the program runs from source. */
declare const __GPU_TURNSTILE_VERSION__: string;

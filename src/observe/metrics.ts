/**
 * A tiny Prometheus metrics registry and text exposition (format 0.0.4), written by us so the
 * binary carries no client library. Only what the turnstile needs: counters, gauges (set or
 * collected at scrape time) and histograms, each with fixed label names.
 *
 * Rendering is deterministic: families sorted by name, series sorted by label values, so two
 * scrapes of the same state are byte-identical (tests and diffs rely on it).
 */

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** Label name → label value. A metric's generic parameter fixes the names (and may narrow values). */
export type LabelValues = Record<string, string>;

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

export interface MetricOptions<L extends LabelValues> {
  name: string;
  help: string;
  labelNames?: readonly (keyof L & string)[];
  /**
   * Label sets that exist (at zero) from the start. Without this a labelled metric shows only
   * HELP/TYPE until its first observation, and dashboards cannot tell "0" from "never scraped".
   */
  initLabels?: readonly L[];
}

export interface Metric {
  readonly name: string;
  readonly help: string;
  readonly type: "counter" | "gauge" | "histogram";
  /** Sample lines without the HELP/TYPE header, each ending in "\n". */
  renderSamples(): string;
}

/** Go's strconv.FormatFloat forms that the exposition format accepts. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}

export function escapeLabelValue(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** HELP text escapes only backslash and newline (a quote is literal there). */
export function escapeHelp(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

function renderLabels(names: readonly string[], values: readonly string[], extra?: [string, string]): string {
  const parts: string[] = [];
  for (let i = 0; i < names.length; i++) parts.push(`${names[i]}="${escapeLabelValue(values[i] ?? "")}"`);
  if (extra) parts.push(`${extra[0]}="${escapeLabelValue(extra[1])}"`);
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

function compareValues(a: readonly string[], b: readonly string[]): number {
  for (let i = 0; i < a.length; i++) {
    const x = a[i] ?? "";
    const y = b[i] ?? "";
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
}

/**
 * Series storage shared by all metric types: label values in label-name order, keyed by a
 * string that cannot collide (JSON of the value array).
 */
abstract class Base<L extends LabelValues, S> implements Metric {
  readonly name: string;
  readonly help: string;
  abstract readonly type: "counter" | "gauge" | "histogram";
  protected readonly labelNames: readonly string[];
  private readonly series = new Map<string, { values: string[]; state: S }>();

  constructor(opts: MetricOptions<L>, reserved: readonly string[] = []) {
    if (!METRIC_NAME.test(opts.name)) throw new Error(`invalid metric name ${JSON.stringify(opts.name)}`);
    const names = [...(opts.labelNames ?? [])];
    for (const n of names) {
      if (!LABEL_NAME.test(n) || n.startsWith("__")) throw new Error(`${opts.name}: invalid label name ${JSON.stringify(n)}`);
      if (reserved.includes(n)) throw new Error(`${opts.name}: label name "${n}" is reserved`);
    }
    if (new Set(names).size !== names.length) throw new Error(`${opts.name}: duplicate label names`);
    this.name = opts.name;
    this.help = opts.help;
    this.labelNames = names;
  }

  protected abstract fresh(): S;

  /** Pre-declares a label set so it renders (at zero) before its first observation. */
  init(labels: L): this {
    this.slot(labels);
    return this;
  }

  /** Subclasses call this last in their constructor, once fresh() can build a series. */
  protected ready(sets: readonly L[] | undefined): void {
    // Unlabelled metrics always have their one series, like the Go and JS clients.
    if (this.labelNames.length === 0) this.slot({} as L);
    for (const l of sets ?? []) this.slot(l);
  }

  protected slot(labels: L): S {
    const values = this.valuesOf(labels);
    const key = JSON.stringify(values);
    let entry = this.series.get(key);
    if (!entry) {
      entry = { values, state: this.fresh() };
      this.series.set(key, entry);
    }
    return entry.state;
  }

  protected peek(labels: L): S | undefined {
    return this.series.get(JSON.stringify(this.valuesOf(labels)))?.state;
  }

  private valuesOf(labels: L): string[] {
    const given = Object.keys(labels);
    if (given.length !== this.labelNames.length || given.some((k) => !this.labelNames.includes(k))) {
      throw new Error(`${this.name}: labels {${given.join(",")}} do not match {${this.labelNames.join(",")}}`);
    }
    return this.labelNames.map((n) => {
      const v = labels[n];
      if (typeof v !== "string") throw new Error(`${this.name}: label ${n} must be a string`);
      return v;
    });
  }

  protected sortedSeries(): { values: string[]; state: S }[] {
    return [...this.series.values()].sort((a, b) => compareValues(a.values, b.values));
  }

  /** Drops every series (unlabelled metrics keep theirs, reset). */
  reset(): void {
    this.series.clear();
    if (this.labelNames.length === 0) this.slot({} as L);
  }

  abstract renderSamples(): string;
}

export class Counter<L extends LabelValues = {}> extends Base<L, { v: number }> {
  readonly type = "counter" as const;

  constructor(opts: MetricOptions<L>) {
    super(opts);
    this.ready(opts.initLabels);
  }

  protected fresh(): { v: number } {
    return { v: 0 };
  }

  inc(labels: L, n = 1): void {
    if (!(n >= 0)) throw new Error(`${this.name}: a counter cannot be increased by ${n}`);
    this.slot(labels).v += n;
  }

  /** Current value, 0 for a label set never seen. */
  get(labels: L): number {
    return this.peek(labels)?.v ?? 0;
  }

  renderSamples(): string {
    let out = "";
    for (const s of this.sortedSeries()) out += `${this.name}${renderLabels(this.labelNames, s.values)} ${formatValue(s.state.v)}\n`;
    return out;
  }
}

export interface GaugeOptions<L extends LabelValues> extends MetricOptions<L> {
  /** Called at every render, before the samples are written: set the current values here. */
  collect?: (gauge: Gauge<L>) => void;
}

export class Gauge<L extends LabelValues = {}> extends Base<L, { v: number }> {
  readonly type = "gauge" as const;
  private readonly collect: ((gauge: Gauge<L>) => void) | undefined;

  constructor(opts: GaugeOptions<L>) {
    super(opts);
    this.collect = opts.collect;
    this.ready(opts.initLabels);
  }

  protected fresh(): { v: number } {
    return { v: 0 };
  }

  set(labels: L, v: number): void {
    this.slot(labels).v = v;
  }

  inc(labels: L, n = 1): void {
    this.slot(labels).v += n;
  }

  dec(labels: L, n = 1): void {
    this.slot(labels).v -= n;
  }

  get(labels: L): number {
    return this.peek(labels)?.v ?? 0;
  }

  renderSamples(): string {
    this.collect?.(this);
    let out = "";
    for (const s of this.sortedSeries()) out += `${this.name}${renderLabels(this.labelNames, s.values)} ${formatValue(s.state.v)}\n`;
    return out;
  }
}

export interface HistogramOptions<L extends LabelValues> extends MetricOptions<L> {
  /** Upper bounds in ascending order; +Inf is implicit. */
  buckets: readonly number[];
}

interface HistogramState {
  /** Per-bucket (non-cumulative) counts; the last slot is the +Inf bucket. */
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram<L extends LabelValues = {}> extends Base<L, HistogramState> {
  readonly type = "histogram" as const;
  readonly buckets: readonly number[];

  constructor(opts: HistogramOptions<L>) {
    const b = opts.buckets;
    if (b.length === 0) throw new Error(`${opts.name}: a histogram needs at least one bucket`);
    for (let i = 0; i < b.length; i++) {
      const x = b[i] as number;
      if (!Number.isFinite(x)) throw new Error(`${opts.name}: bucket bounds must be finite (+Inf is implicit)`);
      if (i > 0 && !(x > (b[i - 1] as number))) throw new Error(`${opts.name}: buckets must be strictly ascending`);
    }
    super(opts, ["le"]);
    this.buckets = [...b];
    this.ready(opts.initLabels);
  }

  protected fresh(): HistogramState {
    return { counts: new Array<number>(this.buckets.length + 1).fill(0), sum: 0, count: 0 };
  }

  observe(labels: L, value: number): void {
    if (Number.isNaN(value)) return; // a NaN would poison _sum forever; drop it
    const s = this.slot(labels);
    let i = this.buckets.findIndex((le) => value <= le);
    if (i === -1) i = this.buckets.length;
    s.counts[i] = (s.counts[i] ?? 0) + 1;
    s.sum += value;
    s.count += 1;
  }

  /** Observation count and sum for a label set (zeros when never observed). */
  get(labels: L): { count: number; sum: number } {
    const s = this.peek(labels);
    return { count: s?.count ?? 0, sum: s?.sum ?? 0 };
  }

  renderSamples(): string {
    let out = "";
    for (const s of this.sortedSeries()) {
      let cumulative = 0;
      for (let i = 0; i <= this.buckets.length; i++) {
        cumulative += s.state.counts[i] ?? 0;
        const le = i < this.buckets.length ? formatValue(this.buckets[i] as number) : "+Inf";
        out += `${this.name}_bucket${renderLabels(this.labelNames, s.values, ["le", le])} ${cumulative}\n`;
      }
      const labels = renderLabels(this.labelNames, s.values);
      out += `${this.name}_sum${labels} ${formatValue(s.state.sum)}\n`;
      out += `${this.name}_count${labels} ${s.state.count}\n`;
    }
    return out;
  }
}

/** Sample lines (`name{a="1"} v` or `name v`) with `labels` (rendered `k="v"` pairs) put first in each set. */
function withConstantLabels(samples: string, labels: string): string {
  let out = "";
  let from = 0;
  while (from < samples.length) {
    let eol = samples.indexOf("\n", from);
    if (eol < 0) eol = samples.length;
    const line = samples.slice(from, eol);
    const brace = line.indexOf("{");
    const space = line.indexOf(" ");
    out += brace >= 0 && brace < space
      ? `${line.slice(0, brace + 1)}${labels},${line.slice(brace + 1)}\n`
      : `${line.slice(0, space)}{${labels}}${line.slice(space)}\n`;
    from = eol + 1;
  }
  return out;
}

export class Registry {
  private readonly metrics = new Map<string, Metric>();
  /** Labels on every series (`card`), rendered once: nothing is added per observation. */
  private readonly constant: string;

  constructor(constantLabels?: LabelValues) {
    this.constant = Object.entries(constantLabels ?? {})
      .map(([k, v]) => `${k}="${escapeLabelValue(v)}"`)
      .join(",");
  }

  register<M extends Metric>(metric: M): M {
    if (this.metrics.has(metric.name)) throw new Error(`metric ${metric.name} registered twice`);
    this.metrics.set(metric.name, metric);
    return metric;
  }

  counter<L extends LabelValues = {}>(opts: MetricOptions<L>): Counter<L> {
    return this.register(new Counter<L>(opts));
  }

  gauge<L extends LabelValues = {}>(opts: GaugeOptions<L>): Gauge<L> {
    return this.register(new Gauge<L>(opts));
  }

  histogram<L extends LabelValues = {}>(opts: HistogramOptions<L>): Histogram<L> {
    return this.register(new Histogram<L>(opts));
  }

  get(name: string): Metric | undefined {
    return this.metrics.get(name);
  }

  /** The whole exposition, in text format 0.0.4. */
  render(): string {
    let out = "";
    const names = [...this.metrics.keys()].sort();
    for (const name of names) {
      const m = this.metrics.get(name) as Metric;
      out += `# HELP ${name} ${escapeHelp(m.help)}\n# TYPE ${name} ${m.type}\n`;
      out += this.constant === "" ? m.renderSamples() : withConstantLabels(m.renderSamples(), this.constant);
    }
    return out;
  }
}

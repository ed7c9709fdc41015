// The numbers a benchmark reports: mean and percentiles of a sample, and how
// close a completion is to the code that was really there.

export interface Distribution {
  n: number;
  mean: number;
  p50: number;
  p90: number;
}

/** Nearest-rank percentile (`p` in 0..1) of `xs`; NaN for an empty sample. */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}

export function mean(xs: readonly number[]): number {
  return xs.length === 0 ? NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

export function distribution(xs: readonly number[]): Distribution {
  const finite = xs.filter(Number.isFinite);
  return { n: finite.length, mean: mean(finite), p50: percentile(finite, 0.5), p90: percentile(finite, 0.9) };
}

/** Levenshtein distance of two strings, in UTF-16 code units; one row of memory. */
export function editDistance(a: string, b: string): number {
  if (a === b) return 0;
  if (a.length < b.length) [a, b] = [b, a];
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return row[b.length];
}

/** 1 − distance / longer length: 1 for equal strings (two empty ones included), 0 for nothing in common. */
export function editSimilarity(a: string, b: string): number {
  const longer = Math.max(a.length, b.length);
  return longer === 0 ? 1 : 1 - editDistance(a, b) / longer;
}

/** Exact match as completion benchmarks count it: equal once trailing whitespace is ignored. */
export function exactMatch(completion: string, middle: string): boolean {
  return completion.trimEnd() === middle.trimEnd();
}

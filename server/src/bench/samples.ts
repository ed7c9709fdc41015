// Code the benchmark cuts tasks from when the workspace has none of its own
// (an empty window): small files written for Runahead in four languages, on
// no package of RESERVED.md.
import type { SourceFile } from './tasks';

const typescript = `import { readFile } from 'node:fs/promises';

export interface Interval {
  start: number;
  end: number;
}

/** Merges overlapping intervals; the input need not be sorted. */
export function mergeIntervals(intervals: Interval[]): Interval[] {
  const sorted = [...intervals].sort((a, b) => a.start - b.start);
  const out: Interval[] = [];
  for (const next of sorted) {
    const last = out[out.length - 1];
    if (last && next.start <= last.end) {
      last.end = Math.max(last.end, next.end);
    } else {
      out.push({ ...next });
    }
  }
  return out;
}

export class LruCache<K, V> {
  private readonly entries = new Map<K, V>();

  constructor(private readonly capacity: number) {}

  get(key: K): V | undefined {
    const value = this.entries.get(key);
    if (value === undefined) return undefined;
    this.entries.delete(key);
    this.entries.set(key, value);
    return value;
  }

  set(key: K, value: V): void {
    this.entries.delete(key);
    this.entries.set(key, value);
    while (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next().value as K;
      this.entries.delete(oldest);
    }
  }
}

export async function countWords(path: string): Promise<Map<string, number>> {
  const text = await readFile(path, 'utf8');
  const counts = new Map<string, number>();
  for (const word of text.toLowerCase().split(/\\W+/)) {
    if (word.length === 0) continue;
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  return counts;
}
`;

const python = `import heapq
from dataclasses import dataclass, field


@dataclass(order=True)
class Job:
    priority: int
    name: str = field(compare=False)
    attempts: int = field(default=0, compare=False)


class JobQueue:
    def __init__(self, max_attempts=3):
        self.heap = []
        self.max_attempts = max_attempts
        self.failed = []

    def push(self, job):
        heapq.heappush(self.heap, job)

    def pop(self):
        if not self.heap:
            return None
        return heapq.heappop(self.heap)

    def retry(self, job):
        job.attempts += 1
        if job.attempts >= self.max_attempts:
            self.failed.append(job)
        else:
            self.push(job)

    def __len__(self):
        return len(self.heap)


def shortest_paths(graph, source):
    dist = {source: 0}
    queue = [(0, source)]
    while queue:
        d, node = heapq.heappop(queue)
        if d > dist.get(node, float("inf")):
            continue
        for neighbour, weight in graph.get(node, []):
            candidate = d + weight
            if candidate < dist.get(neighbour, float("inf")):
                dist[neighbour] = candidate
                heapq.heappush(queue, (candidate, neighbour))
    return dist
`;

const go = `package stats

import (
	"errors"
	"math"
	"sort"
)

var ErrEmpty = errors.New("stats: empty sample")

type Sample struct {
	values []float64
	sorted bool
}

func (s *Sample) Add(v float64) {
	s.values = append(s.values, v)
	s.sorted = false
}

func (s *Sample) Mean() (float64, error) {
	if len(s.values) == 0 {
		return 0, ErrEmpty
	}
	sum := 0.0
	for _, v := range s.values {
		sum += v
	}
	return sum / float64(len(s.values)), nil
}

func (s *Sample) Percentile(p float64) (float64, error) {
	if len(s.values) == 0 {
		return 0, ErrEmpty
	}
	if !s.sorted {
		sort.Float64s(s.values)
		s.sorted = true
	}
	rank := int(math.Ceil(p*float64(len(s.values)))) - 1
	if rank < 0 {
		rank = 0
	}
	return s.values[rank], nil
}
`;

const rust = `use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    Number(f64),
    Ident(String),
    Op(char),
    LParen,
    RParen,
}

pub fn tokenize(input: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            tokens.push(Token::Number(text.parse().map_err(|_| format!("bad number {}", text))?));
        } else if c.is_alphabetic() {
            let start = i;
            while i < chars.len() && chars[i].is_alphanumeric() {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if "+-*/".contains(c) {
            tokens.push(Token::Op(c));
            i += 1;
        } else if c == '(' {
            tokens.push(Token::LParen);
            i += 1;
        } else if c == ')' {
            tokens.push(Token::RParen);
            i += 1;
        } else {
            return Err(format!("unexpected {} at {}", c, i));
        }
    }
    Ok(tokens)
}

pub fn evaluate(tokens: &[Token], vars: &HashMap<String, f64>) -> Option<f64> {
    let mut total = 0.0;
    let mut sign = 1.0;
    for token in tokens {
        match token {
            Token::Number(n) => total += sign * n,
            Token::Ident(name) => total += sign * vars.get(name)?,
            Token::Op('-') => sign = -1.0,
            Token::Op(_) => sign = 1.0,
            _ => {}
        }
    }
    Some(total)
}
`;

export const bundledSamples: readonly SourceFile[] = [
  { path: 'samples/intervals.ts', languageId: 'typescript', text: typescript },
  { path: 'samples/jobs.py', languageId: 'python', text: python },
  { path: 'samples/stats.go', languageId: 'go', text: go },
  { path: 'samples/tokens.rs', languageId: 'rust', text: rust },
];

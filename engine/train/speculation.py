"""Exact simulation of greedy speculative decoding, and the completion metrics.

Greedy speculation emits exactly the target's greedy sequence; a step accepts
the longest prefix of the k drafted tokens that equals it, plus one token from
the target. A drafter whose proposals depend only on the context (lookup, a
draft model, the MTP head fed verified states) can therefore be scored from
teacher-forced predictions along that sequence, without running a decode loop:

    draft model: its token at j is right when its argmax after s[:j] is s[j];
                 a run of right tokens from j is what it drafts from context s[:j].
    MTP head:    from context s[:n] it chains from the target state at n-2 and
                 token s[n-1]; depth d proposes s[n-1+d].
    lookup:      computed from the context directly.

Pure Python: lists of ints in, numbers out.
"""
import bisect



class Lookup:
    """Prompt lookup over one sequence: from context seq[:n], find the latest earlier occurrence
    of the context's last g tokens (g = 4, 3, 2, longest first) and propose the up-to-k tokens
    that followed it inside the context. Indexed once per sequence, so each query is a bisect."""

    def __init__(self, seq, ngrams=(4, 3, 2)):
        self.seq, self.ngrams = seq, ngrams
        self.starts = {g: {} for g in ngrams}
        for g in ngrams:
            for s in range(len(seq) - g + 1):
                self.starts[g].setdefault(tuple(seq[s:s + g]), []).append(s)

    def propose(self, n, k):
        for g in self.ngrams:
            if n <= g:
                continue
            starts = self.starts[g].get(tuple(self.seq[n - g:n]), [])
            i = bisect.bisect_right(starts, n - g - 1) - 1
            if i >= 0:
                return self.seq[starts[i] + g:min(starts[i] + g + k, n)]
        return []

    def proposer(self, k):
        return lambda n: self.propose(n, k)


def matched(proposal, truth):
    count = 0
    for a, b in zip(proposal, truth):
        if a != b:
            break
        count += 1
    return count


def simulate(prompt_len, seq, k, propose):
    """Steps of greedy speculative decoding over seq[prompt_len:] (the target's greedy output).
    propose(n) returns the drafted tokens from context seq[:n]. Returns (tokens, steps)."""
    n, end, steps = prompt_len, len(seq), 0
    while n < end:
        accepted = matched(propose(n)[:k], seq[n:end])
        n += min(accepted + 1, end - n)
        steps += 1
    return end - prompt_len, steps


def runs_from(correct):
    """runs[j] = how many consecutive positions from j are correct (correct: list of bools)."""
    runs = [0] * (len(correct) + 1)
    for j in range(len(correct) - 1, -1, -1):
        runs[j] = runs[j + 1] + 1 if correct[j] else 0
    return runs


def draft_model_proposer(seq, draft_argmax, k):
    """draft_argmax[i]: the draft's greedy token after seq[:i+1]. Returns propose(n) for simulate,
    as the tokens the draft would chain from context seq[:n] while it agrees with seq (the
    first disagreeing token is what it would propose next; it ends acceptance either way)."""
    correct = [draft_argmax[j - 1] == seq[j] for j in range(1, len(seq))]
    runs = runs_from(correct)

    def propose(n):
        r = min(runs[n - 1], k)
        return seq[n:n + r] + ([-1] if r < k else [])
    return propose


def mtp_proposer(seq, mtp_argmax, k):
    """mtp_argmax[d-1][t]: the head's token at depth d from base index t (it proposes seq[t+d+1])."""
    def propose(n):
        t = n - 2
        out = []
        for d in range(1, min(k, len(mtp_argmax)) + 1):
            if t < 0 or t + d + 1 >= len(seq) + 1 or t >= len(mtp_argmax[d - 1]):
                break
            out.append(mtp_argmax[d - 1][t])
        return out
    return propose


def combined_proposer(lookup, fallback):
    def propose(n):
        p = lookup(n)
        return p if p else fallback(n)
    return propose


def edit_similarity(a, b):
    """1 - Levenshtein(a, b) / max(len): 1.0 for equal strings."""
    if not a and not b:
        return 1.0
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
        prev = cur
    return 1.0 - prev[-1] / max(len(a), len(b))

"""How sure the model is: the log partition, direction marginals and span marginals.

The model scores each tag on its own; restricted to the valid tag sequences (the
decoder's lattice: stack depth 1..d after every action, an ``l`` first, depth 1 at the
end; see `decoding`), the scores define a distribution over binarized trees,
p(tags) ∝ exp(Σ scores). Its sums run over the same lattice as the decoder's maximum, in
log space (forward-backward): O(n·d) per sentence.

Which node a span is follows from the depths alone. Words i..j (i < j) form the node of
fencepost k (i ≤ k < j) when the tree pushed by word i's ``l`` (to depth h) stays on the
stack, at depth ≥ h, until it is complete at depth h after leaf k; the internal tag at k
makes it the left child of the node, which stays at depth h (``L``) or fills the empty
slot one below (``R``, depth h − 1). That node is complete after the first later leaf
that leaves the stack at its depth again, all leaves in between leaving it deeper: leaf
j. So the probability that fencepost k's node spans (i, j) is the forward mass up to
leaf i, times two constrained stretches (i → k and k → j), times the backward mass from
leaf j; the probability that (i, j) is a node sums it over k. For a stretch the
constraint is a floor on the depth, so each is a small DP of its own over the same
states.

This module is the NumPy (float64) reference, one sentence at a time.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

# Depth change of the left (0) and right (1) direction, for leaf and internal actions.
_LEAF_STEPS = (1, 0)
_INTERNAL_STEPS = (0, -1)


def _logsumexp(x: np.ndarray, axis: int = -1) -> np.ndarray:
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(top, axis) + np.log(np.sum(np.exp(x - top), axis=axis))


def direction_scores(scores: np.ndarray, directions: Sequence[int]) -> np.ndarray:
    """[..., V] tag scores → [..., 2]: the log-sum-exp of each direction's tags.

    Args:
      scores: tag scores (log-probabilities or any real scores; NaN counts as −inf).
      directions: 0 or 1 per tag (`TagVocabulary.directions()`).
    """
    scores = np.where(np.isnan(scores), -np.inf, np.asarray(scores, np.float64))
    directions = np.asarray(directions)
    return np.stack([_logsumexp(np.where(directions == side, scores, -np.inf))
                     for side in (0, 1)], axis=-1)


def _shift(state: np.ndarray, step: int) -> np.ndarray:
    """Moves mass along the last axis (depths) by `step`; what leaves 0..d is dropped."""
    out = np.full_like(state, -np.inf)
    if step > 0:
        out[..., step:] = state[..., :-step]
    elif step < 0:
        out[..., :step] = state[..., -step:]
    else:
        out[...] = state
    return out


class Lattice:
    """One sentence's lattice and its forward-backward sums.

    Actions are numbered 0..2n−2: action 2i is word i's leaf tag, action 2k+1 the
    internal tag of the fencepost after word k. States are stack depths 0..d (0 only
    before the first action).

    Attributes:
      n: the number of words.
      max_stack_depth: the depth cap d.
      action_scores: [2n − 1, 2], per action the log-sum-exp score of each direction.
      forward: [2n − 1, d + 1], log mass of the paths through actions 0..p, by the depth
        after action p.
      backward: [2n − 1, d + 1], log mass of the ways to finish from the depth after
        action p.
      log_partition: log Σ exp(score) over the valid tag sequences (0 for no words).
    """

    def __init__(self, leaf_scores, internal_scores, leaf_directions: Sequence[int],
                 internal_directions: Sequence[int], max_stack_depth: int):
        """Args:
          leaf_scores: float [n, NL], each word's leaf-tag scores.
          internal_scores: float [≥ n − 1, NI], fencepost k's in row k (extra rows are
            ignored).
          leaf_directions, internal_directions: 0 (l/L) or 1 (r/R) per tag.
          max_stack_depth: the depth cap d.
        """
        leaf = direction_scores(np.asarray(leaf_scores, np.float64), leaf_directions)
        self.n = n = len(leaf)
        self.max_stack_depth = d = int(max_stack_depth)
        internal = direction_scores(np.asarray(internal_scores, np.float64)[:max(n - 1, 0)],
                                    internal_directions)
        self.action_scores = np.zeros((max(2 * n - 1, 0), 2))
        self.action_scores[0::2] = leaf
        self.action_scores[1::2] = internal
        self._depths = np.arange(d + 1)
        self.forward = np.full((len(self.action_scores), d + 1), -np.inf)
        self.backward = np.full((len(self.action_scores), d + 1), -np.inf)
        if n == 0:
            self.log_partition = 0.0
            return
        self.forward[0, 1] = leaf[0, 0]  # the first action is an l
        for p in range(1, len(self.forward)):
            self.forward[p] = self.advance(self.forward[p - 1], p)
        self.backward[-1, 1] = 0.0
        for p in range(len(self.backward) - 1, 0, -1):
            self.backward[p - 1] = self.retreat(self.backward[p], p)
        self.log_partition = float(self.forward[-1, 1])

    def _steps(self, action: int) -> tuple[int, int]:
        return _LEAF_STEPS if action % 2 == 0 else _INTERNAL_STEPS

    def advance(self, before: np.ndarray, action: int, floor=1) -> np.ndarray:
        """Log mass by depth after `action`, from mass by depth before it ([..., d + 1]);
        depths below `floor` (broadcast against before[..., None]) are cut."""
        after = np.logaddexp(*(_shift(before, step) + self.action_scores[action, side]
                               for side, step in enumerate(self._steps(action))))
        return np.where(self._depths >= np.maximum(floor, 1), after, -np.inf)

    def retreat(self, after: np.ndarray, action: int) -> np.ndarray:
        """Log mass by depth before `action` of reaching `after` (by depth after it)."""
        after = np.where(self._depths >= 1, after, -np.inf)
        return np.logaddexp(*(_shift(after, -step) + self.action_scores[action, side]
                              for side, step in enumerate(self._steps(action))))

    def direction_marginals(self) -> np.ndarray:
        """[2n − 1, 2]: the probability of each action's direction."""
        out = np.zeros_like(self.action_scores)
        start = np.where(self._depths == 0, 0.0, -np.inf)
        for p in range(len(out)):
            before = self.forward[p - 1] if p else start
            for side, step in enumerate(self._steps(p)):
                through = (_shift(before, step) + self.action_scores[p, side]
                           + self.backward[p])
                through[0] = -np.inf
                if p == 0:
                    through[2:] = -np.inf
                out[p, side] = np.exp(_logsumexp(through) - self.log_partition)
        return out

    def node_marginals(self, i: int, j: int) -> np.ndarray:
        """[n − 1, 2]: per fencepost k, the probability that its internal tag has each
        direction (L, R) and makes the node spanning words i..j (0 unless i ≤ k < j)."""
        n, d = self.n, self.max_stack_depth
        out = np.zeros((max(n - 1, 0), 2))
        if not 0 <= i < j < n:
            return out
        rows = self._depths[:, None]  # row h: a stretch whose floor is h
        # Arriving at depth h with word i's l.
        if i == 0:
            arrive = np.where(self._depths == 1, self.action_scores[0, 0], -np.inf)
        else:
            arrive = _shift(self.forward[2 * i - 1], 1) + self.action_scores[2 * i, 0]
        # i → k: from depth h after leaf i, ≥ h throughout; read at depth h after leaf k.
        stretch = np.where(self._depths == rows, 0.0, -np.inf)
        before_node = np.full((n, d + 1), -np.inf)  # [k, h]
        for p in range(2 * i, 2 * j):
            if p > 2 * i:
                stretch = self.advance(stretch, p, floor=rows)
            if p % 2 == 0:
                before_node[p // 2] = np.diagonal(stretch)
        # k → j, by the depth s the node settles at: from depth s after internal 2k+1,
        # ≥ s after internal actions and > s after leaves, to s after leaf j.
        stretch = np.where(self._depths == rows, 0.0, -np.inf)  # after leaf j, row s
        after_node = np.full((n, d + 1), -np.inf)  # [k, s]
        for p in range(2 * j, 2 * i, -1):
            if p < 2 * j:
                floor = rows + 1 if p % 2 == 0 else rows
                stretch = np.where(self._depths >= floor, stretch, -np.inf)
            if p % 2 == 1:
                after_node[p // 2] = np.diagonal(stretch)
            stretch = self.retreat(stretch, p)
        finish = self.backward[2 * j]  # [s]
        for k in range(i, j):
            reach = arrive + before_node[k]  # [h]
            for side, settle in ((0, self._depths), (1, self._depths - 1)):
                valid = settle >= 1
                s = np.where(valid, settle, 0)
                total = (reach + self.action_scores[2 * k + 1, side] + after_node[k, s]
                         + finish[s])
                total = np.where(valid, total, -np.inf)
                out[k, side] = np.exp(_logsumexp(total) - self.log_partition)
        return out

    def span_marginal(self, i: int, j: int) -> float:
        """The probability that words i..j form a node of the binarized tree (1 for one
        word)."""
        if i == j:
            return 1.0 if 0 <= i < self.n else 0.0
        return float(self.node_marginals(i, j).sum())


def binary_spans(leaf_directions: Sequence[int],
                 internal_directions: Sequence[int]) -> list[tuple[int, int]]:
    """The words each fencepost's node spans in the binarized tree of a valid direction
    sequence (0 = l/L, 1 = r/R).

    Returns:
      Entry k: (i, j), the first and last word of fencepost k's node.
    """
    # Per stack entry: the word its tree starts at, and the nodes complete when it is.
    starts: list[int] = []
    waiting: list[list[int]] = []
    spans = [(-1, -1)] * len(internal_directions)
    for word, leaf in enumerate(leaf_directions):
        if leaf == 0:
            starts.append(word)
            waiting.append([])
        for k in waiting[-1]:  # the top tree is complete after every leaf
            spans[k] = (spans[k][0], word)
        waiting[-1] = []
        if word == len(internal_directions):
            break
        spans[word] = (starts[-1], -1)
        if internal_directions[word] == 1:  # R: the node fills the slot below
            starts.pop()
            waiting.pop()
        waiting[-1].append(word)
    return spans

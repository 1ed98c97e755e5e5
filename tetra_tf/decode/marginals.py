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

`Lattice` is the NumPy (float64) reference, one sentence at a time; `GraphLattice` is the
same sums as TF ops for a padded batch, inside the SavedModel; `ChainMarginals` turns them
into the probability of each constituent of a decoded tree (the export's
``parse_marginals`` signature), or of every labelled span (``parse_span_marginals``: every
start, end and fencepost, O(n³)).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tetra_tf.decode import decoding
from tetra_tf.trees import tags as tags_lib

# Depth change of the left (0) and right (1) direction, for leaf and internal actions.
_LEAF_STEPS = (tags_lib.DEPTH_CHANGE[tags_lib.LEAF_LEFT],
               tags_lib.DEPTH_CHANGE[tags_lib.LEAF_RIGHT])
_INTERNAL_STEPS = (tags_lib.DEPTH_CHANGE[tags_lib.INTERNAL_LEFT],
                   tags_lib.DEPTH_CHANGE[tags_lib.INTERNAL_RIGHT])


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
        self.max_stack_depth = d = decoding.check_depth(max_stack_depth)
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


# --------------------------------------------------------------------------------------
# TensorFlow: the same sums, batched, inside a graph


def _tf():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf


def _graph_logaddexp(a, b):
    tf = _tf()
    top = tf.maximum(a, b)
    top = tf.where(tf.math.is_finite(top), top, tf.zeros_like(top))
    return top + tf.math.log(tf.exp(a - top) + tf.exp(b - top))


def _graph_shift(state, step: int):
    """`_shift` on the last axis of a tensor."""
    tf = _tf()
    if step == 0:
        return state
    fill = tf.fill(tf.concat([tf.shape(state)[:-1], [abs(step)]], axis=0),
                   tf.constant(-np.inf, state.dtype))
    if step > 0:
        return tf.concat([fill, state[..., :-step]], axis=-1)
    return tf.concat([state[..., -step:], fill], axis=-1)


def graph_direction_scores(scores, directions: Sequence[int]):
    """`direction_scores` as TF ops: [..., V] → [..., 2]."""
    tf = _tf()
    scores = tf.where(tf.math.is_nan(scores), tf.constant(-np.inf, scores.dtype), scores)
    return tf.stack([tf.reduce_logsumexp(tf.where(tf.constant(np.asarray(directions) == side),
                                                  scores, tf.constant(-np.inf, scores.dtype)),
                                         axis=-1)
                     for side in (0, 1)], axis=-1)


class GraphLattice:
    """`Lattice` for a padded batch, as TF ops (float32 or float64, as the scores).

    Rows past a sentence's end keep the depth at no cost (an r leaf, an L internal tag),
    so every sum reads as if the row had exactly its own words. Loops run over the
    fenceposts (bounded `tf.while_loop`s: W − 1 iterations for width W).

    Attributes:
      leaf: [B, W, 2] the leaf actions' direction scores (padded as above).
      internal: [B, W, 2] the internal actions' (entry k for the fencepost after word k).
      after_leaf, after_internal: [B, W, d + 1] forward log masses after each action.
      backward_leaf, backward_internal: [B, W, d + 1] backward log masses after each.
      log_partition: [B] (0 for empty rows).
    """

    def __init__(self, leaf_scores, internal_scores, lengths, leaf_directions: Sequence[int],
                 internal_directions: Sequence[int], max_stack_depth: int):
        """Args:
          leaf_scores: float [B, W, NL].
          internal_scores: float [B, W, NI] (entries at k ≥ length − 1 are ignored).
          lengths: int [B], words per row.
          leaf_directions, internal_directions: 0/1 per tag.
          max_stack_depth: the depth cap d.
        """
        tf = _tf()
        self._factors = None  # `_span_factors`, built when first asked for
        self.d = d = decoding.check_depth(max_stack_depth)
        leaf = graph_direction_scores(leaf_scores, leaf_directions)
        internal = graph_direction_scores(internal_scores, internal_directions)
        # At least one column (a padding word, kept past every row's end), so that the
        # loops' arrays are never empty; outputs are cut back to the input's width.
        self.input_width = tf.shape(leaf)[1]
        extra = [[0, 0], [0, tf.maximum(1 - self.input_width, 0)], [0, 0]]
        leaf, internal = tf.pad(leaf, extra), tf.pad(internal, extra)
        dtype = leaf.dtype
        self.dtype = dtype
        self.lengths = lengths = tf.cast(lengths, tf.int32)
        positions = tf.range(tf.shape(leaf)[1])[None, :, None]
        neg_inf = tf.constant(-np.inf, dtype)
        keep_leaf = tf.constant([-np.inf, 0.0], dtype)      # r: the depth stays
        keep_internal = tf.constant([0.0, -np.inf], dtype)  # L: the depth stays
        self.leaf = tf.where(positions < lengths[:, None, None], leaf, keep_leaf)
        self.internal = tf.where(positions < lengths[:, None, None] - 1, internal,
                                 keep_internal)
        self.width = tf.shape(leaf)[1]
        self.batch_size = tf.shape(leaf)[0]
        self.depths = tf.range(d + 1)
        batch = self.batch_size

        start = tf.where(self.depths[None, :] == 1, self.leaf[:, 0, :1],
                         neg_inf)  # [B, d + 1]: word 0's l
        num_steps = tf.maximum(self.width - 1, 0)

        def forward(t, state, after_internal, after_leaf):
            state = self.advance(state, self.internal[:, t], _INTERNAL_STEPS)
            after_internal = after_internal.write(t, state)
            state = self.advance(state, self.leaf[:, t + 1], _LEAF_STEPS)
            return t + 1, state, after_internal, after_leaf.write(t + 1, state)

        arrays = [tf.TensorArray(dtype, size=self.width, element_shape=[None, d + 1])
                  for _ in range(2)]
        arrays[1] = arrays[1].write(0, start)
        _, final, after_internal, after_leaf = tf.while_loop(
            lambda t, *_: t < num_steps, forward, (0, start, *arrays),
            maximum_iterations=num_steps)
        # The last fencepost has no internal action: its entry is never read.
        after_internal = after_internal.write(num_steps, tf.fill([batch, d + 1], neg_inf))
        self.after_internal = tf.transpose(after_internal.stack(), [1, 0, 2])
        self.after_leaf = tf.transpose(after_leaf.stack(), [1, 0, 2])
        self.log_partition = tf.where(lengths > 0, final[:, 1], tf.zeros([batch], dtype))

        end = tf.where(self.depths[None, :] == 1, tf.zeros([batch, d + 1], dtype), neg_inf)

        def backward(t, state, backward_internal, backward_leaf):
            state = self.retreat(state, self.leaf[:, t + 1], _LEAF_STEPS)
            backward_internal = backward_internal.write(t, state)
            state = self.retreat(state, self.internal[:, t], _INTERNAL_STEPS)
            return t - 1, state, backward_internal, backward_leaf.write(t, state)

        arrays = [tf.TensorArray(dtype, size=self.width, element_shape=[None, d + 1])
                  for _ in range(2)]
        arrays[0] = arrays[0].write(num_steps, tf.fill([batch, d + 1], neg_inf))
        arrays[1] = arrays[1].write(num_steps, end)
        _, _, backward_internal, backward_leaf = tf.while_loop(
            lambda t, *_: t >= 0, backward, (num_steps - 1, end, *arrays),
            maximum_iterations=num_steps)
        self.backward_internal = tf.transpose(backward_internal.stack(), [1, 0, 2])
        self.backward_leaf = tf.transpose(backward_leaf.stack(), [1, 0, 2])

    def _mask(self, state, floor=1):
        tf = _tf()
        return tf.where(self.depths >= tf.maximum(floor, 1), state,
                        tf.constant(-np.inf, self.dtype))

    def advance(self, state, scores, steps, floor=1):
        """[B, ..., d + 1] masses before an action → after it (depths below floor cut);
        scores: [B, 2], that action's direction scores."""
        tf = _tf()
        scores = tf.reshape(scores, tf.concat(
            [[-1], tf.ones([tf.rank(state) - 2], tf.int32), [2]], axis=0))
        after = _graph_logaddexp(_graph_shift(state, steps[0]) + scores[..., :1],
                                 _graph_shift(state, steps[1]) + scores[..., 1:])
        return self._mask(after, floor)

    def retreat(self, state, scores, steps):
        """[B, ..., d + 1] masses by depth after an action → by depth before it."""
        tf = _tf()
        scores = tf.reshape(scores, tf.concat(
            [[-1], tf.ones([tf.rank(state) - 2], tf.int32), [2]], axis=0))
        state = self._mask(state)
        return _graph_logaddexp(_graph_shift(state, -steps[0]) + scores[..., :1],
                                _graph_shift(state, -steps[1]) + scores[..., 1:])

    def direction_marginals(self):
        """(leaf [B, W, 2], internal [B, W, 2]): each action's direction probabilities
        (padding: 0)."""
        tf = _tf()
        neg_inf = tf.constant(-np.inf, self.dtype)
        start = tf.where(self.depths == 0, tf.zeros([], self.dtype), neg_inf)
        before_leaf = tf.concat([tf.broadcast_to(start, [self.batch_size, 1, self.d + 1]),
                                 self.after_internal[:, :-1]], axis=1)

        def marginal(before, scores, steps, after_backward, valid):
            sides = []
            for side, step in enumerate(steps):
                through = self._mask(_graph_shift(before, step) + scores[..., side:side + 1]
                                      + after_backward)
                sides.append(tf.reduce_logsumexp(through, axis=-1))
            probability = tf.exp(tf.stack(sides, axis=-1)
                                 - self.log_partition[:, None, None])
            return tf.where(valid[..., None], probability, tf.zeros([], self.dtype))

        positions = tf.range(self.width)[None, :]
        leaf = marginal(before_leaf, self.leaf, _LEAF_STEPS, self.backward_leaf,
                        positions < self.lengths[:, None])
        internal = marginal(self.after_leaf, self.internal, _INTERNAL_STEPS,
                            self.backward_internal, positions < self.lengths[:, None] - 1)
        return leaf[:, :self.input_width], internal[:, :self.input_width]

    def _span_factors(self):
        """The two halves of "fencepost k's node spans words i..j", for every i, j, k.

        Returns (reach [B, I, K, h], settle [B, J, K, s]), log masses: reach, of every
        sequence's start up to leaf k with word i's ``l`` arriving at depth h and the
        stack at ≥ h since; settle, of the rest after fencepost k's tag (its score not
        included) to the end, the node complete at depth s after leaf j. The node stays
        at h (L: s = h) or fills the slot below (R: s = h − 1); `_node_log_mass` joins
        them.

        Every span start's stretch (and every end's) runs at once, in one loop of W − 1
        steps over [B, W, d + 1, d + 1] states: O(B·W²·d²) work, W sequential steps.
        """
        if self._factors is None:
            self._factors = self._compute_span_factors()
        return self._factors

    def _compute_span_factors(self):
        tf = _tf()
        d, batch, width = self.d, self.batch_size, self.width
        neg_inf = tf.constant(-np.inf, self.dtype)
        rows = self.depths[:, None]
        identity = tf.where(tf.equal(self.depths, rows), tf.zeros([], self.dtype), neg_inf)
        words = tf.range(width)[None, :, None, None]  # [1, W (start or end), 1, 1]
        num_steps = tf.maximum(width - 1, 0)

        # i → k, for every start i at once: [B, I, h, depth], floors h by row.
        def diagonal(state):
            return tf.linalg.diag_part(state)

        def forward(t, state, records):
            state = self.advance(state, self.internal[:, t], _INTERNAL_STEPS, floor=rows)
            state = self.advance(state, self.leaf[:, t + 1], _LEAF_STEPS, floor=rows)
            state = tf.where(tf.equal(words, t + 1), identity, state)
            return t + 1, state, records.write(t + 1, diagonal(state))

        state = tf.where(tf.equal(words, 0), identity,
                         tf.fill([batch, width, d + 1, d + 1], neg_inf))
        records = tf.TensorArray(self.dtype, size=width, element_shape=[None, None, d + 1])
        records = records.write(0, diagonal(state))
        _, _, records = tf.while_loop(lambda t, *_: t < num_steps, forward,
                                      (0, state, records), maximum_iterations=num_steps)
        before_node = tf.transpose(records.stack(), [1, 2, 0, 3])  # [B, I, K, h]

        # k → j, for every end j at once: [B, J, s, depth] after each action.
        def backward(t, state, records):
            later = tf.where(self.depths >= rows + 1, state, neg_inf)  # leaves before j
            state = tf.where(tf.equal(words, t + 1), identity,
                             tf.where(words > t + 1, later, neg_inf))
            state = self.retreat(state, self.leaf[:, t + 1], _LEAF_STEPS)
            state = tf.where(self.depths >= rows, state, neg_inf)
            records = records.write(t, diagonal(self._mask(state)))
            state = self.retreat(state, self.internal[:, t], _INTERNAL_STEPS)
            return t - 1, state, records

        state = tf.fill([batch, width, d + 1, d + 1], neg_inf)
        records = tf.TensorArray(self.dtype, size=width, element_shape=[None, None, d + 1])
        records = records.write(num_steps, tf.fill([batch, width, d + 1], neg_inf))
        _, _, records = tf.while_loop(lambda t, *_: t >= 0, backward,
                                      (num_steps - 1, state, records),
                                      maximum_iterations=num_steps)
        after_node = tf.transpose(records.stack(), [1, 2, 0, 3])  # [B, J, K, s]

        # Arriving at depth h after word i's l.
        first = tf.where(tf.equal(self.depths, 1), self.leaf[:, :1, :1], neg_inf)
        later = _graph_shift(self.after_internal[:, :-1], 1) + self.leaf[:, 1:, :1]
        arrive = tf.concat([first, later], axis=1)  # [B, W, h]
        settle = after_node + self.backward_leaf[:, :, None, :]
        return arrive[:, :, None, :] + before_node, settle

    def _node_log_mass(self, reach, settle):
        """[B, M, K, h] reach + [B, M, K, s] settle → [B, M, K, 2]: the log probability
        that fencepost k's tag has each direction and makes the node of span m."""
        tf = _tf()
        by_direction = tf.stack([settle, _graph_shift(settle, 1)], axis=3)  # L: s = h; R
        total = tf.reduce_logsumexp(reach[:, :, :, None, :] + by_direction, axis=-1)
        return total + self.internal[:, None] - self.log_partition[:, None, None, None]

    def node_marginals(self, starts, ends):
        """[B, M, W, 2]: for each requested span (words starts[m]..ends[m]) and fencepost
        k, the probability that k's internal tag has each direction and makes the node
        spanning it (0 for k outside the span, for spans of one word, or out of range).

        O(B·W²·d²) work (`_span_factors`).

        Args:
          starts, ends: int [B, M], the spans' first and last words.
        """
        tf = _tf()
        starts, ends = tf.cast(starts, tf.int32), tf.cast(ends, tf.int32)
        reach, settle = self._span_factors()
        safe_starts = tf.clip_by_value(starts, 0, self.width - 1)
        safe_ends = tf.clip_by_value(ends, 0, self.width - 1)
        probability = tf.exp(self._node_log_mass(
            tf.gather(reach, safe_starts, batch_dims=1),
            tf.gather(settle, safe_ends, batch_dims=1)))
        valid = ((starts >= 0) & (starts < ends) & (ends < self.lengths[:, None]))
        probability = tf.where(valid[:, :, None, None], probability, tf.zeros([], self.dtype))
        return probability[:, :, :self.input_width]

    def span_marginals(self, label_given_direction):
        """[B, I, J, E]: for every span of two words or more (words i..j, i < j), the
        probability that it is a node of the binarized tree whose internal tag's chain
        holds label e (0 where i ≥ j or past the row's end).

        A loop over the starts i, each [B, J, K, 2, d + 1]: O(B·W³·(d + E)) work, W
        sequential steps (on top of `_span_factors`).

        Args:
          label_given_direction: [B, W, 2, E], per fencepost, P(its tag's chain holds
            label e | its direction).
        """
        tf = _tf()
        reach, settle = self._span_factors()
        labels = tf.shape(label_given_direction)[-1]
        label_given_direction = tf.pad(
            label_given_direction,
            [[0, 0], [0, self.width - tf.shape(label_given_direction)[1]], [0, 0], [0, 0]])
        ends = tf.range(self.width)[None, :]

        def by_start(i, records):
            nodes = tf.exp(self._node_log_mass(reach[:, i:i + 1], settle))
            nodes = tf.where(((i < ends) & (ends < self.lengths[:, None]))[:, :, None, None],
                             nodes, tf.zeros([], self.dtype))
            return i + 1, records.write(
                i, tf.einsum("bjks,bkse->bje", nodes, label_given_direction))

        records = tf.TensorArray(self.dtype, size=self.width,
                                 element_shape=[None, None, None])
        _, records = tf.while_loop(lambda i, _: i < self.width, by_start, (0, records),
                                   maximum_iterations=self.width)
        spans = tf.transpose(records.stack(), [1, 0, 2, 3])  # [B, I, J, E]
        width = self.input_width
        return tf.reshape(spans[:, :width, :width],
                          tf.stack([self.batch_size, width, width, labels]))


def _chain_tables(tags: Sequence[str], labels: dict[str, int], longest: int):
    """Per tag: its chain's label ids (padded −1 to `longest`) and a [V, E] membership."""
    elements = np.full((len(tags), max(longest, 1)), -1, np.int32)
    member = np.zeros((len(tags), max(len(labels), 1)), np.float64)
    for t, tag in enumerate(tags):
        for c, label in enumerate(tags_lib.split_chain(tags_lib.tag_label(tag))):
            elements[t, c] = labels[label]
            member[t, labels[label]] = 1.0
    return elements, member


class ChainMarginals:
    """Per node of a decoded tree, the probability of each constituent its tag opens.

    A tag with the label chain A+B opens the constituents A and B over its node's span
    (one word for a leaf tag). The probability of constituent (label, span) is the
    probability that the span is a node of the binarized tree whose tag's chain holds the
    label, under the lattice's distribution: for internal nodes summed over the fenceposts
    that could make the node (`GraphLattice.node_marginals`), for leaf tags over the word's
    two directions.
    """

    def __init__(self, leaf_tags: Sequence[str], internal_tags: Sequence[str],
                 leaf_directions: Sequence[int], internal_directions: Sequence[int]):
        """Args:
          leaf_tags, internal_tags: the vocabularies' tags, by id.
          leaf_directions, internal_directions: 0/1 per tag.
        """
        chains = [tags_lib.split_chain(tags_lib.tag_label(tag))
                  for tag in (*leaf_tags, *internal_tags)]
        self.labels = sorted({label for chain in chains for label in chain})
        labels = {label: e for e, label in enumerate(self.labels)}
        self.longest_chain = max([len(chain) for chain in chains] + [1])
        self._leaf = _chain_tables(leaf_tags, labels, self.longest_chain)
        self._internal = _chain_tables(internal_tags, labels, self.longest_chain)
        self._leaf_directions = np.asarray(leaf_directions, np.int32)
        self._internal_directions = np.asarray(internal_directions, np.int32)

    def _label_given_direction(self, scores, directions, member):
        """[B, W, V] tag scores → [B, W, 2, E]: P(the tag's chain holds label e | the
        action's direction)."""
        tf = _tf()
        scores = tf.where(tf.math.is_nan(scores), tf.constant(-np.inf, scores.dtype), scores)
        sides = graph_direction_scores(scores, directions)  # [B, W, 2]
        own_side = tf.gather(sides, directions, axis=-1)    # [B, W, V]
        probability = tf.exp(scores - own_side)
        probability = tf.where(tf.math.is_finite(own_side), probability,
                               tf.zeros([], scores.dtype))
        by_side = tf.stack([tf.where(tf.constant(directions == side), probability,
                                     tf.zeros([], scores.dtype)) for side in (0, 1)], axis=2)
        return tf.einsum("bwsv,ve->bwse", by_side, tf.constant(member, scores.dtype))

    def __call__(self, lattice: GraphLattice, leaf_scores, internal_scores, leaf_tag_ids,
                 internal_tag_ids, starts, ends):
        """Returns (leaf [B, W, C], internal [B, W, C]): entry c of a word's (a
        fencepost's) row is the probability of the c-th constituent its decoded tag opens
        (−1 past the chain, and at positions without a node).

        Args:
          lattice: the rows' `GraphLattice` (built from the same scores).
          leaf_scores, internal_scores: [B, W, NL], [B, W, NI], the scores it was built from.
          leaf_tag_ids, internal_tag_ids: int32 [B, W], the decoded tags.
          starts, ends: int32 [B, W], the first and last word of each fencepost's node.
        """
        tf = _tf()
        leaf, internal_labels = self._by_label(lattice, leaf_scores, internal_scores)
        nodes = lattice.node_marginals(starts, ends)  # [B, M = fencepost, K, 2]
        internal = tf.einsum("bmks,bkse->bme", nodes, internal_labels)
        positions = tf.range(tf.shape(leaf_tag_ids)[1])[None, :]
        return (self._own(leaf, leaf_tag_ids, self._leaf[0],
                          positions < lattice.lengths[:, None]),
                self._own(internal, internal_tag_ids, self._internal[0],
                          positions < lattice.lengths[:, None] - 1))

    def _by_label(self, lattice: GraphLattice, leaf_scores, internal_scores):
        """(leaf [B, W, E]: P(word w's leaf tag's chain holds label e), internal
        [B, W, 2, E]: P(fencepost k's chain holds e | its direction))."""
        tf = _tf()
        dtype = lattice.dtype
        leaf_directions, _ = lattice.direction_marginals()
        leaf_labels = self._label_given_direction(
            tf.cast(leaf_scores, dtype), self._leaf_directions, self._leaf[1])
        internal_labels = self._label_given_direction(
            tf.cast(internal_scores, dtype), self._internal_directions, self._internal[1])
        return tf.einsum("bws,bwse->bwe", leaf_directions, leaf_labels), internal_labels

    def every_span(self, lattice: GraphLattice, leaf_scores, internal_scores):
        """[B, I, J, E]: the probability of constituent (`labels`[e], words i..j) for
        every span and label (0 where i > j or past the row's end). O(W³) work
        (`GraphLattice.span_marginals`).

        Args:
          lattice: the rows' `GraphLattice` (built from the same scores).
          leaf_scores, internal_scores: [B, W, NL], [B, W, NI], the scores it was built from.
        """
        tf = _tf()
        one_word, internal_labels = self._by_label(lattice, leaf_scores, internal_scores)
        spans = lattice.span_marginals(internal_labels)
        by_label = tf.linalg.set_diag(tf.transpose(spans, [0, 3, 1, 2]),  # [B, E, I, J]
                                      tf.transpose(one_word, [0, 2, 1]))
        return tf.transpose(by_label, [0, 2, 3, 1])

    def _own(self, by_label, tag_ids, elements, valid):
        """[B, W, E] by label → [B, W, C] for each position's own chain."""
        tf = _tf()
        chain = tf.gather(tf.constant(elements), tf.where(valid, tag_ids, 0))  # [B, W, C]
        values = tf.gather(by_label, tf.maximum(chain, 0), batch_dims=2)
        return tf.cast(tf.where((chain >= 0) & valid[..., None], values, -1.0), tf.float32)

"""The k best valid tag sequences of a sentence: k-best Viterbi over the decoder's lattice.

The lattice is `decoding`'s: 2n − 1 actions, each a tag; the stack depth moves by l: +1,
r: 0, L: 0, R: −1, stays within 1..d after every action, the first action is an l and the
last leaves depth 1. Where the decoder keeps, per depth, the best path into it, this keeps
the k best (each with the depth and rank it came from), so the k best complete sequences
are the final depth 1's list: O(n·d·k·(k + V)) work for V tags per action.

`k_best_numpy` is the NumPy reference, one sentence at a time.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from tetra_tf.decode import decoding
from tetra_tf.trees import tags as tags_lib


class KBestResult(NamedTuple):
    """The k best tag sequences of each sentence of a padded batch, best first.

    Attributes:
      leaf_tag_ids: int32 [B, k, W], −1 past the row's words (and for missing sequences).
      internal_tag_ids: int32 [B, k, W], entry i for the fencepost after word i; −1 at
        i ≥ length − 1.
      scores: [B, k], each sequence's total score (float64 from `k_best_numpy`; the
        scores' float type, at least float32, from `k_best`); −inf where a sentence has
        fewer than k valid sequences (0 for the one sequence of an empty row).
      lengths: int32 [B].
    """

    leaf_tag_ids: np.ndarray
    internal_tag_ids: np.ndarray
    scores: np.ndarray
    lengths: np.ndarray


def _steps(directions: Sequence[int], kind: str) -> np.ndarray:
    """Per tag, its action's depth change."""
    change = tags_lib.DEPTH_CHANGE
    left, right = ((change[tags_lib.LEAF_LEFT], change[tags_lib.LEAF_RIGHT]) if kind == "leaf"
                   else (change[tags_lib.INTERNAL_LEFT], change[tags_lib.INTERNAL_RIGHT]))
    return np.where(np.asarray(directions) == 0, left, right)


def k_best_numpy(leaf_scores, internal_scores, lengths, leaf_directions: Sequence[int],
                 internal_directions: Sequence[int], k: int,
                 max_stack_depth: int) -> KBestResult:
    """The k best valid tag sequences of every sentence of a padded batch.

    Args:
      leaf_scores: float [B, W, NL].
      internal_scores: float [B, W, NI] (entries at i ≥ length − 1 are ignored).
      lengths: int [B].
      leaf_directions, internal_directions: 0/1 per tag.
      k: how many sequences (≥ 1).
      max_stack_depth: the depth cap d.

    Returns:
      A KBestResult. Equal scores keep the order they were found in (by the depth they
      came from, then its rank, then the tag's id); NaN scores count as −inf (a tag never
      chosen).
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    decoding.check_depth(max_stack_depth)
    leaf_scores = np.nan_to_num(np.asarray(leaf_scores, np.float64), nan=-np.inf)
    internal_scores = np.nan_to_num(np.asarray(internal_scores, np.float64), nan=-np.inf)
    lengths = np.asarray(lengths, np.int32)
    batch, width = leaf_scores.shape[:2]
    leaf_ids = np.full((batch, k, width), -1, np.int32)
    internal_ids = np.full((batch, k, width), -1, np.int32)
    scores = np.full((batch, k), -np.inf)
    leaf_steps = _steps(leaf_directions, "leaf")
    internal_steps = _steps(internal_directions, "internal")
    for row, n in enumerate(lengths):
        if n == 0:
            scores[row, 0] = 0.0
            continue
        actions = [(leaf_scores[row, p // 2], leaf_steps) if p % 2 == 0
                   else (internal_scores[row, p // 2], internal_steps)
                   for p in range(2 * n - 1)]
        for rank, (score, tag_ids) in enumerate(
                _k_best_sentence(actions, k, int(max_stack_depth))):
            scores[row, rank] = score
            leaf_ids[row, rank, :n] = tag_ids[0::2]
            internal_ids[row, rank, :n - 1] = tag_ids[1::2]
    return KBestResult(leaf_ids, internal_ids, scores, lengths)


def _k_best_sentence(actions, k: int, d: int) -> list[tuple[float, list[int]]]:
    """[(score, the 2n − 1 tag ids)] of one sentence's k best sequences, best first."""
    # Per action, per depth: up to k entries (score, previous depth, previous rank, tag).
    layers: list[dict[int, list[tuple[float, int, int, int]]]] = []
    first_scores, first_steps = actions[0]
    start = [(float(first_scores[t]), 0, 0, t) for t in range(len(first_scores))
             if first_steps[t] == 1 and first_scores[t] > -np.inf]
    layers.append({1: _top(start, k)})
    for tag_scores, steps in actions[1:]:
        candidates: dict[int, list] = {}
        for depth, entries in sorted(layers[-1].items()):
            for rank, (score, *_) in enumerate(entries):
                for tag, tag_score in enumerate(tag_scores):
                    to = depth + int(steps[tag])
                    if 1 <= to <= d and tag_score > -np.inf:
                        candidates.setdefault(to, []).append(
                            (score + float(tag_score), depth, rank, tag))
        layers.append({depth: _top(entries, k) for depth, entries in candidates.items()})
    results = []
    for rank, (score, *_) in enumerate(layers[-1].get(1, [])):
        tags, depth = [], 1
        for layer in reversed(layers):
            _, previous_depth, previous_rank, tag = layer[depth][rank]
            tags.append(tag)
            depth, rank = previous_depth, previous_rank
        results.append((score, tags[::-1]))
    return results


def _top(entries: list, k: int) -> list:
    """The k highest-scoring entries, ties in their given order."""
    return sorted(entries, key=lambda entry: -entry[0])[:k]


# --------------------------------------------------------------------------------------
# TensorFlow


def k_best(leaf_scores, internal_scores, lengths, leaf_directions: Sequence[int],
           internal_directions: Sequence[int], k: int, max_stack_depth: int):
    """`k_best_numpy` as TF ops, for a graph (dynamic batch and width; k and d static).

    Pairs the actions as `decoding.decode` does: step t applies fencepost t's internal tag
    and word t+1's leaf tag, so each of the four moves (L l, L r, R l, R r) first takes its
    k best tag pairs; each state then keeps the k best of its predecessors' k entries times
    the moves' k pairs (`tf.math.top_k`, ties to the lower index). Steps past a row's end
    keep the depth at no cost. A bounded `tf.while_loop` runs forward and another back;
    each step weighs 4·k² candidates per state.

    Returns:
      A KBestResult of tensors (scores in the scores' float type).
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    d = decoding.check_depth(max_stack_depth)
    leaf_scores = tf.convert_to_tensor(leaf_scores)
    internal_scores = tf.convert_to_tensor(internal_scores)
    dtype = (tf.float64 if tf.float64 in (leaf_scores.dtype, internal_scores.dtype)
             else tf.float32)
    leaf_scores = tf.cast(leaf_scores, dtype)
    internal_scores = tf.cast(internal_scores, dtype)
    neg_inf = tf.constant(-np.inf, dtype)
    leaf_scores = tf.where(tf.math.is_nan(leaf_scores), neg_inf, leaf_scores)
    internal_scores = tf.where(tf.math.is_nan(internal_scores), neg_inf, internal_scores)
    lengths = tf.cast(lengths, tf.int32)
    batch, width = tf.shape(leaf_scores)[0], tf.shape(leaf_scores)[1]
    # At least two words' columns (padding past every row's end), so that the loops have a
    # step and their arrays are never empty.
    extra = [[0, 0], [0, tf.maximum(2 - width, 0)], [0, 0]]
    leaf_scores, internal_scores = tf.pad(leaf_scores, extra), tf.pad(internal_scores, extra)
    padded_width = tf.maximum(width, 2)

    def top_by_side(scores, directions):
        """[B, W, V] → (scores, ids) [B, W, 2, k]: each direction's k best tags."""
        sides = [tf.where(tf.constant(np.asarray(directions) == side), scores, neg_inf)
                 for side in (0, 1)]
        best = [tf.math.top_k(side, k=min(k, int(scores.shape[-1]))) for side in sides]
        values = tf.stack([b.values for b in best], axis=2)
        ids = tf.stack([b.indices for b in best], axis=2)
        missing = k - values.shape[-1]
        if missing:
            values = tf.pad(values, [[0, 0]] * 3 + [[0, missing]], constant_values=-np.inf)
            ids = tf.pad(ids, [[0, 0]] * 3 + [[0, missing]], constant_values=0)
        return values, ids

    leaf_best, leaf_ids = top_by_side(leaf_scores, leaf_directions)
    internal_best, internal_ids = top_by_side(internal_scores, internal_directions)

    # The moves' k best (internal, leaf) tag pairs per step: [B, W − 1, 4, k].
    pair_scores = (internal_best[:, :-1, :, None, :, None]
                   + leaf_best[:, 1:, None, :, None, :])  # [B, S, 2, 2, k, k]
    pair_scores = tf.reshape(pair_scores, [batch, padded_width - 1, 4, k * k])
    pair_top = tf.math.top_k(pair_scores, k=k)
    pair_scores, pair_index = pair_top.values, pair_top.indices
    inactive = tf.range(padded_width - 1)[None, :] >= lengths[:, None] - 1
    keep = tf.constant(np.where((np.arange(4) == decoding._KEEP_MOVE)[:, None]
                                & (np.arange(k) == 0)[None, :], 0.0, -np.inf), dtype)
    pair_scores = tf.where(inactive[..., None, None], keep, pair_scores)
    pair_scores = tf.transpose(pair_scores, [1, 0, 2, 3])  # [S, B, 4, k]
    pair_index = tf.transpose(pair_index, [1, 0, 2, 3])

    predecessor = tf.constant(decoding._predecessor_index(d))  # [d, 4] into padded states
    first = tf.concat([leaf_best[:, 0, :1, :],
                       tf.fill([batch, d - 1, k], neg_inf)], axis=1)  # [B, d, k]
    num_steps = padded_width - 1
    pointers = tf.TensorArray(tf.int32, size=num_steps, element_shape=[None, d, k])

    def forward(t, state, pointers):
        padded = tf.pad(state, [[0, 0], [1, 1], [0, 0]], constant_values=-np.inf)
        before = tf.gather(padded, predecessor, axis=1)  # [B, d, 4, k]
        candidates = before[..., :, None] + pair_scores[t][:, None, :, None, :]
        candidates = tf.where(tf.math.is_nan(candidates), neg_inf, candidates)
        best = tf.math.top_k(tf.reshape(candidates, [batch, d, 4 * k * k]), k=k)
        return t + 1, best.values, pointers.write(t, best.indices)

    _, final, pointers = tf.while_loop(lambda t, *_: t < num_steps, forward,
                                       (0, first, pointers), maximum_iterations=num_steps)
    pointers = pointers.stack()  # [S, B, d, k]: move·k·k + rank·k + pair rank

    change = tf.constant(decoding._MOVE_DEPTH_CHANGE)
    rows = tf.range(batch)
    tags = tf.TensorArray(tf.int32, size=num_steps, element_shape=[None, k, 2])

    def backward(t, depth, rank, tags):
        pointer = tf.gather_nd(pointers[t], tf.stack(
            [tf.broadcast_to(rows[:, None], tf.shape(depth)), depth, rank], axis=-1))
        move, previous_rank, pair = pointer // (k * k), pointer // k % k, pointer % k
        index = tf.gather_nd(pair_index[t], tf.stack(
            [tf.broadcast_to(rows[:, None], tf.shape(move)), move, pair], axis=-1))
        sides = tf.stack([move // 2, move % 2], axis=-1)  # internal, leaf direction
        first_rank = tf.stack([index // k, index % k], axis=-1)
        step = tf.broadcast_to(t, tf.shape(move))
        internal_tag = tf.gather_nd(internal_ids, tf.stack(
            [tf.broadcast_to(rows[:, None], tf.shape(move)), step, sides[..., 0],
             first_rank[..., 0]], axis=-1))
        leaf_tag = tf.gather_nd(leaf_ids, tf.stack(
            [tf.broadcast_to(rows[:, None], tf.shape(move)), step + 1, sides[..., 1],
             first_rank[..., 1]], axis=-1))
        tags = tags.write(t, tf.stack([internal_tag, leaf_tag], axis=-1))
        # A rank with no valid sequence (score −inf) follows arbitrary pointers: kept in
        # range here, its tags are dropped below.
        depth = tf.clip_by_value(depth - tf.gather(change, move), 0, d - 1)
        return t - 1, depth, previous_rank, tags

    start_rank = tf.broadcast_to(tf.range(k)[None, :], [batch, k])
    _, _, first_rank, tags = tf.while_loop(
        lambda t, *_: t >= 0, backward,
        (num_steps - 1, tf.zeros([batch, k], tf.int32), start_rank, tags),
        maximum_iterations=num_steps)
    first_leaf = tf.gather(leaf_ids[:, 0, 0], first_rank, batch_dims=1)  # [B, k]
    stepped = tf.transpose(tags.stack(), [1, 2, 0, 3])  # [B, k, S, 2]
    leaf_tag_ids = tf.concat([first_leaf[..., None], stepped[..., 1]], axis=2)
    internal_tag_ids = tf.pad(stepped[..., 0], [[0, 0], [0, 0], [0, 1]])
    scores = final[:, 0, :]  # depth 1
    positions = tf.range(padded_width)[None, None, :]
    found = scores > neg_inf
    leaf_tag_ids = tf.where(found[..., None] & (positions < lengths[:, None, None]),
                            leaf_tag_ids, -1)
    internal_tag_ids = tf.where(found[..., None] & (positions < lengths[:, None, None] - 1),
                                internal_tag_ids, -1)
    empty = tf.where(tf.range(k)[None, :] == 0, tf.zeros([], dtype), neg_inf)
    scores = tf.where((lengths > 0)[:, None], scores, empty)
    return KBestResult(leaf_tag_ids[:, :, :width], internal_tag_ids[:, :, :width], scores,
                       lengths)

"""The tetra-tag decoder (Kitaev & Klein, 2020, §3.4): the best valid tag sequence.

A sentence of n words takes 2n−1 actions, leaf, internal, leaf, …, leaf. They move the
stack depth by l: +1, r: 0, L: 0, R: −1; the first action is an l (depth 1), the depth
must stay within 1..d after every action (d = `max_stack_depth`; so R needs depth ≥ 2
before it), and the final depth is 1. Tags with labels act like their direction, so each
of the four actions first takes its best label and a dynamic program over depths finds the
best sequence of actions: O(n·d) work per sentence.

Both decoders here pair the actions: step t applies the internal action of fencepost t and
then the leaf action of word t+1, so a sentence takes n−1 steps over states of d depths,
each state picking the best of four moves (L l: +1, L r: 0, R l: 0, R r: −1). Steps past
a row's end may only keep the depth (score 0), which leaves its state as it was.

* `decode_numpy`: NumPy, batched (vectorized over batch × depth), for tests and hosts.
* `decode`: TensorFlow, a bounded `tf.while_loop` forward and one backward, with static
  shapes whenever the padded width W and the depth cap are static. The same code runs as a
  plain graph (TF Serving) and compiles with XLA (`jit_compile=True`, the TPU path); see
  `make_decoder`. XLA compiles once per input shape: pad words and batch to a few buckets
  (`pad_to_bucket`) before calling an XLA decoder.

Non-finite scores (both decoders):

* NaN is treated as −inf.
* −inf forbids a tag: a sequence using it scores −inf.
* +inf is allowed and wins: a sequence using it (and no forbidden tag) scores +inf and
  beats every finite one. Sums mixing +inf and −inf count as −inf.
* If no valid sequence scores above −inf, the result is still a valid sequence (some valid
  one, not a meaningful one) with score −inf.

Ties are broken the same way by both decoders (the lowest tag id, then the first move in
the order L l, L r, R l, R r).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from tetra_tf.trees import tags as tags_lib

DEFAULT_MAX_STACK_DEPTH = 8

# The four moves of one step, as (internal direction, leaf direction), 0 = left, 1 = right:
# move = 2 * internal + leaf. Moving into depth index j, each reads its predecessor from
# index j − DEPTH_CHANGE[move] of the previous state.
_MOVE_DEPTH_CHANGE = np.array([1, 0, 0, -1], dtype=np.int32)
# The move that only keeps the depth (L r), used for steps past the end of a row.
_KEEP_MOVE = 1
# DP steps per tf.while_loop iteration (unrolled inside it).
_STEPS_PER_ITERATION = 8


class DecodeResult(NamedTuple):
    """The best tag sequence of each sentence of a padded batch.

    Attributes:
      leaf_tag_ids: int32 [B, W], −1 at padded positions.
      internal_tag_ids: int32 [B, W], entry i for the fencepost after word i; −1 at
        i ≥ length − 1.
      scores: float [B], the total score of the chosen tags (0 for empty rows).
      lengths: int32 [B], words per sentence.
    """

    leaf_tag_ids: object
    internal_tag_ids: object
    scores: object
    lengths: object


def _check_directions(directions, num_tags: int | None, name: str) -> np.ndarray:
    """Returns directions as an int32 vector of 0/1 holding both; ValueError otherwise."""
    directions = np.asarray(directions)
    if directions.ndim != 1 or not np.isin(directions, (0, 1)).all():
        raise ValueError(f"{name} must be a vector of 0 (left) and 1 (right)")
    if not (directions == 0).any() or not (directions == 1).any():
        raise ValueError(f"{name} must hold at least one left and one right tag")
    if num_tags is not None and len(directions) != num_tags:
        raise ValueError(f"{name} has {len(directions)} entries for {num_tags} tag scores")
    return directions.astype(np.int32)


def _predecessor_index(max_stack_depth: int) -> np.ndarray:
    """Returns, per [depth index j, move], where the move reads the previous state.

    Indices address the previous state padded with −inf on both sides (index 0 and d+1),
    which is where impossible moves point: L l into depth 1, R r out of depth d and R l
    into depth 1 (its R would empty the stack).
    """
    d = max_stack_depth
    index = np.empty((d, 4), dtype=np.int32)
    for j in range(d):
        index[j] = [j, j + 1, j + 1 if j >= 1 else 0, j + 2]
    return index


def _fallback_moves(max_stack_depth: int) -> np.ndarray:
    """Returns, per depth index, a move that is valid whenever the state is reachable.

    Used when every move into a state scores −inf, so that backtracking still follows a
    valid sequence: depth 1 keeps its depth (L r); deeper states come from one level up
    (L l), which is reachable whenever they are.
    """
    fallback = np.zeros(max_stack_depth, dtype=np.int32)
    fallback[0] = _KEEP_MOVE
    return fallback


def check_depth(max_stack_depth) -> int:
    """max_stack_depth as an int; ValueError unless it is a positive integer."""
    if int(max_stack_depth) != max_stack_depth or max_stack_depth < 1:
        raise ValueError(f"max_stack_depth must be a positive integer, got {max_stack_depth}")
    return int(max_stack_depth)


# --------------------------------------------------------------------------------------
# NumPy


def _best_by_direction_numpy(scores: np.ndarray, directions: np.ndarray):
    """Returns the best score and tag id per direction: two [B, W, 2] arrays."""
    best_scores, best_ids = [], []
    for direction in (0, 1):
        ids = np.flatnonzero(directions == direction)
        subset = scores[..., ids]
        argmax = subset.argmax(axis=-1)
        best_ids.append(ids[argmax])
        best_scores.append(np.take_along_axis(subset, argmax[..., None], axis=-1)[..., 0])
    return np.stack(best_scores, axis=-1), np.stack(best_ids, axis=-1).astype(np.int32)


def _nan_to_neg_inf_numpy(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), -np.inf, x)


def decode_numpy(
    leaf_scores,
    internal_scores,
    lengths,
    leaf_directions,
    internal_directions,
    max_stack_depth: int = DEFAULT_MAX_STACK_DEPTH,
) -> DecodeResult:
    """Finds the best valid tag sequence of every sentence of a padded batch, in NumPy.

    Args:
      leaf_scores: float [B, W, NL], per-word scores over the leaf-tag vocabulary.
      internal_scores: float [B, W, NI], entry i for the fencepost after word i; entries at
        i ≥ length − 1 are ignored.
      lengths: int [B], words per sentence, 0 ≤ length ≤ W.
      leaf_directions: int [NL], 0 for l tags, 1 for r tags (`TagVocabulary.directions()`).
      internal_directions: int [NI], 0 for L tags, 1 for R tags.
      max_stack_depth: the stack depth cap d.

    Returns:
      A DecodeResult of NumPy arrays (scores in the scores' float type, at least float32).

    Raises:
      ValueError: on inconsistent shapes, bad directions, or lengths outside 0..W.
    """
    d = check_depth(max_stack_depth)
    leaf_scores = np.asarray(leaf_scores)
    internal_scores = np.asarray(internal_scores)
    lengths = np.asarray(lengths)
    if leaf_scores.ndim != 3 or internal_scores.ndim != 3 or lengths.ndim != 1:
        raise ValueError("expected leaf_scores [B, W, NL], internal_scores [B, W, NI], "
                         "lengths [B]")
    batch_size, width, _ = leaf_scores.shape
    if internal_scores.shape[:2] != (batch_size, width) or lengths.shape != (batch_size,):
        raise ValueError(
            f"shapes disagree: leaf_scores {leaf_scores.shape}, internal_scores "
            f"{internal_scores.shape}, lengths {lengths.shape}")
    leaf_directions = _check_directions(leaf_directions, leaf_scores.shape[2],
                                        "leaf_directions")
    internal_directions = _check_directions(internal_directions, internal_scores.shape[2],
                                            "internal_directions")
    if lengths.size and (lengths.min() < 0 or lengths.max() > width):
        raise ValueError(f"lengths must lie in 0..{width} (the padded width); got "
                         f"{lengths.min()}..{lengths.max()}")
    lengths = lengths.astype(np.int32)
    dtype = np.result_type(leaf_scores.dtype, internal_scores.dtype, np.float32)

    with np.errstate(invalid="ignore"):  # inf − inf is NaN, and then −inf
        return _decode_numpy(leaf_scores.astype(dtype), internal_scores.astype(dtype), lengths,
                             leaf_directions, internal_directions, d)


def _decode_numpy(leaf_scores, internal_scores, lengths, leaf_directions, internal_directions,
                  d):
    """decode_numpy on checked inputs of one float type."""
    batch_size, width, _ = leaf_scores.shape
    dtype = leaf_scores.dtype
    leaf_best, leaf_ids = _best_by_direction_numpy(
        _nan_to_neg_inf_numpy(leaf_scores), leaf_directions)
    internal_best, internal_ids = _best_by_direction_numpy(
        _nan_to_neg_inf_numpy(internal_scores), internal_directions)

    leaf_directions_out = np.zeros((batch_size, width), dtype=np.int32)
    internal_directions_out = np.zeros((batch_size, width), dtype=np.int32)
    scores = np.zeros(batch_size, dtype=dtype)
    if width >= 1:
        num_steps = width - 1
        # Step t: internal action t, then leaf action t+1; moves ordered L l, L r, R l, R r.
        step_scores = _nan_to_neg_inf_numpy(
            internal_best[:, :num_steps, :, None] + leaf_best[:, 1:, None, :]).reshape(
                batch_size, num_steps, 4)
        inactive = np.arange(num_steps)[None, :] >= lengths[:, None] - 1
        step_scores[inactive] = np.where(np.arange(4) == _KEEP_MOVE, 0.0, -np.inf)

        predecessor = _predecessor_index(d)
        fallback = _fallback_moves(d)
        state = np.full((batch_size, d), -np.inf, dtype=dtype)
        state[:, 0] = leaf_best[:, 0, 0]
        moves = np.empty((num_steps, batch_size, d), dtype=np.int8)
        padded = np.full((batch_size, d + 2), -np.inf, dtype=dtype)
        for t in range(num_steps):
            padded[:, 1:-1] = state
            candidates = _nan_to_neg_inf_numpy(
                padded[:, predecessor] + step_scores[:, t, None, :])
            best_move = candidates.argmax(axis=-1)
            state = np.take_along_axis(candidates, best_move[..., None], axis=-1)[..., 0]
            moves[t] = np.where(state == -np.inf, fallback, best_move)

        chosen = np.empty((batch_size, num_steps), dtype=np.int32)
        depth_index = np.zeros(batch_size, dtype=np.int32)
        rows = np.arange(batch_size)
        for t in reversed(range(num_steps)):
            move = moves[t, rows, depth_index].astype(np.int32)
            chosen[:, t] = move
            depth_index = depth_index - _MOVE_DEPTH_CHANGE[move]
        internal_directions_out[:, :num_steps] = chosen // 2
        leaf_directions_out[:, 1:] = chosen % 2
        scores = np.where(lengths > 0, state[:, 0], 0).astype(dtype)

    positions = np.arange(width)[None, :]
    leaf_tag_ids = np.where(
        positions < lengths[:, None],
        np.take_along_axis(leaf_ids, leaf_directions_out[..., None], axis=-1)[..., 0], -1)
    internal_tag_ids = np.where(
        positions < lengths[:, None] - 1,
        np.take_along_axis(internal_ids, internal_directions_out[..., None], axis=-1)[..., 0],
        -1)
    return DecodeResult(leaf_tag_ids.astype(np.int32), internal_tag_ids.astype(np.int32),
                        scores, lengths)


# --------------------------------------------------------------------------------------
# TensorFlow


def _tf():
    import tensorflow as tf  # Imported lazily: the NumPy decoder must not need TensorFlow.

    return tf


def decode(
    leaf_scores,
    internal_scores,
    lengths,
    leaf_directions,
    internal_directions,
    max_stack_depth: int = DEFAULT_MAX_STACK_DEPTH,
    check_lengths: bool = True,
) -> DecodeResult:
    """Finds the best valid tag sequence of every sentence of a padded batch, in TensorFlow.

    Same contract as `decode_numpy`. Usable eagerly, inside a tf.function, and inside an
    XLA-compiled function (`make_decoder` wraps it for both). The directions and the depth
    cap are constants baked into the graph. With static W and d, every shape is static.

    Under XLA the length check cannot raise (XLA drops assertions), so there lengths are
    clipped to 0..W; `make_decoder(jit_compile=True)` checks them outside the compiled part.

    Args:
      leaf_scores: float [B, W, NL].
      internal_scores: float [B, W, NI].
      lengths: int [B], 0 ≤ length ≤ W.
      leaf_directions: [NL] constant (NumPy or list) of 0/1.
      internal_directions: [NI] constant of 0/1.
      max_stack_depth: the stack depth cap d.
      check_lengths: whether to assert 0 ≤ lengths ≤ W (InvalidArgumentError otherwise).

    Returns:
      A DecodeResult of tensors: int32 ids and lengths, float32 (float64 for float64 input)
      scores.
    """
    tf = _tf()
    d = check_depth(max_stack_depth)
    leaf_scores = tf.convert_to_tensor(leaf_scores)
    internal_scores = tf.convert_to_tensor(internal_scores)
    dtype = tf.float64 if tf.float64 in (leaf_scores.dtype, internal_scores.dtype) \
        else tf.float32
    leaf_scores = tf.cast(leaf_scores, dtype)
    internal_scores = tf.cast(internal_scores, dtype)
    lengths = tf.cast(tf.convert_to_tensor(lengths), tf.int32)
    leaf_scores.shape.assert_has_rank(3)
    internal_scores.shape.assert_has_rank(3)
    lengths.shape.assert_has_rank(1)
    leaf_directions = _check_directions(leaf_directions, leaf_scores.shape[2],
                                        "leaf_directions")
    internal_directions = _check_directions(internal_directions, internal_scores.shape[2],
                                            "internal_directions")

    if not leaf_scores.shape[:2].is_compatible_with(internal_scores.shape[:2]):
        raise ValueError(f"shapes disagree: leaf_scores {leaf_scores.shape}, internal_scores "
                         f"{internal_scores.shape}")
    static_width = leaf_scores.shape[1]
    batch_size = tf.shape(leaf_scores)[0]
    width = tf.shape(leaf_scores)[1]
    if check_lengths:
        lengths = _checked_lengths(lengths, width)
    lengths = tf.clip_by_value(lengths, 0, width)

    if static_width == 0:
        empty = tf.zeros([batch_size, 0], tf.int32)
        return DecodeResult(empty, empty, tf.zeros([batch_size], dtype), lengths)
    if static_width is None:
        # A dynamic width may be 0 or 1, where the loops would have no step (and empty
        # TensorArrays of unknown shape cannot be stacked): pad to at least 2 inactive words.
        extra = tf.maximum(2 - width, 0)
        leaf_scores = tf.pad(leaf_scores, [[0, 0], [0, extra], [0, 0]])
        internal_scores = tf.pad(internal_scores, [[0, 0], [0, extra], [0, 0]])

    leaf_best, leaf_ids = _best_by_direction_tf(leaf_scores, leaf_directions)
    internal_best, internal_ids = _best_by_direction_tf(internal_scores, internal_directions)
    final_scores, chosen = _viterbi_tf(leaf_best, internal_best, lengths, d)

    positions = tf.range(tf.shape(leaf_best)[1])[None, :]
    # Direction of every leaf (the first is l) and every internal tag (the last is unused).
    leaf_dirs = tf.pad(chosen % 2, [[0, 0], [1, 0]])
    internal_dirs = tf.pad(chosen // 2, [[0, 0], [0, 1]])
    leaf_tag_ids = tf.where(positions < lengths[:, None],
                            tf.gather(leaf_ids, leaf_dirs, batch_dims=2), -1)
    internal_tag_ids = tf.where(positions < lengths[:, None] - 1,
                                tf.gather(internal_ids, internal_dirs, batch_dims=2), -1)
    if static_width is None:
        leaf_tag_ids = leaf_tag_ids[:, :width]
        internal_tag_ids = internal_tag_ids[:, :width]
    scores = tf.where(lengths > 0, final_scores, tf.zeros_like(final_scores))
    return DecodeResult(leaf_tag_ids, internal_tag_ids, scores, lengths)


def _checked_lengths(lengths, width):
    """Returns lengths after asserting 0 ≤ lengths ≤ width."""
    tf = _tf()
    with tf.control_dependencies([
            tf.debugging.assert_non_negative(lengths, message="decode: negative length"),
            tf.debugging.assert_less_equal(
                lengths, width,
                message="decode: a length exceeds the padded width W of the scores")]):
        return tf.identity(lengths)


def _nan_to_neg_inf_tf(x):
    tf = _tf()
    return tf.where(tf.math.is_nan(x), tf.constant(-np.inf, x.dtype), x)


def _best_by_direction_tf(scores, directions: np.ndarray):
    """Returns the best score and tag id per direction: [B, W, 2] float and int32.

    Masks the other direction with −inf rather than gathering columns (several times
    faster on CPU). NaN counts as −inf; a direction whose scores are all −inf reports its
    first id.
    """
    tf = _tf()
    usable = ~tf.math.is_nan(scores)
    neg_inf = tf.constant(-np.inf, scores.dtype)
    best_scores, best_ids = [], []
    for direction in (0, 1):
        masked = tf.where(usable & tf.constant(directions == direction), scores, neg_inf)
        best = tf.reduce_max(masked, axis=2)
        first_id = int(np.flatnonzero(directions == direction)[0])
        best_ids.append(tf.where(best == neg_inf, first_id,
                                 tf.argmax(masked, axis=2, output_type=tf.int32)))
        best_scores.append(best)
    return tf.stack(best_scores, axis=2), tf.stack(best_ids, axis=2)


def _viterbi_tf(leaf_best, internal_best, lengths, d: int):
    """Runs the DP and the backtrack; returns final scores [B] and moves [B, W−1]."""
    tf = _tf()
    dtype = leaf_best.dtype
    neg_inf = tf.constant(-np.inf, dtype)
    batch_size = tf.shape(leaf_best)[0]
    static_width = leaf_best.shape[1]
    num_steps = static_width - 1 if static_width is not None else tf.shape(leaf_best)[1] - 1

    # [W−1, B, 4]: step t scores internal t then leaf t+1, moves ordered L l, L r, R l, R r.
    step_scores = tf.reshape(
        internal_best[:, :-1, :, None] + leaf_best[:, 1:, None, :],
        [batch_size, -1, 4])
    step_scores = _nan_to_neg_inf_tf(step_scores)
    inactive = tf.range(tf.shape(step_scores)[1])[None, :] >= lengths[:, None] - 1
    keep_only = tf.constant(np.where(np.arange(4) == _KEEP_MOVE, 0.0, -np.inf), dtype)
    step_scores = tf.where(inactive[..., None], keep_only, step_scores)
    step_scores = tf.transpose(step_scores, [1, 0, 2])

    initial_state = tf.concat(
        [leaf_best[:, 0, :1], tf.fill([batch_size, d - 1], neg_inf)], axis=1)
    if static_width == 1:  # No step; XLA would reject the loops' empty slices.
        return initial_state[:, 0], tf.zeros([batch_size, 0], tf.int32)
    # Each loop iteration runs _STEPS_PER_ITERATION steps (a per-iteration cost dominates
    # short sentences). Keep-only steps in front round the steps up to a multiple: they
    # leave the initial state as it is, and their moves are dropped.
    k = _STEPS_PER_ITERATION
    num_chunks = (num_steps + k - 1) // k
    lead = num_chunks * k - num_steps
    step_scores = tf.concat(
        [tf.broadcast_to(keep_only, tf.stack([lead, batch_size, 4])), step_scores], axis=0)
    step_scores = tf.reshape(step_scores, tf.stack([num_chunks, k, batch_size, 4]))
    predecessor = tf.constant(_predecessor_index(d))
    fallback = tf.constant(_fallback_moves(d))
    static_batch_size = leaf_best.shape[0]  # None in a graph with a dynamic batch
    moves = tf.TensorArray(tf.int32, size=num_chunks, element_shape=[k, static_batch_size, d])

    def forward(c, state, moves):
        chunk_scores = step_scores[c]
        chunk_moves = []
        for i in range(k):
            padded = tf.pad(state, [[0, 0], [1, 1]], constant_values=-np.inf)
            candidates = tf.gather(padded, predecessor, axis=1) + chunk_scores[i][:, None, :]
            candidates = _nan_to_neg_inf_tf(candidates)
            state = tf.reduce_max(candidates, axis=2)
            best_move = tf.argmax(candidates, axis=2, output_type=tf.int32)
            chunk_moves.append(tf.where(state == neg_inf, fallback, best_move))
        return c + 1, state, moves.write(c, tf.stack(chunk_moves))

    _, state, moves = tf.while_loop(
        lambda c, *_: c < num_chunks, forward, (tf.constant(0), initial_state, moves),
        maximum_iterations=num_chunks)
    moves = moves.stack()  # [chunks, k, B, d]
    chosen = tf.TensorArray(tf.int32, size=num_chunks, element_shape=[k, static_batch_size])

    def backward(c, depth_index, chosen):
        chunk_moves = moves[c]
        chunk_chosen = [None] * k
        for i in reversed(range(k)):
            move = tf.gather(chunk_moves[i], depth_index, batch_dims=1)
            # depth change of move 2i + l is 1 − i − l.
            depth_index = depth_index - 1 + move // 2 + move % 2
            chunk_chosen[i] = move
        return c - 1, depth_index, chosen.write(c, tf.stack(chunk_chosen))

    _, _, chosen = tf.while_loop(
        lambda c, *_: c >= 0, backward,
        (num_chunks - 1, tf.zeros([batch_size], tf.int32), chosen),
        maximum_iterations=num_chunks)
    chosen = tf.reshape(chosen.stack(), tf.stack([num_chunks * k, batch_size]))[lead:]
    return state[:, 0], tf.transpose(chosen)


def make_decoder(
    leaf_directions,
    internal_directions,
    max_stack_depth: int = DEFAULT_MAX_STACK_DEPTH,
    jit_compile: bool = False,
):
    """Returns a tf.function `(leaf_scores, internal_scores, lengths) -> DecodeResult`.

    Args:
      leaf_directions: [NL] 0/1 directions of the leaf vocabulary.
      internal_directions: [NI] 0/1 directions of the internal vocabulary.
      max_stack_depth: the stack depth cap d.
      jit_compile: False for a plain graph with dynamic batch and width (the TF Serving
        path; one trace serves all shapes). True for XLA: traced and compiled once per
        input shape, so pad inputs to a few bucketed shapes (`pad_to_bucket`). The
        returned function checks lengths in an uncompiled wrapper, then calls the
        compiled decoder, its attribute `xla_function`.
    """
    tf = _tf()
    leaf_directions = _check_directions(leaf_directions, None, "leaf_directions")
    internal_directions = _check_directions(internal_directions, None, "internal_directions")
    d = check_depth(max_stack_depth)

    def run(leaf_scores, internal_scores, lengths):
        return decode(leaf_scores, internal_scores, lengths, leaf_directions,
                      internal_directions, d, check_lengths=not jit_compile)

    if not jit_compile:
        signature = [
            tf.TensorSpec([None, None, len(leaf_directions)], tf.float32, "leaf_scores"),
            tf.TensorSpec([None, None, len(internal_directions)], tf.float32,
                          "internal_scores"),
            tf.TensorSpec([None], tf.int32, "lengths"),
        ]
        return tf.function(run, input_signature=signature, autograph=False)

    compiled = tf.function(run, jit_compile=True, autograph=False)

    @tf.function(autograph=False)
    def checked(leaf_scores, internal_scores, lengths):
        lengths = tf.cast(lengths, tf.int32)
        lengths = _checked_lengths(lengths, tf.shape(leaf_scores)[1])
        return compiled(leaf_scores, internal_scores, lengths)

    checked.xla_function = compiled  # the compiled part, for inspection (compiler IR)
    return checked


# --------------------------------------------------------------------------------------
# Helpers


def bucket_size(size: int, buckets: Sequence[int]) -> int:
    """Returns the smallest bucket ≥ size; beyond the largest, the next multiple of it."""
    buckets = sorted(buckets)
    for bucket in buckets:
        if size <= bucket:
            return bucket
    largest = buckets[-1]
    return -(-size // largest) * largest


DEFAULT_WIDTH_BUCKETS = (8, 16, 32, 64, 128, 256, 512)
DEFAULT_BATCH_BUCKETS = (1, 8, 32, 64, 128)


def pad_to_bucket(
    leaf_scores,
    internal_scores,
    lengths,
    width_buckets: Sequence[int] = DEFAULT_WIDTH_BUCKETS,
    batch_buckets: Sequence[int] = DEFAULT_BATCH_BUCKETS,
):
    """Pads a batch (NumPy) to bucketed batch size and width, so XLA compiles few shapes.

    Extra words score 0, extra rows have length 0; decode, then keep the first B rows and
    W columns of the result (padding never changes the decoding of real words).

    Returns:
      (leaf_scores, internal_scores, lengths), padded.
    """
    leaf_scores = np.asarray(leaf_scores)
    internal_scores = np.asarray(internal_scores)
    lengths = np.asarray(lengths, dtype=np.int32)
    batch_size, width = leaf_scores.shape[:2]
    padded_batch = bucket_size(max(batch_size, 1), batch_buckets)
    padded_width = bucket_size(max(width, 1), width_buckets)
    pads = [(0, padded_batch - batch_size), (0, padded_width - width), (0, 0)]
    return (np.pad(leaf_scores, pads), np.pad(internal_scores, pads),
            np.pad(lengths, pads[0]))


def result_to_tags(
    result: DecodeResult,
    row: int,
    leaf_vocab: tags_lib.TagVocabulary,
    internal_vocab: tags_lib.TagVocabulary,
) -> tuple[list[str], list[str]]:
    """Returns one row of a result as tag strings: (n leaf tags, n − 1 internal tags)."""
    length = int(np.asarray(result.lengths)[row])
    leaf_ids = np.asarray(result.leaf_tag_ids)[row, :length]
    internal_ids = np.asarray(result.internal_tag_ids)[row, :max(length - 1, 0)]
    return ([leaf_vocab.tag(int(i)) for i in leaf_ids],
            [internal_vocab.tag(int(i)) for i in internal_ids])

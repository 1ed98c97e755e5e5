"""The best tree under span rules: a chart decoder over the tetra-tag scores, in TensorFlow.

A tag sequence's score is a sum over its binary tree's nodes: a node's tag sits at its
split fencepost (a word's leaf tag at the word), and its direction says whether the node
is a left or a right child. So the best valid sequence is also the best binary tree of a
chart (CKY) over spans × direction: a span's best subtree as a left or a right child is its
best split's node tag of that direction plus its left part's best as a left child and its
right part's best as a right child, and the whole sentence is a left child (the topmost
node takes an L, as in `tetra_tf.trees.tags`).

Span rules restrict the chart, and are what `tetra_tf.decode.constraints` makes of forced and
forbidden spans:

* a rule on the span [start, end] (first and last word) limits the tags a node over
  exactly that span may take (`leaf_allowed` for a word's span, `internal_allowed` for
  wider ones); several rules on one span all hold;
* a bracket rule also makes its span a node: no node of the tree may cross it. In a
  binary tree over n words (2n − 1 nodes, a largest set of non-crossing spans), a span no
  node crosses is itself a node.

The chart keeps the lattice decoder's stack-depth cap d, so that without rules it finds
`decoding.decode`'s tree. A derivation's stack, after a word, holds one entry more than the
right-then-left turns on the path from the root to that word (each such turn starts a
subtree that waits on the stack for its parent), so every chart cell also has a budget of
such turns, 0..d − 1. Its work is O(n³·d) per sentence (O(n²·d) memory), against the
lattice decoder's O(n·d): it runs only when rules are given.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tetra_tf.decode import decoding


class SpanRules(NamedTuple):
    """Per sentence, rules on spans of words (padding: start −1).

    Attributes:
      starts, ends: int32 [B, R], each rule's first and last word (inclusive).
      leaf_allowed: bool [B, R, NL], the leaf tags a one-word span's node may take.
      internal_allowed: bool [B, R, NI], the internal tags a wider span's node may take.
      brackets: bool [B, R], whether the span must be a node (no node crossing it).
    """

    starts: tf.Tensor
    ends: tf.Tensor
    leaf_allowed: tf.Tensor
    internal_allowed: tf.Tensor
    brackets: tf.Tensor


class ChartResult(NamedTuple):
    """The best tag sequence of each sentence under its rules.

    Attributes:
      leaf_tag_ids, internal_tag_ids: int32 [B, W], as `decoding.DecodeResult`'s; −1 for
        padding and for sentences no tree satisfies.
      scores: [B], the chosen tags' total score; −inf where no tree satisfies the rules.
      lengths: int32 [B].
      satisfied: bool [B], whether some tree satisfies the rules (always for no words).
    """

    leaf_tag_ids: tf.Tensor
    internal_tag_ids: tf.Tensor
    scores: tf.Tensor
    lengths: tf.Tensor
    satisfied: tf.Tensor


def no_rules(batch_size: tf.Tensor, num_leaf_tags: int, num_internal_tags: int) -> SpanRules:
    """Rules that restrict nothing (zero rules per sentence)."""
    return SpanRules(tf.zeros([batch_size, 0], tf.int32), tf.zeros([batch_size, 0], tf.int32),
                     tf.zeros([batch_size, 0, num_leaf_tags], tf.bool),
                     tf.zeros([batch_size, 0, num_internal_tags], tf.bool),
                     tf.zeros([batch_size, 0], tf.bool))


def chart_decode(leaf_scores: tf.Tensor, internal_scores: tf.Tensor, lengths: tf.Tensor,
                 leaf_directions, internal_directions, rules: SpanRules,
                 max_stack_depth: int) -> ChartResult:
    """Finds each sentence's best tree of stack depth ≤ d whose nodes satisfy its rules.

    Args:
      leaf_scores: float [B, W, NL], finite per-word scores over the leaf tags.
      internal_scores: float [B, W, NI], entry i for the fencepost after word i.
      lengths: int32 [B], words per sentence.
      leaf_directions, internal_directions: 0 (left) / 1 (right) per tag
        (`TagVocabulary.directions()`).
      rules: the sentences' `SpanRules`; a rule outside its sentence's words is ignored
        (`tetra_tf.decode.constraints` refuses those before).
      max_stack_depth: the stack depth cap d, as for `decoding.decode`.

    Returns:
      A `ChartResult`.
    """
    leaf_scores = tf.convert_to_tensor(leaf_scores)
    internal_scores = tf.convert_to_tensor(internal_scores, leaf_scores.dtype)
    lengths = tf.convert_to_tensor(lengths, tf.int32)
    width = tf.shape(leaf_scores)[1]
    # Work on a width of at least 1, so that the chart has a row of words.
    padded = tf.maximum(width, 1)
    pad = [[0, 0], [0, padded - width], [0, 0]]
    leaf_scores = tf.pad(leaf_scores, pad)
    internal_scores = tf.pad(internal_scores, pad)

    in_sentence = ((rules.starts >= 0) & (rules.starts <= rules.ends)
                   & (rules.ends < lengths[:, None]))
    leaf_table, leaf_ids = _rule_tables(leaf_scores, leaf_directions, rules.leaf_allowed,
                                        rules, in_sentence)
    internal_table, internal_ids = _rule_tables(internal_scores, internal_directions,
                                                rules.internal_allowed, rules, in_sentence)
    cell_rules = _cell_rules(rules, in_sentence, padded)
    crossing = _crossing(rules, in_sentence & rules.brackets, padded)

    budget = decoding.check_depth(max_stack_depth) - 1
    best, splits = _fill_chart(leaf_table, internal_table, cell_rules, crossing, padded,
                               budget)
    batch_size = tf.shape(lengths)[0]
    rows = tf.range(batch_size)
    zeros = tf.zeros_like(rows)
    root = tf.gather_nd(best, tf.stack([tf.maximum(lengths - 1, 0), rows, zeros, zeros,
                                        zeros + budget], axis=1))
    has_words = lengths > 0
    satisfied = ~has_words | (root > -np.inf)
    scores = tf.where(has_words, root, tf.zeros_like(root))
    leaf_tag_ids, internal_tag_ids = _backtrack(splits, leaf_ids, internal_ids, cell_rules,
                                                lengths, has_words & satisfied, padded, budget)
    return ChartResult(leaf_tag_ids[:, :width], internal_tag_ids[:, :width], scores, lengths,
                       satisfied)


def _rule_tables(scores: tf.Tensor, directions, allowed: tf.Tensor, rules: SpanRules,
                 in_sentence: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Per rule (0: none), position and direction, the best allowed tag's score and id:
    [B, 1 + R, W, 2] each. A rule allows what every rule on its span allows."""
    batch_size, num_rules = tf.shape(allowed)[0], tf.shape(allowed)[1]
    num_tags = tf.shape(scores)[2]
    # Rules on one span of one sentence share a key (a rule outside its sentence has its own):
    # each takes the AND of its key's allowed tags, in O(rules · tags).
    width = tf.cast(tf.shape(scores)[1], tf.int64) + 1
    rows = tf.cast(tf.range(batch_size), tf.int64)[:, None]
    keys = tf.where(in_sentence,
                    (rows * width + tf.cast(rules.starts, tf.int64)) * width
                    + tf.cast(rules.ends, tf.int64),
                    -1 - tf.reshape(tf.range(tf.cast(batch_size * num_rules, tf.int64)),
                                    [batch_size, num_rules]))
    unique_keys, groups = tf.unique(tf.reshape(keys, [-1]))
    flat = tf.reshape(tf.cast(allowed, tf.int32), [-1, num_tags])
    combined = tf.math.unsorted_segment_min(flat, groups, tf.size(unique_keys))
    allowed = tf.reshape(tf.gather(combined, groups) > 0, [batch_size, num_rules, num_tags])
    allowed = tf.concat([tf.ones([batch_size, 1, num_tags], tf.bool), allowed],
                        axis=1)  # [B, 1 + R, V]
    directions = tf.constant(np.asarray(directions), tf.int32)
    best, ids = [], []
    for direction in (0, 1):
        mask = allowed & tf.equal(directions, direction)[None, None, :]
        masked = tf.where(mask[:, :, None, :], scores[:, None, :, :],
                          tf.constant(-np.inf, scores.dtype))  # [B, 1 + R, W, V]
        best.append(tf.reduce_max(masked, axis=-1))
        ids.append(tf.argmax(masked, axis=-1, output_type=tf.int32))
    return tf.stack(best, axis=-1), tf.stack(ids, axis=-1)


def _cell_rules(rules: SpanRules, in_sentence: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """int32 [B, W, W]: for the span of width w + 1 starting at word a, 1 + the index of a
    rule on it (0: none)."""
    batch_size, num_rules = tf.shape(rules.starts)[0], tf.shape(rules.starts)[1]
    rows = tf.broadcast_to(tf.range(batch_size)[:, None], [batch_size, num_rules])
    where = tf.where(in_sentence)
    indices = tf.stack([tf.gather_nd(rows, where),
                        tf.gather_nd(rules.ends - rules.starts, where),
                        tf.gather_nd(rules.starts, where)], axis=1)
    return tf.tensor_scatter_nd_max(tf.zeros([batch_size, width, width], tf.int32), indices,
                                    tf.cast(where[:, 1], tf.int32) + 1)


def _crossing(rules: SpanRules, brackets: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """bool [B, W, W]: whether the span of width w + 1 starting at word a crosses a bracket
    rule's span, by counting brackets in 2-D prefix sums over (start, end): O(B·W²) for
    any number of brackets."""
    batch_size, num_rules = tf.shape(rules.starts)[0], tf.shape(rules.starts)[1]
    rows = tf.broadcast_to(tf.range(batch_size)[:, None], [batch_size, num_rules])
    where = tf.where(brackets)
    counts = tf.scatter_nd(
        tf.stack([tf.gather_nd(rows, where), tf.gather_nd(rules.starts, where),
                  tf.gather_nd(rules.ends, where)], axis=1),
        tf.ones([tf.shape(where)[0]], tf.int32), [batch_size, width, width])  # [b, i, j]
    # Brackets (i, j) with i ≤ row and j ≥ column (columns 0..W, W empty), and with
    # i ≤ row and j ≤ column.
    starts_up_to = tf.cumsum(counts, axis=1)
    ends_from = tf.pad(tf.cumsum(starts_up_to, axis=2, reverse=True), [[0, 0], [0, 0], [0, 1]])
    ends_up_to = tf.cumsum(starts_up_to, axis=2)
    first = tf.broadcast_to(tf.range(width)[None, :], [width, width])  # a, per [w, a]
    last = tf.minimum(first + tf.range(width)[:, None], width - 1)     # e = a + w
    before = tf.maximum(first - 1, 0)

    def at(grid, row, column):
        indices = tf.broadcast_to(tf.stack([row, column], axis=-1)[None],
                                  [batch_size, width, width, 2])
        return tf.gather_nd(grid, indices, batch_dims=1)

    # a < i ≤ e < j: starts in (a, e], ends after e.
    inside_then_out = at(ends_from, last, last + 1) - at(ends_from, first, last + 1)
    # i < a ≤ j < e: starts before a, ends in [a, e).
    before_then_in = tf.where(
        first > 0,
        at(ends_up_to, before, tf.maximum(last - 1, 0)) - at(ends_up_to, before, before), 0)
    return (inside_then_out > 0) | (before_then_in > 0)


def _fill_chart(leaf_table: tf.Tensor, internal_table: tf.Tensor, cell_rules: tf.Tensor,
                crossing: tf.Tensor, width: tf.Tensor, budget: int
                ) -> tuple[tf.Tensor, tf.Tensor]:
    """The chart, bottom up: best [W, B, W, 2, budget + 1] (span width − 1, sentence,
    start, direction, most right-then-left turns below) and the best split (the left
    part's width) of each, int32 of the same shape."""
    batch_size = tf.shape(leaf_table)[0]
    dtype = leaf_table.dtype
    neg_inf = tf.constant(-np.inf, dtype)
    starts = tf.range(width)
    budgets = budget + 1

    def at_rules(table, rule, positions):
        """table[b, rule[b, a], positions[a, ...], :] for every b, a."""
        shape = tf.shape(positions)
        rule = tf.broadcast_to(
            tf.reshape(rule, tf.concat([[batch_size, width], tf.ones_like(shape[1:])], 0)),
            tf.concat([[batch_size], shape], 0))
        positions = tf.broadcast_to(positions[None], tf.shape(rule))
        return tf.gather_nd(table, tf.stack([rule, positions], axis=-1), batch_dims=1)

    # A word is a leaf: no turns below it, whatever its budget.
    words = at_rules(leaf_table, cell_rules[:, 0, :], starts)  # [B, W, 2]
    words = tf.tile(words[..., None], [1, 1, 1, budgets])
    shape = tf.TensorShape([None, None, 2, budgets])
    best = tf.TensorArray(dtype, size=width, element_shape=shape)
    splits = tf.TensorArray(tf.int32, size=width, element_shape=shape)
    best = best.write(0, words)
    splits = splits.write(0, tf.zeros_like(words, tf.int32))
    no_budget = tf.fill([1, 1, 1, 1], neg_inf)

    def fill(span, best, splits):
        # Spans of span + 1 words; a left part of k = 1..span words.
        lefts = tf.range(1, span + 1)
        # [B, W, K, budget]: the left part as a left child, the right part as a right one.
        left = tf.transpose(best.gather(lefts - 1), [1, 2, 0, 3, 4])[:, :, :, 0]
        right_parts = tf.transpose(best.gather(span - lefts), [1, 2, 0, 3, 4])[:, :, :, 1]
        right_starts = tf.minimum(starts[:, None] + lefts[None, :], width - 1)  # [W, K]
        right = tf.gather_nd(
            right_parts,
            tf.broadcast_to(tf.stack([right_starts, tf.broadcast_to(
                tf.range(span)[None, :], tf.shape(right_starts))], axis=-1)[None],
                tf.concat([[batch_size], tf.shape(right_starts), [2]], 0)),
            batch_dims=1)
        # A right child's left part starts a subtree of its own: one turn more.
        left_of_right_child = tf.concat([
            tf.broadcast_to(no_budget, tf.concat([tf.shape(left)[:3], [1]], 0)),
            left[..., :-1]], axis=-1)
        children = tf.stack([left, left_of_right_child], axis=3) + right[:, :, :, None]
        fenceposts = tf.minimum(right_starts - 1, width - 1)
        node = at_rules(internal_table, cell_rules[:, span, :], fenceposts)  # [B, W, K, 2]
        candidates = children + node[..., None]                             # [B, W, K, 2, M]
        split = tf.argmax(candidates, axis=2, output_type=tf.int32) + 1     # [B, W, 2, M]
        value = tf.reduce_max(candidates, axis=2)
        value = tf.where(crossing[:, span, :, None, None], neg_inf, value)
        return span + 1, best.write(span, value), splits.write(span, split)

    _, best, splits = tf.while_loop(lambda span, *_: span < width, fill,
                                    (tf.constant(1), best, splits))
    return best.stack(), splits.stack()


def _backtrack(splits: tf.Tensor, leaf_ids: tf.Tensor, internal_ids: tf.Tensor,
               cell_rules: tf.Tensor, lengths: tf.Tensor, found: tf.Tensor,
               width: tf.Tensor, budget: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The best tree's tag ids, top down: each sentence pops one node per step from its
    own stack of (start, words, direction, budget), 2W − 1 steps for all."""
    batch_size = tf.shape(lengths)[0]
    rows = tf.range(batch_size)
    positions = tf.range(width)[None, :]
    slots = tf.range(width + 1)[None, :]
    empty = tf.zeros([batch_size, width + 1], tf.int32)
    stack = {"start": empty,
             "words": tf.where(tf.equal(slots, 0), lengths[:, None], 0),
             "direction": empty,
             "budget": tf.where(tf.equal(slots, 0), budget, empty)}
    depth = tf.cast(found, tf.int32)
    no_tag = -tf.ones([batch_size, width], tf.int32)

    def step(i, depth, stack, leaf_tags, internal_tags):
        active = depth > 0
        top = tf.maximum(depth - 1, 0)
        start, words, direction, turns = (tf.gather(stack[key], top, batch_dims=1)
                                          for key in ("start", "words", "direction", "budget"))
        words = tf.maximum(words, 1)
        rule = tf.gather_nd(cell_rules, tf.stack([rows, words - 1, start], axis=1))
        is_word = active & tf.equal(words, 1)
        is_node = active & (words > 1)
        left = tf.gather_nd(splits, tf.stack([words - 1, rows, start, direction, turns],
                                             axis=1))
        fencepost = tf.where(is_node, start + left - 1, 0)
        leaf_id = tf.gather_nd(leaf_ids, tf.stack([rows, rule, start, direction], axis=1))
        internal_id = tf.gather_nd(internal_ids,
                                   tf.stack([rows, rule, fencepost, direction], axis=1))
        leaf_tags = tf.where(is_word[:, None] & tf.equal(positions, start[:, None]),
                             leaf_id[:, None], leaf_tags)
        internal_tags = tf.where(is_node[:, None] & tf.equal(positions, fencepost[:, None]),
                                 internal_id[:, None], internal_tags)
        # A node's top slot becomes its right part (a right child), the next its left part
        # (a left child, one turn less if the node is a right child).
        at_top = is_node[:, None] & tf.equal(slots, top[:, None])
        above = is_node[:, None] & tf.equal(slots, top[:, None] + 1)
        parts = {"start": (start + left, start), "words": (words - left, left),
                 "direction": (tf.ones_like(start), tf.zeros_like(start)),
                 "budget": (turns, turns - direction)}
        stack = {key: tf.where(at_top, right[:, None], tf.where(above, left_[:, None],
                                                                 stack[key]))
                 for key, (right, left_) in parts.items()}
        depth = depth + tf.cast(is_node, tf.int32) - tf.cast(is_word, tf.int32)
        return i + 1, depth, stack, leaf_tags, internal_tags

    outputs = tf.while_loop(lambda i, *_: i < 2 * width - 1, step,
                            (tf.constant(0), depth, stack, no_tag, no_tag))
    return outputs[-2], outputs[-1]

"""Tags → bracketed tree strings inside the graph: the SavedModel's twin of
`tags.tags_to_tree`, so that clients in any language get trees from TF Serving.

It builds exactly the trees `tags.tags_to_tree` builds (tests/test_export.py checks it on
random and treebank trees), from the decoded tag ids, with words escaped so that every
tree reads back with one leaf per input word.
"""

from __future__ import annotations

import re


import numpy as np
import tensorflow as tf

from tetra_tf.contract import sentences
from tetra_tf.trees import tags as tags_lib
from tetra_tf.trees import treebank
from tetra_tf.trees.tags import TagVocabularies, TagVocabulary


def _chain_opens(vocab: TagVocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Per tag id: the brackets its labels open ("(S (VP ", "" if none) and their count."""
    opens, counts = [], []
    for tag in vocab.tags:
        label = tags_lib.tag_label(tag)
        chain = tags_lib.split_chain(label)
        opens.append("".join(f"({name} " for name in chain))
        counts.append(len(chain))
    return np.array(opens, dtype=object), np.array(counts, dtype=np.int32)


def escape_tree_words(words: tf.Tensor) -> tf.Tensor:
    """Words as leaves of a bracketed tree, by `sentences.escape_leaf`'s table: each of the
    six brackets → its PTB escape ("(" → -LRB-, "[" → -LSB- ...).

    Words hold no whitespace (the signatures split on it, or refuse it), so each escaped
    word reads back as exactly one leaf. Only the tree string is escaped; the ``words``
    output keeps the input verbatim.
    """
    for bracket, escape in sentences.PTB_BRACKET_ESCAPES.items():
        words = tf.strings.regex_replace(words, re.escape(bracket), escape)
    return words


def _subtree_spans(leaf_depth: tf.Tensor, internal_depth: tf.Tensor, is_left_leaf: tf.Tensor,
                   is_right_leaf: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Per fencepost j [B, W]: the last `l` leaf k ≤ j at leaf j's depth (−1 if none), and
    the first `r` leaf k > j at the depth after node j (W if none).

    Leaves are keyed (sentence, depth, position) in one int64 and sorted; each lookup is a
    binary search for the query's own key, then a check that the neighbour found has the
    same (sentence, depth).
    """
    batch_size, width = tf.shape(leaf_depth)[0], tf.shape(leaf_depth)[1]
    positions = tf.cast(tf.range(width), tf.int64)[None, :]
    rows = tf.cast(tf.range(batch_size), tf.int64)[:, None]
    span = tf.cast(width, tf.int64) + 1
    depths = 2 * span + 1  # depths lie in [−W, W]; shifted by W + 1 below

    def group(depth):
        return rows * depths + tf.cast(depth, tf.int64) + span

    never = tf.constant(np.iinfo(np.int64).max, tf.int64)
    left_keys = tf.sort(tf.reshape(
        tf.where(is_left_leaf, group(leaf_depth) * span + positions, never), [1, -1]))
    right_keys = tf.sort(tf.reshape(
        tf.where(is_right_leaf, group(leaf_depth) * span + positions, never), [1, -1]))
    count = tf.shape(left_keys)[1]

    start_queries = tf.reshape(group(leaf_depth) * span + positions, [1, -1])
    found = tf.searchsorted(left_keys, start_queries, side="right", out_type=tf.int32) - 1
    key = tf.gather(left_keys[0], tf.maximum(found[0], 0))
    hit = (found[0] >= 0) & tf.equal(key // span, start_queries[0] // span)
    starts = tf.where(hit, tf.cast(key % span, tf.int32), -1)

    end_queries = tf.reshape(group(internal_depth) * span + positions, [1, -1])
    found = tf.searchsorted(right_keys, end_queries, side="right", out_type=tf.int32)
    key = tf.gather(right_keys[0], tf.minimum(found[0], count - 1))
    hit = (found[0] < count) & tf.equal(key // span, end_queries[0] // span)
    ends = tf.where(hit, tf.cast(key % span, tf.int32), width)
    return tf.reshape(starts, [batch_size, width]), tf.reshape(ends, [batch_size, width])


class TreeWriter:
    """Builds bracketed trees from tag ids in-graph, as `tags.tags_to_tree` would.

    Instead of replaying the stack, every constituent's span is read off the derivation's
    stack depths: an internal node at fencepost j starts at the last `l` leaf k ≤ j whose
    depth equals leaf j's depth (the push that created the subtree on top), and ends at the
    first `r` leaf k > j whose depth equals the depth after node j (the leaf that completes
    the stack entry holding it). Each word then gets the brackets opening before it
    (outermost first, which is decreasing fencepost order among nodes sharing a start)
    and the count of brackets closing after it, and the pieces are joined. The "last/first
    leaf at equal depth" lookups are binary searches over the leaves sorted by (sentence,
    depth, position): O(B·W·log(B·W)) work and memory linear in the words, no loop, so a
    sentence of tens of thousands of words costs what it should.

    Words are escaped by the sentence contract's table (see `escape_tree_words`), so that
    every tree reads back with nltk.Tree.fromstring with one leaf per word.

    Unlabelled (binarization) nodes open nothing and vanish; "A+B" chains open "(A (B ".
    """

    def __init__(self, vocabs: TagVocabularies, root_label: str = treebank.ROOT_LABEL):
        self._leaf_opens, self._leaf_counts = _chain_opens(vocabs.leaf)
        self._internal_opens, self._internal_counts = _chain_opens(vocabs.internal)
        self._leaf_directions = vocabs.leaf.directions()
        self._internal_directions = vocabs.internal.directions()
        self._root_open = f"({root_label} "

    def node_spans(self, leaf_tag_ids: tf.Tensor, internal_tag_ids: tf.Tensor,
                   lengths: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The first and last word of each fencepost's node, int32 [B, W] each (entries past
        a row's last fencepost are meaningless).

        Args:
          leaf_tag_ids, internal_tag_ids: int32 [B, W], a valid derivation per row.
          lengths: int32 [B].
        """
        positions = tf.range(tf.shape(leaf_tag_ids)[1])
        is_word = positions[None, :] < lengths[:, None]
        is_fencepost = positions[None, :] < lengths[:, None] - 1
        leaf_right = tf.gather(self._leaf_directions, tf.where(is_word, leaf_tag_ids, 0))
        internal_right = tf.gather(self._internal_directions,
                                   tf.where(is_fencepost, internal_tag_ids, 0))
        # Stack depth after each leaf action (l: +1, r: 0) and each internal one (L: 0, R: −1).
        leaf_change = tf.where(is_word, 1 - leaf_right, 0)
        internal_change = tf.where(is_fencepost, -internal_right, 0)
        leaf_depth = (tf.cumsum(leaf_change, axis=1)
                      + tf.cumsum(internal_change, axis=1, exclusive=True))
        internal_depth = leaf_depth + internal_change
        is_left_leaf = is_word & tf.equal(leaf_right, 0)
        is_right_leaf = is_word & tf.equal(leaf_right, 1)
        return _subtree_spans(leaf_depth, internal_depth, is_left_leaf, is_right_leaf)

    def in_bracket_order(self, leaf_values: tf.Tensor, internal_values: tf.Tensor,
                         leaf_tag_ids: tf.Tensor, internal_tag_ids: tf.Tensor,
                         lengths: tf.Tensor) -> tf.RaggedTensor:
        """Per-constituent values, in the order the tree string opens their brackets.

        Args:
          leaf_values, internal_values: [B, W, C], entry c for the c-th label of the chain
            of a word's (a fencepost's) tag.
          leaf_tag_ids, internal_tag_ids, lengths: the derivation, as for `__call__`.

        Returns:
          [B, (constituents)]: one value per bracket of the tree but the root's and the
          parts of speech', in the tree string's order (a preorder walk).
        """
        batch_size, width = tf.shape(leaf_tag_ids)[0], tf.shape(leaf_tag_ids)[1]
        longest = tf.shape(leaf_values)[2]
        positions = tf.range(width)[None, :]
        is_word = positions < lengths[:, None]
        is_fencepost = positions < lengths[:, None] - 1
        starts, _ = self.node_spans(leaf_tag_ids, internal_tag_ids, lengths)
        chain = tf.range(longest)[None, None, :]
        leaf_counts = tf.gather(self._leaf_counts, tf.where(is_word, leaf_tag_ids, 0))
        internal_counts = tf.gather(self._internal_counts,
                                    tf.where(is_fencepost, internal_tag_ids, 0))
        # Sort key: (row, start word, internal before leaf, fencepost descending, chain).
        rows = tf.cast(tf.range(batch_size), tf.int64)[:, None, None]
        wide, deep = tf.cast(width, tf.int64), tf.cast(longest, tf.int64)

        def key(word, kind, fencepost):
            return ((((rows * wide + tf.cast(word, tf.int64)[..., None]) * 2 + kind) * wide
                     + tf.cast(fencepost, tf.int64)[..., None]) * deep
                    + tf.cast(chain, tf.int64))

        internal_keys = key(starts, 0, width - 1 - positions)
        leaf_keys = key(tf.broadcast_to(positions, tf.shape(leaf_tag_ids)), 1,
                        tf.zeros_like(leaf_tag_ids))
        present = tf.concat([
            tf.reshape((chain < internal_counts[..., None]) & is_fencepost[..., None], [-1]),
            tf.reshape((chain < leaf_counts[..., None]) & is_word[..., None], [-1])], axis=0)
        keys = tf.boolean_mask(tf.concat([tf.reshape(internal_keys, [-1]),
                                          tf.reshape(leaf_keys, [-1])], axis=0), present)
        values = tf.boolean_mask(tf.concat([tf.reshape(internal_values, [-1]),
                                            tf.reshape(leaf_values, [-1])], axis=0), present)
        order = tf.argsort(keys, stable=True)
        per_row = tf.math.unsorted_segment_sum(
            tf.ones_like(keys, tf.int32), tf.cast(keys // (wide * 2 * wide * deep), tf.int32),
            batch_size)
        return tf.RaggedTensor.from_row_lengths(tf.gather(values, order), per_row,
                                                validate=False)

    def __call__(self, words: tf.Tensor, pos_tags: tf.Tensor, leaf_tag_ids: tf.Tensor,
                 internal_tag_ids: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
        """Returns the trees, tf.string [B] ("" for rows without words).

        Args:
          words, pos_tags: tf.string [B, W].
          leaf_tag_ids, internal_tag_ids: int32 [B, W], a valid derivation per row (the
            decoder's output); entries past a row's words are ignored.
          lengths: int32 [B].
        """
        batch_size, width = tf.shape(leaf_tag_ids)[0], tf.shape(leaf_tag_ids)[1]
        positions = tf.range(width)
        is_word = positions[None, :] < lengths[:, None]
        is_fencepost = positions[None, :] < lengths[:, None] - 1
        leaf_tag_ids = tf.where(is_word, leaf_tag_ids, 0)
        internal_tag_ids = tf.where(is_fencepost, internal_tag_ids, 0)
        starts, ends = self.node_spans(leaf_tag_ids, internal_tag_ids, lengths)

        # Segment b·W + word index collects per word; segment B·W is a sink for padding.
        num_segments = batch_size * width + 1
        row_offsets = tf.range(batch_size)[:, None] * width
        sink = batch_size * width
        start_segments = tf.where(is_fencepost, row_offsets + starts, sink)
        end_segments = tf.where(is_fencepost, row_offsets + ends, sink)
        internal_opens = tf.gather(self._internal_opens, internal_tag_ids)
        # Reversed, so that nodes sharing a start join outermost (rightmost fencepost) first.
        opens = tf.strings.unsorted_segment_join(
            tf.reshape(tf.reverse(internal_opens, [1]), [-1]),
            tf.reshape(tf.reverse(start_segments, [1]), [-1]), num_segments)[:-1]
        closes = tf.math.unsorted_segment_sum(
            tf.reshape(tf.gather(self._internal_counts, internal_tag_ids), [-1]),
            tf.reshape(end_segments, [-1]), num_segments)[:-1]
        # Plus the word's own leaf chain and its preterminal.
        closes += tf.reshape(
            tf.where(is_word, tf.gather(self._leaf_counts, leaf_tag_ids) + 1, 0), [-1])
        close_strings = tf.strings.reduce_join(
            tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(closes)], ")"), closes),
            axis=1)

        pieces = tf.strings.join([
            tf.reshape(opens, [batch_size, width]),
            tf.gather(self._leaf_opens, leaf_tag_ids),
            "(", pos_tags, " ", escape_tree_words(words),
            tf.reshape(close_strings, [batch_size, width])])
        body = tf.strings.reduce_join(
            tf.RaggedTensor.from_tensor(pieces, lengths=lengths), axis=1, separator=" ")
        return tf.where(lengths > 0, tf.strings.join([self._root_open, body, ")"]), "")



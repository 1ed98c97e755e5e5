"""Tests of the tetra-tag decoders: brute force, gold recovery, edge cases, non-finite scores."""

import functools
import itertools

import numpy as np
import pytest
import tensorflow as tf

from tetra_tf.decode import decoding
from tetra_tf.trees import tags as tags_lib
from tetra_tf.trees import treebank

# Small vocabularies with labels: two l/r or L/R ids per direction, interleaved.
LEAF_DIRECTIONS = np.array([1, 0, 1, 0, 0])
INTERNAL_DIRECTIONS = np.array([0, 1, 1, 0])
WIDTH = 8
BATCH = 16
DEPTHS = (1, 2, 3, 8)

# Depth change of each action, by (is internal, direction): l +1, r 0, L 0, R −1.
_CHANGE = {(False, 0): 1, (False, 1): 0, (True, 0): 0, (True, 1): -1}


# ----------------------------------------------------------------------------------------
# Brute force and checks, written from the rules (not from the decoder).


@functools.lru_cache(maxsize=None)
def valid_direction_sequences(n: int, d: int) -> np.ndarray:
    """All valid sequences of 2n−1 directions (0 left, 1 right), leaf first: [S, 2n−1]."""
    found = []

    def extend(prefix, depth):
        if len(prefix) == 2 * n - 1:
            if depth == 1:
                found.append(prefix)
            return
        is_internal = len(prefix) % 2 == 1
        for direction in (0, 1):
            new_depth = depth + _CHANGE[(is_internal, direction)]
            if 1 <= new_depth <= d:
                extend(prefix + (direction,), new_depth)

    extend((), 0)
    return np.array(found, dtype=np.int64).reshape(len(found), 2 * n - 1)


def is_valid(leaf_dirs, internal_dirs, d: int) -> bool:
    """Checks a sequence of directions against the rules by simulating the depth."""
    n = len(leaf_dirs)
    if n == 0 or len(internal_dirs) != n - 1:
        return False
    depth = 0
    for i in range(n):
        depth += _CHANGE[(False, leaf_dirs[i])]
        if not 1 <= depth <= d:
            return False
        if i < n - 1:
            depth += _CHANGE[(True, internal_dirs[i])]
            if not 1 <= depth <= d:
                return False
    return depth == 1


def combine(values: np.ndarray, axis=-1) -> np.ndarray:
    """Sums scores as documented: NaN or −inf anywhere → −inf, else +inf wins."""
    values = np.asarray(values, dtype=np.float64)
    forbidden = (np.isnan(values) | (values == -np.inf)).any(axis=axis)
    boosted = (values == np.inf).any(axis=axis)
    finite = np.where(np.isfinite(values), values, 0).sum(axis=axis)
    return np.where(forbidden, -np.inf, np.where(boosted, np.inf, finite))


def best_by_direction(scores: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """[n, 2]: the best score among the ids of each direction (NaN counts as −inf)."""
    scores = np.where(np.isnan(scores), -np.inf, scores.astype(np.float64))
    return np.stack([scores[:, directions == k].max(axis=1) for k in (0, 1)], axis=1)


def brute_force_best(leaf, internal, n: int, d: int) -> float:
    """The best total score over all valid sequences, labels collapsed per direction."""
    sequences = valid_direction_sequences(n, d)
    leaf_best = best_by_direction(leaf[:n], LEAF_DIRECTIONS)
    internal_best = best_by_direction(internal[:n - 1], INTERNAL_DIRECTIONS)
    per_action = np.empty(sequences.shape)
    per_action[:, 0::2] = leaf_best[np.arange(n), sequences[:, 0::2]]
    per_action[:, 1::2] = internal_best[np.arange(n - 1), sequences[:, 1::2]]
    return float(combine(per_action).max())


def sequence_score(leaf, internal, leaf_ids, internal_ids) -> float:
    n = len(leaf_ids)
    values = [leaf[i, leaf_ids[i]] for i in range(n)]
    values += [internal[i, internal_ids[i]] for i in range(n - 1)]
    return float(combine(np.array(values)))


def check_row(result, row, leaf, internal, d, leaf_dirs=LEAF_DIRECTIONS,
              internal_dirs=INTERNAL_DIRECTIONS, expected_best=None):
    """Checks one row: padding, validity, and that it achieves the brute-force best."""
    n = int(result.lengths[row])
    leaf_ids = np.asarray(result.leaf_tag_ids[row])
    internal_ids = np.asarray(result.internal_tag_ids[row])
    assert (leaf_ids[n:] == -1).all()
    assert (internal_ids[max(n - 1, 0):] == -1).all()
    if n == 0:
        assert float(result.scores[row]) == 0
        return
    leaf_ids, internal_ids = leaf_ids[:n], internal_ids[:n - 1]
    assert ((leaf_ids >= 0) & (leaf_ids < len(leaf_dirs))).all()
    assert ((internal_ids >= 0) & (internal_ids < len(internal_dirs))).all()
    assert is_valid(leaf_dirs[leaf_ids], internal_dirs[internal_ids], d)
    if expected_best is None:
        expected_best = brute_force_best(leaf[row], internal[row], n, d)
    achieved = sequence_score(leaf[row], internal[row], leaf_ids, internal_ids)
    reported = float(result.scores[row])
    np.testing.assert_allclose(achieved, expected_best, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(reported, expected_best, rtol=1e-5, atol=1e-5)


def to_numpy(result) -> decoding.DecodeResult:
    return decoding.DecodeResult(*(np.asarray(x) for x in result))


def assert_same(a, b):
    a, b = to_numpy(a), to_numpy(b)
    np.testing.assert_array_equal(a.leaf_tag_ids, b.leaf_tag_ids)
    np.testing.assert_array_equal(a.internal_tag_ids, b.internal_tag_ids)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------------
# Decoders shared across tests, so each traces or compiles once per shape.


@functools.lru_cache(maxsize=None)
def graph_decoder(d: int):
    return decoding.make_decoder(LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, d, jit_compile=False)


@functools.lru_cache(maxsize=None)
def xla_decoder(d: int):
    return decoding.make_decoder(LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, d, jit_compile=True)


@functools.lru_cache(maxsize=None)
def static_graph_decoder(d: int):
    """A plain graph traced at concrete shapes (static W), no XLA."""
    @tf.function
    def decoder(leaf, internal, lengths):
        return decoding.decode(leaf, internal, lengths, LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, d)

    return decoder


def assert_compiled_with_xla(decoder, leaf, internal, lengths):
    """The decoder's graph calls its XLA part, and XLA compiles that part to optimized HLO."""
    graph = decoder.get_concrete_function(leaf, internal, lengths).graph
    calls = [op for op in graph.get_operations()
             if op.type in ("PartitionedCall", "StatefulPartitionedCall")]
    assert [op.node_def.attr["_XlaMustCompile"].b for op in calls] == [True]
    hlo = decoder.xla_function.experimental_get_compiler_ir(leaf, internal, lengths)(
        stage="optimized_hlo")
    assert hlo.startswith("HloModule") and "while" in hlo


def test_xla_decoder_compiles_with_xla():
    leaf, internal, lengths = random_batch(np.random.default_rng(0), [8, 3, 0, 1])
    assert_compiled_with_xla(xla_decoder(8), leaf, internal, lengths)
    # The plain-graph decoder (TF Serving's path) has no XLA part.
    graph = graph_decoder(8).get_concrete_function(leaf, internal, lengths).graph
    assert not any(op.node_def.attr["_XlaMustCompile"].b for op in graph.get_operations())


def all_decoders(leaf, internal, lengths, d):
    """Runs the NumPy, graph, static-graph and XLA decoders; returns their results."""
    leaf = np.asarray(leaf, np.float32)
    internal = np.asarray(internal, np.float32)
    lengths = np.asarray(lengths, np.int32)
    results = {"numpy": decoding.decode_numpy(leaf, internal, lengths, LEAF_DIRECTIONS,
                                              INTERNAL_DIRECTIONS, d)}
    for name, decoder in (("graph", graph_decoder(d)), ("static", static_graph_decoder(d)),
                          ("xla", xla_decoder(d))):
        results[name] = to_numpy(decoder(leaf, internal, lengths))
    return results


def random_batch(rng, lengths, width=WIDTH):
    lengths = np.asarray(lengths, np.int32)
    leaf = rng.normal(size=(len(lengths), width, len(LEAF_DIRECTIONS))).astype(np.float32)
    internal = rng.normal(size=(len(lengths), width, len(INTERNAL_DIRECTIONS)))
    return leaf, internal.astype(np.float32), lengths


# ----------------------------------------------------------------------------------------
# Exactness against brute force.


def test_brute_force_counts_match_the_rules():
    # Labels collapsed, valid sequences are binary trees over n leaves (Catalan(n−1)) when
    # the cap does not bind, and d = 1 allows only the left-branching l L r L r … r.
    catalan = [1, 1, 2, 5, 14, 42, 132, 429]
    for n in range(1, 9):
        assert len(valid_direction_sequences(n, 8)) == catalan[n - 1]
        only = valid_direction_sequences(n, 1)
        assert only.tolist() == [[0] + [0, 1] * (n - 1)]
    # The one valid n = 2 sequence, l L r, is the flat tree over the two words.
    assert str(tags_lib.tags_to_tree(["a", "b"], ["X", "X"], ["l", "r"], ["L"])) == \
        "(TOP (X a) (X b))"


@pytest.mark.parametrize("d", DEPTHS)
def test_all_decoders_match_brute_force(d):
    rng = np.random.default_rng(d)
    for _ in range(4):
        # Every length 0..8 in each batch, the rest random, in random order.
        lengths = rng.permutation(np.concatenate(
            [np.arange(WIDTH + 1), rng.integers(0, WIDTH + 1, BATCH - WIDTH - 1)]))
        leaf, internal, lengths = random_batch(rng, lengths)
        results = all_decoders(leaf, internal, lengths, d)
        for row in range(BATCH):
            check_row(results["numpy"], row, leaf, internal, d)
        for name in ("graph", "static", "xla"):
            assert_same(results[name], results["numpy"])


def test_labels_match_full_enumeration_of_tag_ids():
    # Tiny vocabularies: enumerate every sequence of tag ids, keep the valid ones.
    leaf_dirs, internal_dirs = np.array([0, 1, 0]), np.array([1, 0, 1])
    rng = np.random.default_rng(7)
    for n, d in itertools.product(range(1, 5), (2, 8)):
        leaf = rng.normal(size=(1, n, 3)).astype(np.float32)
        internal = rng.normal(size=(1, n, 3)).astype(np.float32)
        best = -np.inf
        for ids in itertools.product(range(3), repeat=2 * n - 1):
            leaf_ids = np.array(ids[0::2], dtype=int)
            internal_ids = np.array(ids[1::2], dtype=int)
            if is_valid(leaf_dirs[leaf_ids], internal_dirs[internal_ids], d):
                best = max(best, sequence_score(leaf[0], internal[0], leaf_ids, internal_ids))
        result = decoding.decode_numpy(leaf, internal, [n], leaf_dirs, internal_dirs, d)
        check_row(result, 0, leaf, internal, d, leaf_dirs, internal_dirs, expected_best=best)
        assert_same(decoding.decode(leaf, internal, [n], leaf_dirs, internal_dirs, d), result)


def test_padding_content_is_ignored():
    rng = np.random.default_rng(3)
    leaf, internal, lengths = random_batch(rng, [5, 0, 8, 1, 2, 3, 7, 4] * 2)
    clean = all_decoders(leaf, internal, lengths, 3)
    for row, n in enumerate(lengths):
        leaf[row, n:] = np.nan
        leaf[row, n:, 0] = np.inf
        internal[row, max(n - 1, 0):] = np.inf
    dirty = all_decoders(leaf, internal, lengths, 3)
    for name in clean:
        assert_same(dirty[name], clean["numpy"])


# ----------------------------------------------------------------------------------------
# Gold recovery on the NLTK treebank sample.


@pytest.fixture(scope="module")
def gold_taggings():
    taggings = []
    try:
        for split in ("train", "dev", "test"):
            for entry in treebank.read_nltk_sample(split):
                assert entry.tree is not None, entry.error
                taggings.append(tags_lib.tree_to_tags(treebank.clean_tree(entry.tree)))
    except treebank.NltkSampleNotFoundError as error:
        pytest.skip(str(error))
    return taggings


def gold_batches(taggings, vocabs, batch_size):
    """Yields (taggings, leaf scores, internal scores, lengths) with 1 on gold, 0 elsewhere."""
    order = sorted(range(len(taggings)), key=lambda i: len(taggings[i].words))
    for start in range(0, len(order), batch_size):
        batch = [taggings[i] for i in order[start:start + batch_size]]
        lengths = np.array([len(t.words) for t in batch], np.int32)
        width = int(lengths.max())
        leaf = np.zeros((len(batch), width, len(vocabs.leaf)), np.float32)
        internal = np.zeros((len(batch), width, len(vocabs.internal)), np.float32)
        for row, tagging in enumerate(batch):
            ids = vocabs.encode(tagging)
            leaf[row, np.arange(len(tagging.words)), ids["leaf_tag_ids"]] = 1
            internal[row, np.arange(len(tagging.words) - 1), ids["internal_tag_ids"]] = 1
        yield batch, leaf, internal, lengths


def assert_gold(result, batch, vocabs, max_stack_depth):
    for row, tagging in enumerate(batch):
        n = len(tagging.words)
        got_leaf, got_internal = decoding.result_to_tags(
            result, row, vocabs.leaf, vocabs.internal)
        is_gold = (tuple(got_leaf) == tagging.leaf_tags
                   and tuple(got_internal) == tagging.internal_tags)
        if tagging.max_stack_depth() <= max_stack_depth:
            assert is_gold, f"{tagging.words} decoded to {got_leaf} / {got_internal}"
            assert float(result.scores[row]) == 2 * n - 1
        else:
            assert not is_gold
            assert float(result.scores[row]) < 2 * n - 1
            # Still a valid tree.
            tags_lib.tags_to_tree(tagging.words, tagging.pos_tags, got_leaf, got_internal)


def test_gold_recovery_numpy_all_trees(gold_taggings):
    assert len(gold_taggings) == 3914
    vocabs = tags_lib.TagVocabularies.build(gold_taggings)
    leaf_dirs, internal_dirs = vocabs.leaf.directions(), vocabs.internal.directions()
    for d in (8, 4):
        for batch, leaf, internal, lengths in gold_batches(gold_taggings, vocabs, 512):
            result = decoding.decode_numpy(leaf, internal, lengths, leaf_dirs, internal_dirs, d)
            assert_gold(result, batch, vocabs, d)
    # The cap of 4 binds for some trees, so both branches of assert_gold ran.
    assert any(t.max_stack_depth() > 4 for t in gold_taggings)


def test_gold_recovery_tensorflow(gold_taggings):
    vocabs = tags_lib.TagVocabularies.build(gold_taggings)
    leaf_dirs, internal_dirs = vocabs.leaf.directions(), vocabs.internal.directions()
    batches = list(gold_batches(gold_taggings, vocabs, 128))
    # The longest sentences, and a batch from the middle.
    for (batch, leaf, internal, lengths), jit in ((batches[-1], False), (batches[15], True)):
        decoder = decoding.make_decoder(leaf_dirs, internal_dirs, 8, jit_compile=jit)
        if jit:
            assert_compiled_with_xla(decoder, leaf, internal, lengths)
        assert_gold(to_numpy(decoder(leaf, internal, lengths)), batch, vocabs, 8)


# ----------------------------------------------------------------------------------------
# Edge cases.


def test_one_word_takes_its_best_left_tag():
    # The r tags (ids 0, 2) score higher, but a single word must be an l tag.
    leaf = np.array([[[5.0, 1.0, 6.0, 2.0, -1.0]]], np.float32)
    internal = np.full((1, 1, 4), 9.0, np.float32)  # ignored
    for result in all_decoders(leaf, internal, [1], 8).values():
        assert result.leaf_tag_ids.tolist() == [[3]]
        assert result.internal_tag_ids.tolist() == [[-1]]
        assert result.scores.tolist() == [2.0]


def test_two_words_are_always_l_L_r():
    # Only l L r is valid; make every other direction far more attractive.
    leaf = np.zeros((1, 2, 5), np.float32)
    leaf[0, 0, LEAF_DIRECTIONS == 1] = 100
    leaf[0, 1, LEAF_DIRECTIONS == 0] = 100
    leaf[0, 1, 2] = 1  # the best r tag of word 2
    internal = np.zeros((1, 2, 4), np.float32)
    internal[0, 0, INTERNAL_DIRECTIONS == 1] = 100
    internal[0, 0, 3] = 0.5  # the best L tag
    assert valid_direction_sequences(2, 8).tolist() == [[0, 0, 1]]
    for d in DEPTHS:
        for result in all_decoders(leaf, internal, [2], d).values():
            assert result.leaf_tag_ids.tolist() == [[1, 2]]
            assert result.internal_tag_ids.tolist() == [[3, -1]]
            np.testing.assert_allclose(result.scores, [1.5])


def test_depth_one_allows_only_left_branching():
    rng = np.random.default_rng(11)
    leaf, internal, lengths = random_batch(rng, rng.integers(0, WIDTH + 1, BATCH))
    for result in all_decoders(leaf, internal, lengths, 1).values():
        for row, n in enumerate(lengths):
            if n:
                leaf_dirs = LEAF_DIRECTIONS[result.leaf_tag_ids[row, :n]]
                internal_dirs = INTERNAL_DIRECTIONS[result.internal_tag_ids[row, :n - 1]]
                assert leaf_dirs.tolist() == [0] + [1] * (n - 1)
                assert internal_dirs.tolist() == [0] * (n - 1)


@pytest.mark.parametrize("width", [0, 5])
def test_only_empty_sentences(width):
    leaf = np.zeros((3, width, 5), np.float32)
    internal = np.zeros((3, width, 4), np.float32)
    for result in all_decoders(leaf, internal, [0, 0, 0], 2).values():
        assert result.leaf_tag_ids.shape == (3, width)
        assert (result.leaf_tag_ids == -1).all() and (result.internal_tag_ids == -1).all()
        assert result.scores.tolist() == [0, 0, 0]


def test_empty_batch():
    leaf = np.zeros((0, 4, 5), np.float32)
    internal = np.zeros((0, 4, 4), np.float32)
    result = decoding.decode_numpy(leaf, internal, np.zeros(0, np.int32), LEAF_DIRECTIONS,
                                   INTERNAL_DIRECTIONS)
    assert result.leaf_tag_ids.shape == (0, 4) and result.scores.shape == (0,)
    assert_same(graph_decoder(8)(leaf, internal, np.zeros(0, np.int32)), result)


@pytest.mark.parametrize("bad_length", [5, -1])
def test_lengths_outside_the_padded_width_are_errors(bad_length):
    leaf = np.zeros((2, 4, 5), np.float32)
    internal = np.zeros((2, 4, 4), np.float32)
    lengths = np.array([2, bad_length], np.int32)
    with pytest.raises(ValueError, match="lengths must lie in 0..4"):
        decoding.decode_numpy(leaf, internal, lengths, LEAF_DIRECTIONS, INTERNAL_DIRECTIONS)
    for decoder in (graph_decoder(8), xla_decoder(8)):
        with pytest.raises(tf.errors.InvalidArgumentError, match="decode: .*length"):
            decoder(leaf, internal, lengths)


def test_bad_directions_and_shapes_are_errors():
    leaf = np.zeros((1, 3, 5), np.float32)
    internal = np.zeros((1, 3, 4), np.float32)
    with pytest.raises(ValueError, match="at least one left and one right"):
        decoding.decode_numpy(leaf, internal, [3], [0, 0, 0, 0, 0], INTERNAL_DIRECTIONS)
    with pytest.raises(ValueError, match="4 entries for 5"):
        decoding.decode_numpy(leaf, internal, [3], INTERNAL_DIRECTIONS, INTERNAL_DIRECTIONS)
    with pytest.raises(ValueError, match="0 \\(left\\) and 1"):
        decoding.make_decoder([0, 2, 1], INTERNAL_DIRECTIONS)
    with pytest.raises(ValueError, match="shapes disagree"):
        decoding.decode_numpy(leaf, internal[:, :2], [3], LEAF_DIRECTIONS,
                              INTERNAL_DIRECTIONS)
    with pytest.raises(ValueError, match="max_stack_depth"):
        decoding.decode_numpy(leaf, internal, [3], LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, 0)


# ----------------------------------------------------------------------------------------
# Non-finite scores.


@pytest.mark.parametrize("fill", [-np.inf, np.nan])
def test_all_forbidden_still_gives_a_valid_sequence(fill):
    lengths = np.array([8, 1, 3, 0, 5, 2, 7, 6] * 2, np.int32)
    leaf = np.full((BATCH, WIDTH, 5), fill, np.float32)
    internal = np.full((BATCH, WIDTH, 4), fill, np.float32)
    for d in (1, 3):
        for result in all_decoders(leaf, internal, lengths, d).values():
            for row, n in enumerate(lengths):
                check_row(result, row, leaf, internal, d, expected_best=-np.inf if n else 0)


def test_only_one_valid_sequence_left_is_found():
    # Forbid every tag except those of one random valid sequence per row.
    rng = np.random.default_rng(5)
    leaf, internal, lengths = random_batch(rng, rng.integers(1, WIDTH + 1, BATCH))
    d = 3
    for row, n in enumerate(lengths):
        sequences = valid_direction_sequences(n, d)
        keep = sequences[rng.integers(len(sequences))]
        for i in range(n):
            leaf[row, i, LEAF_DIRECTIONS != keep[2 * i]] = -np.inf
            if i < n - 1:
                internal[row, i, INTERNAL_DIRECTIONS != keep[2 * i + 1]] = -np.inf
    for result in all_decoders(leaf, internal, lengths, d).values():
        for row in range(BATCH):
            check_row(result, row, leaf, internal, d)
            assert np.isfinite(result.scores[row])


def test_sprinkled_nan_and_infinities_match_brute_force():
    rng = np.random.default_rng(9)
    for d, special in itertools.product((2, 8), (0.05, 0.3)):
        for _ in range(2):
            leaf, internal, lengths = random_batch(
                rng, rng.integers(0, WIDTH + 1, BATCH))
            for scores in (leaf, internal):
                draw = rng.random(scores.shape)
                scores[draw < special] = -np.inf
                scores[(draw >= special) & (draw < 1.5 * special)] = np.nan
                scores[(draw >= 1.5 * special) & (draw < 1.5 * special + 0.01)] = np.inf
            results = all_decoders(leaf, internal, lengths, d)
            for result in results.values():
                for row in range(BATCH):
                    check_row(result, row, leaf, internal, d)
            for name in ("graph", "static", "xla"):
                assert_same(results[name], results["numpy"])


def test_positive_infinity_wins():
    rng = np.random.default_rng(2)
    leaf, internal, lengths = random_batch(rng, [6] * BATCH)
    internal[:, 2, 1] = np.inf  # an R tag, valid at fencepost 2 (e.g. l L l R r …)
    for result in all_decoders(leaf, internal, lengths, 8).values():
        assert (result.internal_tag_ids[:, 2] == 1).all()
        assert (result.scores == np.inf).all()


# ----------------------------------------------------------------------------------------
# Helpers.


def test_pad_to_bucket_keeps_the_decoding():
    rng = np.random.default_rng(4)
    leaf, internal, lengths = random_batch(rng, [3, 8, 0, 5, 6])
    padded = decoding.pad_to_bucket(leaf, internal, lengths, width_buckets=(4, 16),
                                    batch_buckets=(8,))
    assert padded[0].shape == (8, 16, 5) and padded[1].shape == (8, 16, 4)
    assert padded[2].tolist() == [3, 8, 0, 5, 6, 0, 0, 0]
    result = decoding.decode_numpy(leaf, internal, lengths, LEAF_DIRECTIONS,
                                   INTERNAL_DIRECTIONS)
    got = decoding.decode_numpy(*padded, LEAF_DIRECTIONS, INTERNAL_DIRECTIONS)
    np.testing.assert_array_equal(got.leaf_tag_ids[:5, :8], result.leaf_tag_ids)
    np.testing.assert_array_equal(got.internal_tag_ids[:5, :8], result.internal_tag_ids)
    np.testing.assert_array_equal(got.scores[:5], result.scores)
    assert decoding.bucket_size(300, (8, 128)) == 384
    assert decoding.bucket_size(8, (8, 128)) == 8


def test_result_to_tags():
    leaf_vocab = tags_lib.TagVocabulary(["l", "l/NP", "r", "r/VP"])
    internal_vocab = tags_lib.TagVocabulary(["L", "L/S", "R"])
    leaf = np.zeros((2, 3, 4), np.float32)
    internal = np.zeros((2, 3, 3), np.float32)
    leaf[0, [0, 1, 2], [1, 0, 3]] = 1  # l/NP l r/VP
    internal[0, [0, 1], [1, 2]] = 1  # L/S R
    result = decoding.decode_numpy(leaf, internal, [3, 0], leaf_vocab.directions(),
                                   internal_vocab.directions())
    assert decoding.result_to_tags(result, 0, leaf_vocab, internal_vocab) == (
        ["l/NP", "l", "r/VP"], ["L/S", "R"])
    assert decoding.result_to_tags(result, 1, leaf_vocab, internal_vocab) == ([], [])

"""Tests for tetra_tf/decode/k_best.py: the k best sequences against brute-force enumeration."""

import itertools

import numpy as np
import pytest

from tetra_tf.decode import decoding, k_best

LEAF_DIRECTIONS = np.array([0, 1, 0, 1])
INTERNAL_DIRECTIONS = np.array([1, 0, 0, 1])
LEAF_STEPS = {0: 1, 1: 0}
INTERNAL_STEPS = {0: 0, 1: -1}


def all_valid(leaf_scores, internal_scores, n, max_stack_depth):
    """(score, leaf ids, internal ids) of every valid tag sequence, best first."""
    out = []
    for leaves in itertools.product(range(len(LEAF_DIRECTIONS)), repeat=n):
        for internals in itertools.product(range(len(INTERNAL_DIRECTIONS)), repeat=n - 1):
            depth, ok = 0, LEAF_DIRECTIONS[leaves[0]] == 0
            for p in range(2 * n - 1):
                depth += (LEAF_STEPS[LEAF_DIRECTIONS[leaves[p // 2]]] if p % 2 == 0
                          else INTERNAL_STEPS[INTERNAL_DIRECTIONS[internals[p // 2]]])
                ok &= 1 <= depth <= max_stack_depth
            if ok and depth == 1:
                score = (sum(leaf_scores[i, t] for i, t in enumerate(leaves))
                         + sum(internal_scores[i, t] for i, t in enumerate(internals)))
                out.append((score, list(leaves), list(internals)))
    return sorted(out, key=lambda entry: -entry[0])


@pytest.mark.parametrize("n,max_stack_depth,k", [(1, 8, 3), (2, 8, 5), (3, 2, 10),
                                                  (4, 8, 7), (5, 2, 12), (5, 8, 1)])
def test_k_best_equals_brute_force_and_starts_with_the_decoders_best(n, max_stack_depth, k):
    rng = np.random.default_rng(10 * n + k)
    width = 6
    leaf_scores = rng.normal(0, 2, (2, width, 4))
    internal_scores = rng.normal(0, 2, (2, width, 4))
    lengths = np.array([n, 0])
    result = k_best.k_best_numpy(leaf_scores, internal_scores, lengths, LEAF_DIRECTIONS,
                                 INTERNAL_DIRECTIONS, k, max_stack_depth)
    expected = all_valid(leaf_scores[0], internal_scores[0], n, max_stack_depth)[:k]
    found = len(expected)
    np.testing.assert_allclose(result.scores[0, :found], [s for s, _, _ in expected])
    assert np.all(result.scores[0, found:] == -np.inf)
    for rank, (_, leaves, internals) in enumerate(expected):
        assert result.leaf_tag_ids[0, rank, :n].tolist() == leaves
        assert result.internal_tag_ids[0, rank, :n - 1].tolist() == internals
        assert np.all(result.leaf_tag_ids[0, rank, n:] == -1)
        assert np.all(result.internal_tag_ids[0, rank, max(n - 1, 0):] == -1)
    assert np.all(np.diff(result.scores[0, :found]) <= 0)  # sorted
    best = decoding.decode_numpy(leaf_scores, internal_scores, lengths, LEAF_DIRECTIONS,
                                 INTERNAL_DIRECTIONS, max_stack_depth)
    np.testing.assert_array_equal(result.leaf_tag_ids[:, 0], best.leaf_tag_ids)
    np.testing.assert_array_equal(result.internal_tag_ids[:, 0], best.internal_tag_ids)
    np.testing.assert_allclose(result.scores[:, 0], best.scores, rtol=1e-6)
    # An empty row has one (empty) sequence.
    assert result.scores[1].tolist() == [0.0] + [-np.inf] * (k - 1)


def test_forbidden_tags_are_never_chosen_and_k_must_be_positive():
    rng = np.random.default_rng(0)
    leaf_scores = rng.normal(0, 1, (1, 4, 4))
    internal_scores = rng.normal(0, 1, (1, 4, 4))
    leaf_scores[0, 2, 0] = -np.inf
    internal_scores[0, 1, 2] = np.nan
    result = k_best.k_best_numpy(leaf_scores, internal_scores, [4], LEAF_DIRECTIONS,
                                 INTERNAL_DIRECTIONS, 20, 8)
    valid = np.isfinite(result.scores[0])
    assert valid.sum() == 20
    assert not np.any(result.leaf_tag_ids[0, :, 2] == 0)
    assert not np.any(result.internal_tag_ids[0, :, 1] == 2)
    with pytest.raises(ValueError, match="k must be at least 1"):
        k_best.k_best_numpy(leaf_scores, internal_scores, [4], LEAF_DIRECTIONS,
                            INTERNAL_DIRECTIONS, 0, 8)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_graph_k_best_equals_the_numpy_reference_in_one_trace(dtype):
    tf = pytest.importorskip("tensorflow")
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4], dtype)] * 2
                 + [tf.TensorSpec([None], tf.int32)])
    def run(leaf_scores, internal_scores, lengths):
        traces.append(1)
        return k_best.k_best(leaf_scores, internal_scores, lengths, LEAF_DIRECTIONS,
                             INTERNAL_DIRECTIONS, 6, 3)

    rng = np.random.default_rng(1)
    for batch, width in ((4, 7), (2, 1), (3, 0), (0, 3), (1, 2)):
        leaf_scores = rng.normal(0, 2, (batch, width, 4)).astype(dtype)
        internal_scores = rng.normal(0, 2, (batch, width, 4)).astype(dtype)
        lengths = rng.integers(0, width + 1, batch).astype(np.int32)
        got = run(leaf_scores, internal_scores, lengths)
        expected = k_best.k_best_numpy(leaf_scores, internal_scores, lengths,
                                       LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, 6, 3)
        np.testing.assert_array_equal(got.leaf_tag_ids.numpy(), expected.leaf_tag_ids)
        np.testing.assert_array_equal(got.internal_tag_ids.numpy(), expected.internal_tag_ids)
        np.testing.assert_allclose(got.scores.numpy(), expected.scores, rtol=1e-5)
    assert len(traces) == 1

"""Tests for tetra_tf/marginals.py: forward-backward sums against brute-force enumeration."""

import itertools

import nltk
import numpy as np
import pytest

from tetra_tf import decoding, marginals
from tetra_tf import tags as tags_lib

# Vocabularies with two tags per direction, so that labels are summed over.
LEAF_DIRECTIONS = np.array([0, 1, 0, 1])
INTERNAL_DIRECTIONS = np.array([1, 0, 0, 1])


def valid_directions(n: int, max_stack_depth: int):
    """Every valid (leaf directions, internal directions) of n words, by enumeration."""
    for leaves in itertools.product((0, 1), repeat=n):
        for internals in itertools.product((0, 1), repeat=n - 1):
            depth, ok = 0, leaves[0] == 0
            for p in range(2 * n - 1):
                step = (1 - leaves[p // 2]) if p % 2 == 0 else -internals[p // 2]
                depth += step
                ok &= 1 <= depth <= max_stack_depth
            if ok and depth == 1:
                yield leaves, internals


def brute_force(leaf_scores, internal_scores, max_stack_depth):
    """(log Z, direction marginals [2n−1, 2], {(i, j, k, side): probability}) by
    enumerating the valid direction sequences (labels summed in closed form)."""
    n = len(leaf_scores)
    leaf = marginals.direction_scores(leaf_scores, LEAF_DIRECTIONS)
    internal = marginals.direction_scores(internal_scores, INTERNAL_DIRECTIONS)
    paths = []
    for leaves, internals in valid_directions(n, max_stack_depth):
        score = (sum(leaf[i, side] for i, side in enumerate(leaves))
                 + sum(internal[k, side] for k, side in enumerate(internals)))
        paths.append((score, leaves, internals))
    log_z = np.logaddexp.reduce([score for score, _, _ in paths])
    directions = np.zeros((2 * n - 1, 2))
    nodes = {}
    for score, leaves, internals in paths:
        weight = np.exp(score - log_z)
        for i, side in enumerate(leaves):
            directions[2 * i, side] += weight
        for k, side in enumerate(internals):
            directions[2 * k + 1, side] += weight
        for k, (i, j) in enumerate(marginals.binary_spans(leaves, internals)):
            key = (i, j, k, internals[k])
            nodes[key] = nodes.get(key, 0.0) + weight
    return log_z, directions, nodes


def random_scores(rng, n):
    return rng.normal(0, 2, (n, 4)), rng.normal(0, 2, (max(n - 1, 0), 4))


@pytest.mark.parametrize("n,max_stack_depth", [(1, 8), (2, 8), (3, 1), (4, 2), (5, 3),
                                                (6, 8), (7, 3), (7, 8)])
def test_sums_equal_brute_force_enumeration(n, max_stack_depth):
    rng = np.random.default_rng(n * 10 + max_stack_depth)
    leaf_scores, internal_scores = random_scores(rng, n)
    lattice = marginals.Lattice(leaf_scores, internal_scores, LEAF_DIRECTIONS,
                                INTERNAL_DIRECTIONS, max_stack_depth)
    log_z, directions, nodes = brute_force(leaf_scores, internal_scores, max_stack_depth)
    assert lattice.log_partition == pytest.approx(log_z, abs=1e-9)
    np.testing.assert_allclose(lattice.direction_marginals(), directions, atol=1e-9)
    for i in range(n):
        for j in range(i + 1, n):
            got = lattice.node_marginals(i, j)
            expected = np.zeros_like(got)
            for (a, b, k, side), weight in nodes.items():
                if (a, b) == (i, j):
                    expected[k, side] = weight
            np.testing.assert_allclose(got, expected, atol=1e-9, err_msg=f"span {i}..{j}")
    # Every tree has the whole sentence as a node and n − 1 nodes in all.
    if n > 1:
        assert lattice.span_marginal(0, n - 1) == pytest.approx(1.0)
        total = sum(lattice.span_marginal(i, j) for i in range(n) for j in range(i + 1, n))
        assert total == pytest.approx(n - 1)


def test_log_partition_sums_over_the_tags_themselves():
    """Not only over directions: every valid tag sequence of a 4-word sentence, one by one."""
    rng = np.random.default_rng(7)
    leaf_scores, internal_scores = random_scores(rng, 4)
    terms = []
    for leaves in itertools.product(range(4), repeat=4):
        for internals in itertools.product(range(4), repeat=3):
            sides = ([LEAF_DIRECTIONS[t] for t in leaves],
                     [INTERNAL_DIRECTIONS[t] for t in internals])
            if sides in [([*a], [*b]) for a, b in valid_directions(4, 8)]:
                terms.append(sum(leaf_scores[i, t] for i, t in enumerate(leaves))
                             + sum(internal_scores[k, t] for k, t in enumerate(internals)))
    lattice = marginals.Lattice(leaf_scores, internal_scores, LEAF_DIRECTIONS,
                                INTERNAL_DIRECTIONS, 8)
    assert lattice.log_partition == pytest.approx(np.logaddexp.reduce(terms), abs=1e-9)


def test_the_best_path_is_the_decoders():
    """The lattice is the decoder's: a sentence whose scores leave one valid path (−inf
    elsewhere) has that path's direction marginals at 1."""
    rng = np.random.default_rng(3)
    leaf_scores, internal_scores = random_scores(rng, 6)
    best = decoding.decode_numpy(leaf_scores[None], np.pad(internal_scores, [(0, 1), (0, 0)])[None],
                                 [6], LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, 3)
    leaf_ids, internal_ids = best.leaf_tag_ids[0], best.internal_tag_ids[0, :5]
    forced_leaf = np.full_like(leaf_scores, -np.inf)
    forced_leaf[np.arange(6), leaf_ids] = 0.0
    forced_internal = np.full_like(internal_scores, -np.inf)
    forced_internal[np.arange(5), internal_ids] = 0.0
    lattice = marginals.Lattice(forced_leaf, forced_internal, LEAF_DIRECTIONS,
                                INTERNAL_DIRECTIONS, 3)
    chosen = np.empty(11, dtype=int)
    chosen[0::2] = LEAF_DIRECTIONS[leaf_ids]
    chosen[1::2] = INTERNAL_DIRECTIONS[internal_ids]
    np.testing.assert_allclose(lattice.direction_marginals()[np.arange(11), chosen], 1.0)
    assert lattice.log_partition == pytest.approx(0.0)


def _random_binary_tree(rng, words):
    if len(words) == 1:
        return words[0]
    cut = int(rng.integers(1, len(words)))
    return [_random_binary_tree(rng, words[:cut]), _random_binary_tree(rng, words[cut:])]


def test_binary_spans_are_the_rebuilt_trees_nodes():
    """binary_spans against tags.tags_to_tree: each internal tag labelled with its own
    fencepost, the rebuilt tree's node of that label spans what binary_spans says."""
    rng = np.random.default_rng(0)
    for n in range(2, 12):
        for _ in range(20):
            words = [f"w{i}" for i in range(n)]
            tree = _random_binary_tree(rng, list(range(n)))

            def to_nltk(node):
                if isinstance(node, int):
                    return nltk.Tree("T", [words[node]])
                return nltk.Tree("X", [to_nltk(child) for child in node])

            tagging = tags_lib.tree_to_tags(nltk.Tree("TOP", [to_nltk(tree)]))
            leaves = [0 if tags_lib.tag_direction(t) == "l" else 1 for t in tagging.leaf_tags]
            internals = [0 if tags_lib.tag_direction(t) == "L" else 1
                         for t in tagging.internal_tags]
            labelled = [tags_lib.make_tag("LR"[side], f"K{k}") for k, side in enumerate(internals)]
            rebuilt = tags_lib.tags_to_tree(words, ["T"] * n,
                                            ["lr"[side] for side in leaves], labelled)
            expected = [None] * (n - 1)
            for position in rebuilt.treepositions():
                node = rebuilt[position]
                if isinstance(node, nltk.Tree) and node.label().startswith("K"):
                    first = words.index(node.leaves()[0])
                    expected[int(node.label()[1:])] = (first, first + len(node.leaves()) - 1)
            assert marginals.binary_spans(leaves, internals) == expected

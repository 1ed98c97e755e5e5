"""Tests for tetra_tf/decode/marginals.py: forward-backward sums against brute-force enumeration."""

import itertools

import nltk
import numpy as np
import pytest

from conftest import preorder_constituents
from tetra_tf.decode import decoding, marginals
from tetra_tf.trees import tags as tags_lib

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


@pytest.mark.parametrize("max_stack_depth, spread", [(2, 2), (8, 2), (8, 60)])
def test_graph_lattice_equals_the_numpy_reference_on_a_padded_batch(max_stack_depth, spread):
    """Also with scores so spread (60) that the states' entries are hundreds of orders of
    magnitude apart: the span sums rescale in linear space, the reference adds logs."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(max_stack_depth + spread)
    lengths = [0, 1, 2, 5, 7, 3]
    width = 7
    leaf_scores = rng.normal(0, spread, (len(lengths), width, 4))
    internal_scores = rng.normal(0, spread, (len(lengths), width, 4))
    lattice = marginals.GraphLattice(tf.constant(leaf_scores), tf.constant(internal_scores),
                                     tf.constant(lengths), LEAF_DIRECTIONS,
                                     INTERNAL_DIRECTIONS, max_stack_depth)
    leaf_marginals, internal_marginals = lattice.direction_marginals()
    spans = [(i, j) for i in range(width) for j in range(i, width)] + [(-1, 2), (3, 9)]
    starts = np.array([[i for i, _ in spans]] * len(lengths))
    ends = np.array([[j for _, j in spans]] * len(lengths))
    nodes = lattice.node_marginals(tf.constant(starts), tf.constant(ends)).numpy()
    # Any weights per fencepost, direction and label: here not a distribution.
    weights = rng.uniform(0, 1, (len(lengths), width, 2, 3))
    every_span = lattice.span_marginals(tf.constant(weights)).numpy()
    assert every_span.shape == (len(lengths), width, width, 3)
    for row, n in enumerate(lengths):
        reference = marginals.Lattice(leaf_scores[row, :n], internal_scores[row, :n],
                                      LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, max_stack_depth)
        assert lattice.log_partition[row].numpy() == pytest.approx(reference.log_partition,
                                                                   abs=1e-9)
        directions = reference.direction_marginals()
        np.testing.assert_allclose(leaf_marginals[row, :n], directions[0::2], atol=1e-9)
        np.testing.assert_allclose(internal_marginals[row, :max(n - 1, 0)], directions[1::2],
                                   atol=1e-9)
        assert not np.any(leaf_marginals[row, n:]) and not np.any(internal_marginals[row, n - 1:])
        for m, (i, j) in enumerate(spans):
            expected = np.zeros((width, 2))
            expected[:max(n - 1, 0)] = reference.node_marginals(i, j)
            np.testing.assert_allclose(nodes[row, m], expected, atol=1e-9,
                                       err_msg=f"row {row}, span {i}..{j}")
            if j < width:
                np.testing.assert_allclose(
                    every_span[row, i, j], np.einsum("ks,kse->e", expected, weights[row]),
                    atol=1e-9, err_msg=f"row {row}, span {i}..{j}")


def test_graph_lattice_takes_an_empty_batch_and_no_words():
    tf = pytest.importorskip("tensorflow")
    for batch, width in ((0, 3), (2, 0)):
        lattice = marginals.GraphLattice(
            tf.zeros([batch, width, 4]), tf.zeros([batch, width, 4]), tf.zeros([batch], tf.int32),
            LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, 8)
        leaf, internal = lattice.direction_marginals()
        assert leaf.shape == internal.shape == (batch, width, 2)
        assert lattice.log_partition.shape == (batch,)
        assert lattice.node_marginals(tf.zeros([batch, 1], tf.int32),
                                      tf.zeros([batch, 1], tf.int32)).shape == (batch, 1, width, 2)
        assert lattice.span_marginals(tf.zeros([batch, width, 2, 3])).shape == (
            batch, width, width, 3)


def test_graph_lattice_traces_once_for_any_batch_and_width():
    """As the SavedModel runs it: one graph, dynamic batch and width, float32."""
    tf = pytest.importorskip("tensorflow")
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.float32)] * 2
                 + [tf.TensorSpec([None], tf.int32)] * 1
                 + [tf.TensorSpec([None, None], tf.int32)] * 2)
    def run(leaf_scores, internal_scores, lengths, starts, ends):
        traces.append(1)
        lattice = marginals.GraphLattice(leaf_scores, internal_scores, lengths,
                                         LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, 3)
        return lattice.log_partition, lattice.node_marginals(starts, ends)

    rng = np.random.default_rng(5)
    for batch, width in ((3, 6), (1, 2), (2, 9)):
        leaf_scores = rng.normal(0, 1, (batch, width, 4)).astype(np.float32)
        internal_scores = rng.normal(0, 1, (batch, width, 4)).astype(np.float32)
        lengths = rng.integers(1, width + 1, batch).astype(np.int32)
        starts = np.zeros((batch, 1), np.int32)
        ends = (lengths - 1)[:, None]
        log_z, nodes = run(leaf_scores, internal_scores, lengths, starts, ends)
        for row in range(batch):
            n = lengths[row]
            reference = marginals.Lattice(leaf_scores[row, :n], internal_scores[row, :n],
                                          LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, 3)
            assert float(log_z[row]) == pytest.approx(reference.log_partition, rel=1e-5)
            # The whole sentence is always a node (of one word: no fencepost makes it).
            assert float(nodes[row, 0].numpy().sum()) == pytest.approx(1.0 if n > 1 else 0.0,
                                                                abs=1e-5)
    assert len(traces) == 1


LABELLED_LEAF_TAGS = ["l", "r", "l/NP", "r/NP+QP"]
LABELLED_INTERNAL_TAGS = ["L", "R", "L/S+VP", "R/VP"]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_constituent_marginals_equal_brute_force_over_every_tag_sequence(n):
    """Every valid tag sequence of a labelled vocabulary, its tree built by tags_to_tree:
    each constituent of the decoded tree, and each labelled span of `every_span`, gets
    the probability mass of the trees that hold it (same label, same span)."""
    tf = pytest.importorskip("tensorflow")
    from tetra_tf.decode import tree_writer

    rng = np.random.default_rng(n)
    vocabs = tags_lib.TagVocabularies(tags_lib.TagVocabulary(LABELLED_LEAF_TAGS),
                                      tags_lib.TagVocabulary(LABELLED_INTERNAL_TAGS),
                                      tags_lib.TagVocabulary(["T"]))
    leaf_directions = vocabs.leaf.directions()
    internal_directions = vocabs.internal.directions()
    leaf_scores = rng.normal(0, 1.5, (n, 4))
    internal_scores = rng.normal(0, 1.5, (n, 4))  # the last row is never read
    words = [f"w{i}" for i in range(n)]

    mass: dict[tuple[str, int, int], float] = {}
    log_weights, trees = [], []
    for leaves in itertools.product(range(4), repeat=n):
        for internals in itertools.product(range(4), repeat=n - 1):
            try:
                tree = tags_lib.tags_to_tree(words, ["T"] * n,
                                             [LABELLED_LEAF_TAGS[t] for t in leaves],
                                             [LABELLED_INTERNAL_TAGS[t] for t in internals])
            except ValueError:
                continue
            log_weights.append(sum(leaf_scores[i, t] for i, t in enumerate(leaves))
                               + sum(internal_scores[k, t] for k, t in enumerate(internals)))
            trees.append(tree)
    log_z = np.logaddexp.reduce(log_weights)
    for log_weight, tree in zip(log_weights, trees):
        for constituent in set(preorder_constituents(tree)):
            mass[constituent] = mass.get(constituent, 0.0) + np.exp(log_weight - log_z)

    batch = [tf.constant(leaf_scores[None]), tf.constant(internal_scores[None])]
    lengths = tf.constant([n])
    best = decoding.decode(*batch, lengths, leaf_directions, internal_directions, 8)
    writer = tree_writer.TreeWriter(vocabs)
    starts, ends = writer.node_spans(best.leaf_tag_ids, best.internal_tag_ids, lengths)
    lattice = marginals.GraphLattice(*batch, lengths, leaf_directions, internal_directions, 8)
    leaf, internal = marginals.ChainMarginals(
        vocabs.leaf.tags, vocabs.internal.tags, leaf_directions, internal_directions)(
            lattice, *batch, best.leaf_tag_ids, best.internal_tag_ids, starts, ends)
    got = writer.in_bracket_order(leaf, internal, best.leaf_tag_ids, best.internal_tag_ids,
                                  lengths)[0].numpy()
    best_tree = nltk.Tree.fromstring(writer(tf.constant([words]), tf.constant([["T"] * n]),
                                            best.leaf_tag_ids, best.internal_tag_ids,
                                            lengths)[0].numpy().decode())
    expected = [mass[c] for c in preorder_constituents(best_tree)]
    assert len(got) == len(expected)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert lattice.log_partition[0].numpy() == pytest.approx(log_z)

    # Every labelled span, not only the best tree's: the whole table against the mass.
    chains = marginals.ChainMarginals(vocabs.leaf.tags, vocabs.internal.tags,
                                      leaf_directions, internal_directions)
    every = chains.every_span(lattice, *batch)[0].numpy()  # [I, J, E]
    assert every.shape == (n, n, len(chains.labels)) and chains.labels == ["NP", "QP", "S",
                                                                           "VP"]
    table = np.zeros_like(every)
    for (label, start, end), probability in mass.items():
        table[start, end, chains.labels.index(label)] = probability
    assert len(mass) > len(expected)  # spans of other trees too
    np.testing.assert_allclose(every, table, atol=1e-6)


def test_graph_span_sums_keep_their_precision_over_long_improbable_stretches():
    """Words that favour l and fenceposts that favour L, each by e^200: past the depth cap
    every step is hundreds of orders of magnitude below its best, for whole trees alike.
    The linear-space sums must rescale as they go (else they fall to 0), and give the
    reference's probabilities."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(40)
    n, max_stack_depth = 30, 4
    leaf_scores = rng.normal(0, 2, (1, n, 4)) + np.where(LEAF_DIRECTIONS == 0, 100.0, -100.0)
    internal_scores = rng.normal(0, 2, (1, n, 4)) + np.where(INTERNAL_DIRECTIONS == 0, 100.0,
                                                             -100.0)
    lattice = marginals.GraphLattice(tf.constant(leaf_scores), tf.constant(internal_scores),
                                     tf.constant([n]), LEAF_DIRECTIONS, INTERNAL_DIRECTIONS,
                                     max_stack_depth)
    reference = marginals.Lattice(leaf_scores[0], internal_scores[0], LEAF_DIRECTIONS,
                                  INTERNAL_DIRECTIONS, max_stack_depth)
    spans = [(i, j) for i in range(n) for j in range(i + 1, n)]
    nodes = lattice.node_marginals(tf.constant([[i for i, _ in spans]]),
                                   tf.constant([[j for _, j in spans]])).numpy()[0]
    likely = 0
    for m, (i, j) in enumerate(spans):
        expected = reference.node_marginals(i, j)
        np.testing.assert_allclose(nodes[m, :n - 1], expected, atol=1e-9, rtol=1e-6,
                                   err_msg=f"span {i}..{j}")
        likely += expected.sum() > 0.01
    assert likely >= n - 1  # a whole tree of probabilities that matter, not only vanishing ones

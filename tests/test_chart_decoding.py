"""Tests for tetra_tf/decode/chart_decoding.py: the best tree under span rules, against brute force."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tetra_tf.decode import chart_decoding, decoding

LEAF_DIRECTIONS = np.array([0, 1, 0, 1])
INTERNAL_DIRECTIONS = np.array([1, 0, 0, 1])


def trees(n, max_stack_depth):
    """Every valid sequence of directions (leaf, internal) of n words whose stack stays
    within max_stack_depth: one per binary tree of that depth."""
    for leaves in itertools.product((0, 1), repeat=n):
        for internals in itertools.product((0, 1), repeat=n - 1):
            depth, ok = 0, True
            for p in range(2 * n - 1):
                depth += 1 - leaves[p // 2] if p % 2 == 0 else -internals[p // 2]
                ok &= 1 <= depth <= max_stack_depth
            if ok and depth == 1:
                yield leaves, internals


def nodes(leaves, internals):
    """(first word, last word, position, is a word, direction) of every node, by
    replaying the derivation's stack."""
    stack, found = [], []  # per entry: its first word, and the nodes waiting for their end
    for p in range(2 * len(leaves) - 1):
        if p % 2 == 0:
            i = p // 2
            found.append((i, i, i, True, leaves[i]))
            if leaves[i] == 0:
                stack.append([i, []])
            else:
                first, open_nodes = stack[-1]
                found.extend((start, i, fencepost, False, direction)
                             for start, fencepost, direction in open_nodes)
                stack[-1] = [first, []]
        else:
            fencepost, direction = p // 2, internals[p // 2]
            first, _ = stack.pop()
            if direction == 0:
                stack.append([first, [(first, fencepost, 0)]])
            else:
                stack[-1][1].append((first, fencepost, 1))
    return found


def brute_force_best(leaf_scores, internal_scores, n, rules, max_stack_depth):
    """The best (score, leaf ids, internal ids) over every tree whose nodes satisfy the
    rules, each node taking its best tag of its direction that the rules on its span allow;
    None if no tree does."""
    best = None
    for leaf_directions, internal_directions in trees(n, max_stack_depth):
        spans = nodes(leaf_directions, internal_directions)
        if not all((first, last) in {(s, e) for s, e, *_ in spans}
                   for first, last, *_, bracket in rules if bracket):
            continue
        score, leaves, internals = 0.0, [0] * n, [0] * (n - 1)
        for s, e, position, is_word, direction in spans:
            scores = (leaf_scores if is_word else internal_scores)[position].copy()
            scores[(LEAF_DIRECTIONS if is_word else INTERNAL_DIRECTIONS) != direction] = -np.inf
            for first, last, leaf_allowed, internal_allowed, _ in rules:
                if (first, last) == (s, e):
                    scores[~(leaf_allowed if is_word else internal_allowed)] = -np.inf
            tag = int(np.argmax(scores))
            score += scores[tag]
            (leaves if is_word else internals)[position] = tag
        if score > -np.inf and (best is None or score > best[0]):
            best = (score, leaves, internals)
    return best


def as_rules(rule_lists, width_rules):
    starts = -np.ones((len(rule_lists), width_rules), np.int32)
    ends = -np.ones_like(starts)
    leaf_allowed = np.zeros((len(rule_lists), width_rules, 4), bool)
    internal_allowed = np.zeros((len(rule_lists), width_rules, 4), bool)
    brackets = np.zeros_like(starts, bool)
    for row, rules in enumerate(rule_lists):
        for r, (first, last, leaf, internal, bracket) in enumerate(rules):
            starts[row, r], ends[row, r] = first, last
            leaf_allowed[row, r], internal_allowed[row, r] = leaf, internal
            brackets[row, r] = bracket
    return chart_decoding.SpanRules(*(tf.constant(x) for x in (
        starts, ends, leaf_allowed, internal_allowed, brackets)))


def random_rules(rng, n):
    """Up to five rules on random spans, some on a span an earlier rule has."""
    rules = []
    for _ in range(rng.integers(0, 6)):
        if rules and rng.random() < 0.25:
            first, last = rules[-1][:2]
        else:
            first = int(rng.integers(0, n))
            last = int(rng.integers(first, n))
        rules.append((first, last, rng.random(4) < 0.7, rng.random(4) < 0.7,
                      bool(rng.random() < 0.5)))
    return rules


@pytest.mark.parametrize("seed,max_stack_depth", [(0, 8), (1, 8), (2, 3), (3, 2), (4, 1),
                                                  (5, 8), (6, 8), (7, 4)])
def test_chart_equals_brute_force_under_random_span_rules(seed, max_stack_depth):
    rng = np.random.default_rng(seed)
    width, batch = 7, 8
    lengths = rng.integers(1, width + 1, batch)
    lengths[0] = 0
    leaf_scores = rng.normal(0, 2, (batch, width, 4))
    internal_scores = rng.normal(0, 2, (batch, width, 4))
    rule_lists = [random_rules(rng, max(n, 1)) if n else [] for n in lengths]
    result = chart_decoding.chart_decode(leaf_scores, internal_scores, lengths,
                                         LEAF_DIRECTIONS, INTERNAL_DIRECTIONS,
                                         as_rules(rule_lists, 5), max_stack_depth)
    assert result.scores[0] == 0 and result.satisfied[0]
    unsatisfied = 0
    for row in range(1, batch):
        n = lengths[row]
        expected = brute_force_best(leaf_scores[row], internal_scores[row], n,
                                    rule_lists[row], max_stack_depth)
        leaf_ids = result.leaf_tag_ids[row].numpy()
        internal_ids = result.internal_tag_ids[row].numpy()
        if expected is None:
            unsatisfied += 1
            assert not result.satisfied[row] and result.scores[row] == -np.inf
            assert np.all(leaf_ids == -1) and np.all(internal_ids == -1)
            continue
        assert result.satisfied[row]
        np.testing.assert_allclose(result.scores[row], expected[0], rtol=1e-9)
        assert leaf_ids[:n].tolist() == expected[1]
        assert internal_ids[:n - 1].tolist() == expected[2]
        assert np.all(leaf_ids[n:] == -1) and np.all(internal_ids[n - 1:] == -1)
    assert unsatisfied < batch - 1


@pytest.mark.parametrize("max_stack_depth", [2, 4, 12])
def test_without_rules_the_chart_finds_the_lattice_decoders_best(max_stack_depth):
    rng = np.random.default_rng(max_stack_depth)
    batch, width = 16, 12
    lengths = rng.integers(0, width + 1, batch)
    leaf_scores = rng.normal(0, 2, (batch, width, 4)).astype(np.float32)
    internal_scores = rng.normal(0, 2, (batch, width, 4)).astype(np.float32)
    rules = chart_decoding.no_rules(batch, 4, 4)
    chart = chart_decoding.chart_decode(leaf_scores, internal_scores, lengths,
                                        LEAF_DIRECTIONS, INTERNAL_DIRECTIONS, rules,
                                        max_stack_depth)
    lattice = decoding.decode_numpy(leaf_scores, internal_scores, lengths, LEAF_DIRECTIONS,
                                    INTERNAL_DIRECTIONS, max_stack_depth)
    np.testing.assert_array_equal(chart.leaf_tag_ids, lattice.leaf_tag_ids)
    np.testing.assert_array_equal(chart.internal_tag_ids, lattice.internal_tag_ids)
    np.testing.assert_allclose(chart.scores, lattice.scores, rtol=1e-5)
    assert chart.scores.dtype == tf.float32 and bool(tf.reduce_all(chart.satisfied))


def test_an_empty_batch_and_width_zero():
    for batch, width in ((0, 5), (3, 0)):
        result = chart_decoding.chart_decode(
            np.zeros((batch, width, 4), np.float32), np.zeros((batch, width, 4), np.float32),
            np.zeros(batch, np.int32), LEAF_DIRECTIONS, INTERNAL_DIRECTIONS,
            chart_decoding.no_rules(batch, 4, 4), 8)
        assert result.leaf_tag_ids.shape == (batch, width)
        assert result.scores.numpy().tolist() == [0.0] * batch

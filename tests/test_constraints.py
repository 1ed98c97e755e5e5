"""Tests for tetra_tf/decode/constraints.py and the parse it constrains (the export's
parse_constrained signature, through the Parser)."""

import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import preorder_constituents
from tetra_tf.contract import export_format, sentences
from tetra_tf.contract.parse_record import ParseResult
from tetra_tf.contract.sentences import SentenceError
from tetra_tf.decode import constraints as constraints_lib
from tetra_tf.decode.constraints import Constraints, Span
from tetra_tf.parser import Parser
from tetra_tf.trees import tags as tags_lib
from tetra_tf.trees import treebank

LABELS = ["NP", "S", "VP"]
POS_TAGS = ["DT", "NN", "VBD"]


@pytest.mark.parametrize("constraints,message", [
    (Constraints(forced=[(0, 3)]), "forced span (0, 3) is not within words 0..2"),
    (Constraints(forbidden=[(2, 1)]), "forbidden span (2, 1) is not within words 0..2"),
    (Constraints(forbidden=[(-1, 1)]), "forbidden span (-1, 1) is not within"),
    (Constraints(forced=[(0, 1, "XP")]), "label 'XP', which the model does not know"),
    (Constraints(forced=[(0, 1), (1, 2)]), "forced spans (0, 1) and (1, 2) cross"),
    (Constraints(forced=[(0, 2), (0, 1), (0, 1), (1, 1), (1, 2)]),
     "forced spans (0, 1) and (1, 2) cross"),
    (Constraints(forced=[(0, 1)], forbidden=[(0, 1)]), "(0, 1) is both forced and forbidden"),
    (Constraints(pos_tags=["DT"]), "pos_tags has 1 entries for 3 words"),
    (Constraints(pos_tags=["DT", "XX", None]), "word 1: part of speech 'XX' is not one"),
])
def test_malformed_constraints_are_refused_with_what_is_wrong(constraints, message):
    with pytest.raises(SentenceError) as error:
        constraints.check(3, LABELS, POS_TAGS)
    assert error.value.reason == sentences.BAD_CONSTRAINTS
    assert message in error.value.detail


@pytest.mark.parametrize("arguments,message", [
    ({"forced": [(0,)]}, "a forced span must be (start, end) or (start, end, label)"),
    ({"forbidden": [(0, 1, "NP")]}, "a forbidden span must be (start, end)"),
    ({"forced": [(0.0, 1)]}, "start and end must be integers"),
    ({"forced": [(True, 1)]}, "start and end must be integers"),
    ({"forced": [(0, 1, "")]}, "label must be a non-empty string"),
    ({"forbidden": [Span(0, 1, "NP")]}, "a forbidden span has no label"),
])
def test_spans_of_the_wrong_shape_are_refused_when_made(arguments, message):
    with pytest.raises(SentenceError, match="bad_constraints") as error:
        Constraints(**arguments)
    assert message in error.value.detail


def test_spans_are_read_from_tuples_and_nested_or_shared_spans_pass():
    constraints = Constraints(forced=[(0, 2, "S"), [0, 1], Span(1, 1, "NP"), (0, 2, "VP")],
                              forbidden=[(1, 2)], pos_tags=[None, "NN", None])
    assert constraints.forced == (Span(0, 2, "S"), Span(0, 1), Span(1, 1, "NP"),
                                  Span(0, 2, "VP"))
    assert constraints.forbidden == (Span(1, 2),)
    constraints.check(3, LABELS, POS_TAGS)
    assert Constraints().is_empty() and Constraints(pos_tags=[None]).is_empty()
    assert not constraints.is_empty()


def test_inputs_are_padded_with_minus_one_and_empty_strings():
    inputs = constraints_lib.as_inputs([Constraints(forced=[(0, 1, "NP"), (2, 2)],
                                                    pos_tags=["DT", None, "NN"]), None])
    assert inputs["forced_spans"].tolist() == [[[0, 1], [2, 2]], [[-1, -1], [-1, -1]]]
    assert inputs["forced_labels"].tolist() == [[b"NP", b""], [b"", b""]]
    assert inputs["forbidden_spans"].tolist() == [[[-1, -1]], [[-1, -1]]]
    assert inputs["given_pos_tags"].tolist() == [[b"DT", b"", b"NN"], [b"", b"", b""]]


# --------------------------------------------------------------------------------------
# Parsing under constraints (the tiny export)


@pytest.fixture(scope="module")
def parser(tiny_export_dir):
    return Parser(tiny_export_dir)


@pytest.fixture(scope="module")
def test_split():
    try:
        entries = list(treebank.read_nltk_sample("test"))
    except treebank.NltkSampleNotFoundError:
        pytest.skip("NLTK treebank sample not found")
    return [treebank.clean_tree(entry.tree) for entry in entries if entry.tree is not None]


def _holds(tree, span) -> bool:
    return any((first, last) == (span.start, span.end) and span.label in (None, label)
               for label, first, last in preorder_constituents(tree))


def _gold_consistent(rng, tree, labels, share):
    """Forced: each gold constituent with probability `share` (its label when the model
    knows it); forbidden: up to three spans that are not gold constituents."""
    gold = preorder_constituents(tree)
    spans = {(first, last) for _, first, last in gold}
    forced = [(first, last, label if label in labels else None)
              for label, first, last in gold if rng.random() < share]
    n = len(tree.leaves())
    candidates = [(i, j) for i in range(n) for j in range(i, min(n, i + 6))
                  if (i, j) not in spans]
    return Constraints(forced=forced, forbidden=rng.sample(candidates, min(3, len(candidates))))


def test_every_forced_span_is_in_the_tree_and_no_forbidden_one_on_the_test_split(
        parser, test_split):
    rng = random.Random(0)
    word_lists = [tree.leaves() for tree in test_split]
    constraint_sets = [_gold_consistent(rng, tree, set(parser.phrase_labels), rng.random())
                       for tree in test_split]
    results = parser.parse_each(word_lists, constraints=constraint_sets)
    parsed = 0
    for words, constraints, result in zip(word_lists, constraint_sets, results):
        if isinstance(result, SentenceError):
            # The tiny model puts some labels only on words: a gold span may then be
            # unsatisfiable, never answered with a tree that breaks it.
            assert result.reason == sentences.UNSATISFIABLE, result
            continue
        parsed += 1
        tree = result.tree
        assert tree.leaves() == words
        assert all(_holds(tree, span) for span in constraints.forced), constraints
        assert not any(_holds(tree, span) for span in constraints.forbidden), constraints
    assert parsed >= 0.5 * len(word_lists)
    assert sum(len(c.forced) for c in constraint_sets) > 1000


def test_no_constraints_give_the_default_parse_and_satisfied_ones_keep_it(parser, test_split):
    """The chart decoder finds the decoder's best when nothing restricts it, and keeps the
    best tree when it already satisfies the constraints: it optimizes, not just satisfies."""
    rng = random.Random(1)
    word_lists = [tree.leaves() for tree in test_split[:80]]
    plain = parser.parse_each(word_lists)
    unconstrained = parser.parse_each(word_lists, constraints=[None] * len(word_lists))
    own = [Constraints(forced=[(first, last, label) for label, first, last
                               in preorder_constituents(result.tree) if rng.random() < 0.5])
           for result in plain]
    kept = parser.parse_each(word_lists, constraints=own)
    for alone, free, same in zip(plain, unconstrained, kept):
        assert free.bracketed == alone.bracketed and same.bracketed == alone.bracketed
        assert free.score == pytest.approx(alone.score, abs=1e-4)
        assert same.score == pytest.approx(alone.score, abs=1e-4)


def test_constrained_trees_score_no_better_than_the_best_and_keep_given_pos_tags(
        parser, test_split):
    rng = random.Random(2)
    trees = test_split[:40]
    word_lists = [tree.leaves() for tree in trees]
    plain = parser.parse_each(word_lists)
    constraint_sets = []
    for tree in trees:
        base = _gold_consistent(rng, tree, set(parser.phrase_labels), 0.5)
        pos_tags = [pos if pos in parser.pos_tag_names and rng.random() < 0.5 else None
                    for _, pos in tree.pos()]
        constraint_sets.append(Constraints(base.forced, base.forbidden, pos_tags))
    results = parser.parse_each(word_lists, constraints=constraint_sets, batch_size=7)
    assert sum(isinstance(result, ParseResult) for result in results) >= 20
    for alone, constraints, result in zip(plain, constraint_sets, results):
        if isinstance(result, SentenceError):
            continue
        assert result.score <= alone.score + 1e-4
        assert [pos for _, pos in result.tree.pos()] == result.pos_tags
        assert result.pos_tags == [given or predicted for given, predicted
                                   in zip(constraints.pos_tags, alone.pos_tags)]


def test_unsatisfiable_and_bad_constraints_are_refused_alone(parser):
    internal_labels = {label for tag in (t.decode() for t in parser.model.internal_tags.numpy())
                       for label in tags_lib.split_chain(tags_lib.tag_label(tag))}
    only_on_words = sorted(set(parser.phrase_labels) - internal_labels)
    assert only_on_words  # the tiny model has labels only its leaf tags carry
    word_lists = [["a", "b", "c"], ["d", "e"], ["f", "g"], ["h"]]
    results = parser.parse_each(word_lists, constraints=[
        Constraints(forced=[(0, 1, only_on_words[0])]),   # a label no node of 2 words takes
        Constraints(forced=[(0, 2)]),
        None,
        Constraints(forbidden=[(0, 0)], pos_tags=[parser.pos_tag_names[0]])])
    assert results[0].reason == sentences.UNSATISFIABLE
    assert "no tree the model can build" in results[0].detail
    assert results[1].reason == sentences.BAD_CONSTRAINTS
    assert isinstance(results[2], ParseResult) and isinstance(results[3], ParseResult)
    assert results[3].pos_tags == [parser.pos_tag_names[0]]
    with pytest.raises(ValueError, match="constraints has 1 entries for 4 sentences"):
        parser.parse_each(word_lists, constraints=[None])
    with pytest.raises(ValueError, match="different signatures"):
        parser.parse_each(word_lists, constraints=[None] * 4, marginals=True)
    refused = parser.parse_each([["a"]], constraints=[{"forced": [(0, 0)]}])[0]
    assert refused.reason == sentences.BAD_CONSTRAINTS and "got dict" in refused.detail


def test_the_graph_refuses_what_the_host_would_and_answers_unsatisfiable_rows_with_no_tree(
        parser):
    """For TF Serving's own clients, which reach the signature without the host's checks."""
    signature = parser.model.signatures["parse_constrained"]

    def call(*constraint_sets, sentences_=("a b c", "d e")):
        inputs = constraints_lib.as_inputs(list(constraint_sets))
        return signature(sentences=tf.constant(list(sentences_)),
                         **{k: tf.constant(v) for k, v in inputs.items()})

    out = call(Constraints(forced=[(0, 1)], forbidden=[(0, 1)]), None)
    assert out["satisfied"].numpy().tolist() == [False, True]
    assert out["tree"].numpy()[0] == b"" and out["score"].numpy()[0] == 0
    assert out["leaf_tag_ids"].numpy()[0].tolist() == [-1, -1, -1]
    crossing = call(Constraints(forced=[(0, 1), (1, 2)]), None)
    assert crossing["satisfied"].numpy().tolist() == [False, True]
    for constraints, message in (
            (Constraints(forced=[(0, 2)]), "a span of forced_spans is not within"),
            (Constraints(forbidden=[(1, 5)]), "a span of forbidden_spans is not within"),
            (Constraints(forced=[(0, 0, "NOPE")]), "a forced label is not one the model knows"),
            (Constraints(pos_tags=["NOPE", None]), "a given part of speech is not one"),
            (Constraints(pos_tags=["DT", None, "DT"]), "a part of speech is given past the")):
        with pytest.raises(tf.errors.InvalidArgumentError, match="bad_constraints: " + message):
            call(None, constraints)


def test_a_call_whose_constraints_would_need_too_many_score_cells_is_refused(parser):
    """The graph bounds the work of its score tables before making them (a hostile request
    of many padding spans must not take the server's memory)."""
    signature = parser.model.signatures["parse_constrained"]
    tags = max(len(parser.model.leaf_tags.numpy()), len(parser.model.internal_tags.numpy()))
    # Two sentences of up to 3 words:
    spans = export_format.MAX_CONSTRAINT_SCORE_CELLS // (2 * 3 * tags)
    inputs = constraints_lib.as_inputs([None, None])
    inputs["forbidden_spans"] = -np.ones((2, spans, 2), np.int32)
    call = {k: tf.constant(v) for k, v in inputs.items()}
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad_constraints: the constraints "
                                                             "of the call need more than"):
        signature(sentences=tf.constant(["a b c", "d e"]), **call)
    call["forbidden_spans"] = tf.constant(-np.ones((2, spans // 2, 2), np.int32))
    out = signature(sentences=tf.constant(["a b c", "d e"]), **call)
    assert out["satisfied"].numpy().tolist() == [True, True]
    # Labels wider than their spans would make a rule each, past the bound's count.
    call = {k: tf.constant(v) for k, v in inputs.items()}
    call["forced_labels"] = tf.constant(np.full((2, 1000), b"", object))
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad_constraints: forced_labels "
                                                             "must have an entry per span"):
        signature(sentences=tf.constant(["a b c", "d e"]), **call)


@pytest.mark.parametrize("name", export_format.CONSTRAINT_INPUTS)
def test_each_constraint_input_needs_a_row_per_sentence(parser, name):
    """A single row would otherwise be broadcast to every sentence of the call."""
    inputs = {k: tf.constant(v) for k, v in constraints_lib.as_inputs([None, None]).items()}
    inputs[name] = inputs[name][:1]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"bad_constraints: {name} must have a row per sentence"):
        parser.model.signatures["parse_constrained"](sentences=tf.constant(["a b", "c"]),
                                                     **inputs)


def test_a_call_whose_chart_would_be_too_large_is_refused(parser):
    words = [f"w{i}" for i in range(export_format.MAX_CONSTRAINED_WORDS)]
    depth = parser.max_stack_depth
    sentences_per_call = export_format.MAX_CHART_CELLS // (len(words) ** 2 * 2 * depth) + 1
    inputs = {k: tf.constant(v) for k, v in
              constraints_lib.as_inputs([None] * sentences_per_call).items()}
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="too_many_words: the chart of the call needs more than"):
        parser.model.signatures["parse_constrained"](
            sentences=tf.constant([" ".join(words)] * sentences_per_call), **inputs)

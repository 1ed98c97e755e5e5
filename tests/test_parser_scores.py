"""Tests for Parser.parse_each's results (tetra_tf/parser.py) and parse --scores (tetra_tf/parse.py)."""

import io
import math

import numpy as np
import pytest
import tensorflow as tf

from tetra_tf import parse
from tetra_tf.contract.parse_record import ParseResult
from tetra_tf.parser import Parser

SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["Hi"],
    ["-LRB-", "Words", "-RRB-", "``", "quoted", "''"],
    ["She", "says", "he", "even", "left", "early", "."],
]


@pytest.fixture(scope="module")
def parser(tiny_export_dir):
    return Parser(tiny_export_dir)


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.mark.slow
def test_results_hold_trees_tags_and_the_log_probability_of_the_tags(parser):
    results = parser.parse_each(SENTENCES, batch_size=3)
    assert [r.tree for r in results] == parser.parse_sents(SENTENCES)
    assert [r.bracketed for r in results] == [r.bracketed for r in parser.parse_each(SENTENCES)]
    model = parser.model
    leaf_vocab = [t.decode() for t in model.leaf_tags.numpy()]
    internal_vocab = [t.decode() for t in model.internal_tags.numpy()]
    for words, result in zip(SENTENCES, results):
        assert isinstance(result, ParseResult)
        n = len(words)
        assert len(result.pos_tags) == len(result.leaf_tags) == n
        assert len(result.internal_tags) == n - 1
        assert [pos for _, pos in result.tree.pos()] == result.pos_tags
        # The score is the sum of the chosen tags' log-probabilities under the model.
        packed = model.tokenize(words=tf.constant([words]), num_words=tf.constant([n]))
        logits = model.encode(packed["input_word_ids"], packed["input_mask"],
                              packed["input_type_ids"], packed["word_end_positions"])
        leaf = _log_softmax(logits["leaf_logits"].numpy()[0, :n])
        internal = _log_softmax(logits["internal_logits"].numpy()[0, :n - 1])
        expected = (sum(leaf[i, leaf_vocab.index(t)] for i, t in enumerate(result.leaf_tags))
                    + sum(internal[i, internal_vocab.index(t)]
                          for i, t in enumerate(result.internal_tags)))
        assert math.isclose(result.score, expected, rel_tol=1e-4, abs_tol=1e-3)
        assert result.score <= 0.0


def test_parse_scores_writes_score_tab_tree(tiny_export_dir, parser):
    output = io.StringIO()
    lines = "".join(" ".join(words) + "\n" for words in SENTENCES)
    summary = parse.run(tiny_export_dir, io.StringIO(lines), output, parser=parser,
                        scores=True)
    assert summary.trees == summary.lines == len(SENTENCES)
    results = parser.parse_each(SENTENCES)
    written = output.getvalue().splitlines()
    assert len(written) == len(SENTENCES)
    for line, result in zip(written, results):
        score, tree = line.split("\t")
        assert tree == result.bracketed
        assert math.isclose(float(score), result.score, abs_tol=1e-4)
    assert written[0] == parse.format_result(results[0], scores=True)

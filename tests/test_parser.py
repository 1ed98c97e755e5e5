"""Tests for tetra_tf/parser.py: the host-side Parser over an exported SavedModel."""

import os
import random
import sys
import threading
import time

import tetra_tf  # noqa: F401  (selects Keras 2 before TensorFlow loads)

import nltk
import pytest
import tensorflow as tf

from tetra_tf import export, parse, treebank
from tetra_tf import parser as parser_lib
from tetra_tf.parser import Parser, with_pos_tags
from tetra_tf.tags import TagVocabularies

sys.path.insert(0, os.path.dirname(__file__))
import tiny_model  # noqa: E402

SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["Hi"],
    ["-LRB-", "1\\/2", "-RRB-", "``", "quoted", "''"],
    ["(", ")", "a(b)", ":-)"],  # brackets inside words stay verbatim in nltk trees
    ["Büro", "東京", "naïve", "\u200b"],  # the zero-width space is a word, not whitespace
    ["She", "says", "he", "even", "left", "early", "."],
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tiny_model"))
    tiny_model.make_model_dir(path)
    return path


@pytest.fixture(scope="module")
def parser(model_dir, tmp_path_factory):
    export_dir = os.path.join(str(tmp_path_factory.mktemp("export")), "1")
    export.export(model_dir, export_dir)
    return Parser(export_dir)


@pytest.fixture(scope="module")
def vocabs(model_dir):
    return TagVocabularies.load(os.path.join(model_dir, "vocab"))


def _preterminals(tree: nltk.Tree) -> list[str]:
    return [pos for _, pos in tree.pos()]


def test_parse_gives_top_tree_with_verbatim_words_and_predicted_pos(parser, vocabs):
    for words in SENTENCES:
        tree = parser.parse(words)
        assert isinstance(tree, nltk.Tree)
        assert tree.label() == "TOP"
        assert tree.leaves() == words
        assert all(pos in vocabs.pos for pos in _preterminals(tree))
        # Every word sits directly under its POS tag.
        for position in tree.treepositions("leaves"):
            assert len(tree[position[:-1]]) == 1


def test_parse_sents_keeps_order_and_matches_single_parses(parser):
    rng = random.Random(0)
    sentences = [rng.choice(SENTENCES)[:rng.randint(1, 7)] for _ in range(40)]
    singles = [parser.parse(words) for words in sentences[:8]]
    for batch_size in (1, 3, 64):
        trees = parser.parse_sents(sentences, batch_size=batch_size)
        assert [t.leaves() for t in trees] == sentences
        assert trees[:8] == singles
    assert parser.parse_sents([]) == []


def test_parse_to_strings_matches_trees(parser):
    trees = parser.parse_sents(SENTENCES)
    lines = parser.parse_to_strings(SENTENCES, batch_size=2)
    # Words with brackets make a line that no reader can split back; compare the others.
    for words, tree, line in zip(SENTENCES, trees, lines):
        if not any("(" in w or ")" in w for w in words):
            assert line == treebank.tree_to_line(tree)
            assert nltk.Tree.fromstring(line) == tree


def test_progress_callback_counts_sentences(parser):
    counts = []
    parser.parse_sents(SENTENCES * 3, batch_size=4, progress=counts.append)
    assert sum(counts) == len(SENTENCES) * 3 and max(counts) <= 4


def test_sentence_longer_than_the_encoder_parses(parser):
    rng = random.Random(1)
    words = [rng.choice(["the", "cat", "sat", "Smith", "1\\/2", "quoted", "on", "."])
             for _ in range(1000)]
    # More subword pieces than one 512-piece window holds.
    assert sum(len(w) for w in words) > 1000
    tree, short = parser.parse_sents([words, ["Hi"]])
    assert tree.label() == "TOP" and tree.leaves() == words
    assert short.leaves() == ["Hi"]


@pytest.mark.parametrize("sentence, message", [
    ([], "sentence 1 has no words"),
    (["a", ""], "sentence 1: word 1 is empty"),
    (["a b"], "word 0 .* contains whitespace"),
    (["a", "b\tc"], "word 1 .* contains whitespace"),
    (["\u3000"], "contains whitespace"),
    ("a sentence", "expected a list of words"),
])
def test_bad_sentences_are_value_errors(parser, sentence, message):
    with pytest.raises(ValueError, match=message):
        parser.parse_sents([["ok"], sentence])


@pytest.mark.parametrize("word, kind", [
    (3, "int 3"), (None, "None"), (b"bytes", "bytes b'bytes'"), (["nested"], "list"),
    (1.5, "float")])
def test_non_string_words_are_value_errors_naming_sentence_and_word(parser, word, kind):
    with pytest.raises(ValueError, match=rf"^sentence 2: word 1 is {kind}.*not a string$"):
        parser.parse_sents([["ok"], ["fine"], ["a", word, "c"]])
    with pytest.raises(ValueError, match="sentence 0: expected a list of words, got int"):
        parser.parse_sents([7])


def test_wide_sentence_parses_without_recursion_limits(parser):
    """1,000 equal words (the server's limit) and 3,000: trees as deep as the words."""
    for count in (1000, 3000):
        words = ["word"] * count
        tree = parser.parse(words)
        assert treebank.leaves(tree) == words
        gold = with_pos_tags(tree, ["NN"] * count)
        assert [n.label() for n in treebank.iter_subtrees(gold)
                if len(n) == 1 and isinstance(n[0], str)] == ["NN"] * count
        (line,) = parser.parse_to_strings([words])
        assert treebank.trees_equal(treebank.parse_tree(line), tree)


def test_brackets_in_words_read_back_one_leaf_per_word(parser):
    """The SavedModel's tree strings escape brackets as the parse CLI does."""
    sentences = SENTENCES + [["f(x)", "((", "))", "[a]", "{b}", "-LRB-"]]
    for words, line in zip(sentences, parser.parse_to_strings(sentences)):
        leaves = nltk.Tree.fromstring(line).leaves()
        assert leaves == [parse.escape_brackets(w) for w in words]


def test_batches_stay_within_the_graphs_piece_bound(parser):
    """Many long sentences are split into calls under max_pieces_per_call; a sentence over
    it alone is a ValueError naming it."""
    limits = parser.limits
    assert limits["max_pieces_per_word"] == 8 and limits["max_pieces_per_call"] == 32768
    sentences = [["!" * 8] * 1000 for _ in range(6)]  # 48,000 pieces in all
    assert [len(tree.leaves()) for tree in parser.parse_sents(sentences)] == [1000] * 6
    with pytest.raises(ValueError, match=r"^sentence 1: the call holds 32776 subword pieces"):
        parser.parse_sents([["ok"], ["!" * 8] * 4097])


def test_parse_each_gives_trees_with_scores_in_input_order(parser):
    counts = []
    results = parser.parse_each(SENTENCES, batch_size=2, progress=counts.append)
    assert [r.bracketed for r in results] == parser.parse_to_strings(SENTENCES)
    assert [r.score for r in results] == pytest.approx(
        [r.score for r in parser.parse_results(SENTENCES)], abs=1e-5)
    assert sum(counts) == len(SENTENCES) and max(counts) == 2


def test_parse_each_fails_only_the_sentence_that_fails_alone(parser):
    sentences = [["The", "cat", "sat"], ["a", ""], ["Hi"], ["She", "left", "."]]
    with pytest.raises(ValueError, match="sentence 1: word 1 is empty"):
        parser.parse_to_scored_strings(sentences)  # the batch fails as a whole
    failed_batches = []
    results = parser.parse_each(sentences, on_failed_batch=failed_batches.append)
    assert failed_batches == [len(sentences)]
    assert isinstance(results[1], ValueError)
    assert str(results[1]) == "sentence 0: word 1 is empty"  # as parsed alone
    for index in (0, 2, 3):
        assert results[index] == parser.parse_to_scored_strings([sentences[index]])[0]
    # Errors outside `errors` are not caught.
    with pytest.raises(ValueError, match="word 1 is empty"):
        parser.parse_each(sentences, errors=(TypeError,))


class _CountingCalls:
    """Wraps a Parser's signature: counts the calls in flight at once and their threads.

    A call whose sentences hold the word `reject` fails as the graph's checks do. Until
    `peak` calls have been in flight together, each call waits (up to 10 s) for the
    others, so an overlap that may happen is seen whatever the machine's load.
    """

    def __init__(self, serve, peak, reject=None):
        self._serve = serve
        self._reject = reject
        self._peak = peak
        self._changed = threading.Condition()
        self.in_flight = self.most_in_flight = self.calls = 0
        self.threads = set()

    def __call__(self, **inputs):
        with self._changed:
            self.in_flight += 1
            self.calls += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.threads.add(threading.current_thread().name)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self.most_in_flight >= self._peak, timeout=10)
        try:
            if self._reject and any(self._reject in s.decode() for s in
                                    inputs["sentences"].numpy()):
                raise tf.errors.InvalidArgumentError(None, None, f"{self._reject} rejected")
            return self._serve(**inputs)
        finally:
            with self._changed:
                self.in_flight -= 1

    def reset(self, peak):
        self.most_in_flight, self.threads, self._peak = 0, set(), peak


@pytest.mark.parametrize("concurrent_calls", [1, 2, 3])
def test_concurrent_calls_overlap_batches_and_keep_results_in_order(parser, concurrent_calls,
                                                                    monkeypatch):
    rng = random.Random(1)
    sentences = [rng.choice(SENTENCES)[:rng.randint(1, 7)] for _ in range(30)]
    expected = parser.parse_to_strings(sentences, batch_size=64)
    counting = _CountingCalls(parser._serve, concurrent_calls)
    monkeypatch.setattr(parser, "_serve", counting)
    monkeypatch.setattr(parser, "concurrent_calls", concurrent_calls)
    counts = []
    assert parser.parse_to_strings(sentences, batch_size=3, progress=counts.append) == expected
    assert counting.calls == 10 and counts == [3] * 10
    assert counting.most_in_flight == concurrent_calls
    counting.reset(concurrent_calls)
    assert [r.bracketed for r in parser.parse_each(sentences, batch_size=3)] == expected
    assert counting.most_in_flight == concurrent_calls
    assert [t.leaves() for t in parser.parse_sents(sentences, batch_size=4)] == sentences
    # One batch runs in the calling thread, with no pool.
    counting.reset(1)
    assert parser.parse_to_strings(sentences[:3]) == expected[:3]
    assert counting.threads == {threading.current_thread().name}


def test_parse_each_retries_stay_within_the_concurrent_calls(parser, monkeypatch):
    # Sorted by length, in batches of two: [g, h], [a X, bbbbbb c], [dddd X, eeeeeeeeee ff].
    sentences = [["a", "REJECT"], ["bbbbbb", "c"], ["dddd", "REJECT"], ["eeeeeeeeee", "ff"],
                 ["g"], ["h"]]
    counting = _CountingCalls(parser._serve, 2, reject="REJECT")
    monkeypatch.setattr(parser, "_serve", counting)
    failed_batches = []
    results = parser.parse_each(sentences, batch_size=2, on_failed_batch=failed_batches.append)
    assert [isinstance(r, ValueError) for r in results] == [True, False, True, False, False,
                                                            False]
    assert failed_batches == [2, 2]  # two batches each hold a REJECT sentence
    assert str(results[0]) == "sentence 0: REJECT rejected"
    # 3 batch calls, then each failed batch's two sentences alone, within two at a time.
    assert counting.calls == 3 + 4 and counting.most_in_flight == 2


def test_parse_each_batches_are_model_calls_and_only_the_failed_one_is_retried(
        parser, monkeypatch):
    """Batches respect the graph's word bound (4096 words here), so a failed batch is one
    call: only its sentences are parsed again alone."""
    long = [["w" * 7] * 1000 for _ in range(5)]
    rejected = ["w" * 7] * 999 + ["REJECT"]  # the shortest: first, with long[0:3]
    counting = _CountingCalls(parser._serve, 1, reject="REJECT")
    monkeypatch.setattr(parser, "_serve", counting)
    failed_batches = []
    results = parser.parse_each(long + [rejected], on_failed_batch=failed_batches.append)
    assert failed_batches == [4]  # [rejected, long 0-2]; [long 3-4] passed
    assert counting.calls == 2 + 4
    assert isinstance(results[5], ValueError)
    assert [len(nltk.Tree.fromstring(r.bracketed).leaves()) for r in results[:5]] == [1000] * 5


def test_in_order_runs_ahead_by_at_most_in_flight_and_hands_over_errors():
    started, consumed = [], []

    def work(item):
        started.append(item)
        if item == 5:
            raise KeyError(item)
        return item * 10

    results = []
    for future in parser_lib._in_order(work, list(range(9)), 2):
        time.sleep(0.01)  # A slow consumer: the pool must not run far ahead of it.
        assert len(started) <= len(consumed) + 3
        consumed.append(future)
        try:
            results.append(future.result())
        except KeyError as e:
            results.append(f"error {e}")
    assert results == [0, 10, 20, 30, 40, "error 5", 60, 70, 80]
    # The sequential path hands over errors the same way.
    assert [f.exception() is not None for f in parser_lib._in_order(work, [4, 5], 1)] == [
        False, True]


def test_in_order_nests_no_pools_and_leaves_no_threads_when_closed_early():
    def inner_threads(item):
        """(the outer worker's thread, the threads the inner calls ran on)."""
        return threading.current_thread().name, {f.result() for f in parser_lib._in_order(
            lambda _: threading.current_thread().name, [1, 2, 3], 3)}

    pairs = [f.result() for f in parser_lib._in_order(inner_threads, [1, 2, 3, 4], 2)]
    for outer, inner in pairs:  # each inner call ran on its outer worker's thread
        assert outer.startswith("tetra-parse") and inner == {outer}

    results = parser_lib._in_order(lambda item: time.sleep(0.01) or item, list(range(20)), 2)
    assert next(results).result() == 0
    results.close()  # The consumer stops early: what has not started is cancelled.
    assert not [t for t in threading.enumerate() if t.name.startswith("tetra-parse")]


def test_bad_concurrent_calls(parser):
    before = parser.concurrent_calls
    with pytest.raises(ValueError, match="concurrent_calls must be a positive integer, got 0"):
        Parser(parser.export_dir, concurrent_calls=0)
    with pytest.raises(ValueError, match="got 1.5"):
        parser.concurrent_calls = 1.5
    assert parser.concurrent_calls == before  # unchanged


def test_bad_batch_size(parser):
    with pytest.raises(ValueError, match="batch_size"):
        parser.parse_sents([["a"]], batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        parser.parse_each([["a"]], batch_size=0)


def test_missing_or_foreign_export_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="no SavedModel"):
        Parser(str(tmp_path / "missing"))
    other = tf.Module()
    other.double = tf.function(lambda x: {"y": 2 * x},
                               input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(other, str(tmp_path / "other"),
                        signatures={"serving_default": other.double})
    with pytest.raises(ValueError, match="not a tetra-tf parser SavedModel"):
        Parser(str(tmp_path / "other"))


def test_max_stack_depth(parser):
    assert parser.max_stack_depth == 8


def test_with_pos_tags():
    tree = nltk.Tree.fromstring("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat))))")
    gold = with_pos_tags(tree, ["X", "Y", "Z"])
    assert gold.pos() == [("The", "X"), ("cat", "Y"), ("sat", "Z")]
    assert tree.pos()[0] == ("The", "DT")  # the input is not changed
    assert [t.label() for t in gold.subtrees()][:3] == ["TOP", "S", "NP"]
    with pytest.raises(ValueError, match="3 words but 2 POS tags"):
        with_pos_tags(tree, ["X", "Y"])

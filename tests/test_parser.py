"""Tests for tetra_tf/parser.py: the host-side Parser over an exported SavedModel."""

import os
import random
import threading
import time
import types

import tetra_tf.contract.text

import nltk
import pytest
import tensorflow as tf

from tetra_tf import parser as parser_lib
from tetra_tf.contract import sentences as sentences_lib
from tetra_tf.contract.parse_record import ParseResult
from tetra_tf.contract.sentences import SentenceError, escape_leaf
from tetra_tf.errors import ExportError
from tetra_tf.parser import ModelError, Parser
from tetra_tf.trees import treebank
from tetra_tf.trees.tags import TagVocabularies
from tetra_tf.trees.treebank import with_pos_tags

SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["Hi"],
    ["-LRB-", "1\\/2", "-RRB-", "``", "quoted", "''"],
    ["(", ")", "a(b)", ":-)"],  # brackets inside words are PTB-escaped in the trees' leaves
    ["Büro", "東京", "naïve", "\u200b"],  # the zero-width space is a word, not whitespace
    ["She", "says", "he", "even", "left", "early", "."],
]


@pytest.fixture(scope="module")
def parser(tiny_export_dir):
    return Parser(tiny_export_dir)


@pytest.fixture(scope="module")
def vocabs(tiny_model_dir):
    return TagVocabularies.load(os.path.join(tiny_model_dir, "vocab"))


def _preterminals(tree: nltk.Tree) -> list[str]:
    return [pos for _, pos in tree.pos()]


def _leaves(words):
    """The leaves a tree of these words has: each word with its brackets PTB-escaped."""
    return [escape_leaf(word) for word in words]


def test_parse_gives_top_tree_with_escaped_words_and_predicted_pos(parser, vocabs):
    for words in SENTENCES:
        tree = parser.parse(words)
        assert isinstance(tree, nltk.Tree)
        assert tree.label() == "TOP"
        assert tree.leaves() == _leaves(words)
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
        assert [t.leaves() for t in trees] == [_leaves(words) for words in sentences]
        assert trees[:8] == singles
    assert parser.parse_sents([]) == []


def test_bracketed_strings_match_trees(parser):
    trees = parser.parse_sents(SENTENCES)
    results = parser.parse_each(SENTENCES, batch_size=2)
    # Brackets inside words are escaped, so every line reads back as its tree.
    for tree, result in zip(trees, results):
        assert isinstance(result, ParseResult)
        assert result.bracketed == treebank.tree_to_line(tree)
        assert nltk.Tree.fromstring(result.bracketed) == tree
        assert result.tree == tree


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


@pytest.mark.parametrize("sentence, reason, message", [
    ([], "empty", "^empty: sentence 1: no words$"),
    (["a", ""], "bad_words", "^bad_words: sentence 1: word 1 is empty$"),
    (["a b"], "bad_words", "word 0 .* contains whitespace"),
    (["a", "b\tc"], "bad_words", "word 1 .* contains whitespace"),
    (["\u3000"], "bad_words", "contains whitespace"),
    (["a\u2028b"], "bad_words", "contains whitespace"),
    ("a sentence", "bad_words", "expected a list of words"),
])
def test_bad_sentences_are_sentence_errors(parser, sentence, reason, message):
    with pytest.raises(SentenceError, match=message) as raised:
        parser.parse_sents([["ok"], sentence])
    assert raised.value.reason == reason
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize("word, kind", [
    (3, "int 3"), (None, "NoneType None"), (b"bytes", "bytes b'bytes'"), (["nested"], "list"),
    (1.5, "float")])
def test_non_string_words_are_sentence_errors_naming_sentence_and_word(parser, word, kind):
    with pytest.raises(SentenceError,
                       match=rf"^bad_words: sentence 2: word 1 is {kind}.*not a string$"):
        parser.parse_sents([["ok"], ["fine"], ["a", word, "c"]])
    with pytest.raises(SentenceError,
                       match="^bad_words: sentence 0: expected a list of words, got int"):
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
        (result,) = parser.parse_each([words])
        assert treebank.trees_equal(treebank.parse_tree(result.bracketed), tree)


def test_brackets_in_words_read_back_one_leaf_per_word(parser):
    """The SavedModel's tree strings escape all six brackets by the sentence contract's
    table (sentences.escape_leaf)."""
    sentences = SENTENCES + [["f(x)", "((", "))", "[a]", "{b}", "-LRB-", "]}[{"]]
    for words, result in zip(sentences, parser.parse_each(sentences)):
        leaves = nltk.Tree.fromstring(result.bracketed).leaves()
        assert leaves == [escape_leaf(w) for w in words] == result.tree.leaves()
    assert escape_leaf("]}[{") == "-RSB--RCB--LSB--LCB-"


def test_batches_stay_within_the_graphs_piece_bound(parser):
    """Many long sentences are split into calls under max_pieces_per_call; a sentence over
    it alone is a SentenceError (too_many_pieces) naming it."""
    limits = parser.export_limits
    assert limits["max_pieces_per_word"] == 8 and limits["max_pieces_per_call"] == 32768
    assert parser.sentence_limits == sentences_lib.SentenceLimits(
        max_pieces=32768, max_pieces_per_word=8)
    sentences = [["!" * 8] * 1000 for _ in range(6)]  # 48,000 pieces in all
    assert [len(tree.leaves()) for tree in parser.parse_sents(sentences)] == [1000] * 6
    with pytest.raises(SentenceError, match=r"^too_many_pieces: sentence 1: 32776 subword "
                       r"pieces, more than the model takes in one call \(32768") as raised:
        parser.parse_sents([["ok"], ["!" * 8] * 4097])
    assert raised.value.reason == "too_many_pieces"


def test_parse_each_gives_trees_with_scores_in_input_order(parser):
    counts = []
    results = parser.parse_each(SENTENCES, batch_size=2, progress=counts.append)
    assert all(isinstance(r, ParseResult) for r in results)
    assert [r.tree for r in results] == parser.parse_sents(SENTENCES)
    assert [r.score for r in results] == pytest.approx(
        [r.score for r in parser.parse_each(SENTENCES, batch_size=64)], abs=1e-5)
    assert all(r.score <= 0 for r in results)
    assert [len(r.pos_tags) for r in results] == [len(words) for words in SENTENCES]
    assert sum(counts) == len(SENTENCES) and max(counts) == 2


def test_parse_each_refuses_each_bad_sentence_with_its_reason_and_parses_the_rest(
        parser, monkeypatch):
    good = [["The", "cat", "sat"], ["Hi"], ["She", "left", "."]]
    bad = {  # index in the input → (the sentence, its reason)
        1: ([], "empty"),
        2: (["a", ""], "bad_words"),
        4: ("a sentence", "bad_words"),
        5: (["a\u00a0b"], "bad_words"),
        6: (["w"] * 6, "bad_words"),                  # a word of whitespace only
        7: (["x"] * 40000, "too_many_pieces"),        # more words than the export's pieces
        8: (["!" * 8] * 4097, "too_many_pieces"),     # refused by the graph (32776 pieces)
        9: (["a", "REJECT"], "rejected"),             # refused by the graph for another reason
        10: (["caf\udce9", "."], "not_utf8"),         # a lone surrogate (surrogateescape)
    }
    bad[6][0][3] = "\u2003"
    sentences = [None] * (len(good) + len(bad))
    for index, (sentence, _) in bad.items():
        sentences[index] = sentence
    good_indices = [i for i, sentence in enumerate(sentences) if sentence is None]
    for index, words in zip(good_indices, good):
        sentences[index] = words
    alone = [parser.parse_each([words])[0] for words in good]
    counting = _CountingCalls(parser._serve, 1, reject="REJECT")
    monkeypatch.setattr(parser, "_serve", counting)
    counts = []
    results = parser.parse_each(sentences, batch_size=4, progress=counts.append)
    assert sum(counts) == len(sentences)
    for index, (_, reason) in bad.items():
        assert isinstance(results[index], SentenceError), index
        assert results[index].reason == reason, (index, str(results[index]))
        assert str(results[index]).startswith(f"{reason}: ")
    assert str(results[2]) == "bad_words: word 1 is empty"
    assert str(results[7]).startswith("too_many_pieces: 40000 words, so at least 40000 "
                                      "subword pieces")
    assert str(results[8]).startswith("too_many_pieces: 32776 subword pieces")
    assert str(results[9]) == "rejected: REJECT rejected"
    assert str(results[10]) == ("not_utf8: word 0 is not valid UTF-8 (unpaired surrogate "
                                "U+DCE9 at character 4)")
    # The others parse as they do alone.
    assert [results[i].bracketed for i in good_indices] == [r.bracketed for r in alone]
    assert [results[i].score for i in good_indices] == pytest.approx(
        [r.score for r in alone], abs=1e-5)
    # A caller's own limits only lower the export's: too_many_words over max_words.
    lowered = parser.sentence_limits.lowered(max_words=5)
    assert lowered.max_pieces == 32768
    results = parser.parse_each([["w"] * 6, ["w"] * 5], limits=lowered)
    assert str(results[0]) == "too_many_words: 6 words, more than max_words=5"
    assert results[0].reason == "too_many_words"
    assert isinstance(results[1], ParseResult)


def test_parse_text_gives_each_sentence_its_tokens_offsets_and_parse(parser):
    text = "It rained. " + " ".join(["Word"] * 30) + ". We left (early)."
    limits = parser.sentence_limits.lowered(max_words=20)
    found = parser.parse_text(text, limits=limits)
    assert [s.words[:2] for s in found] == [["It", "rained"], ["Word", "Word"], ["We", "left"]]
    assert [(s.start, s.end) for s in found] == [(0, 11), (11, 162), (162, 178)]
    assert found[0].result.bracketed == parser.parse_each([["It", "rained", "."]])[0].bracketed
    assert isinstance(found[1].result, SentenceError)  # refused alone: 31 words
    assert found[1].result.reason == sentences_lib.TOO_MANY_WORDS
    assert found[2].tokens[2] == tetra_tf.contract.text.Token("-LRB-", 170, 171)
    assert _leaves(found[2].words) == found[2].result.tree.leaves()
    # Many texts at once: the same sentences; one sentence when not split (blank: refused).
    def summary(sentences):
        return [(s.start, s.end, s.tokens, str(s.result) if isinstance(s.result, SentenceError)
                 else s.result.bracketed) for s in sentences]

    again, blank_text = parser.parse_texts([text, ""], limits=limits)
    assert summary(again) == summary(found) and blank_text == []
    (whole,) = parser.parse_text("It rained. We left.", split_sentences=False)
    assert whole.words == ["It", "rained.", "We", "left", "."]
    (blank,) = parser.parse_text(" ", split_sentences=False)
    assert blank.result.reason == sentences_lib.EMPTY
    with pytest.raises(TypeError, match="text 1 is bytes, not str"):
        parser.parse_texts(["ok", b"bytes"])


def test_marginals_come_with_the_same_parses_one_per_constituent(parser):
    word_lists = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hi"], [], ["a", "b"]]
    plain = parser.parse_each(word_lists)
    with_marginals = parser.parse_each(word_lists, marginals=True, batch_size=2)
    assert plain[0].constituents is None and plain[0].tree_probability is None
    assert isinstance(with_marginals[2], SentenceError)  # refused as without marginals
    for alone, result in zip(plain, with_marginals):
        if isinstance(alone, SentenceError):
            continue
        assert result.bracketed == alone.bracketed and result.score == alone.score
        tree = result.tree
        constituents = result.constituents
        # One per bracket but the root's and the parts of speech', in the string's order.
        brackets = [t for t in tree.subtrees() if t is not tree and not isinstance(t[0], str)]
        assert [c.label for c in constituents] == [t.label() for t in brackets]
        for constituent, bracket in zip(constituents, brackets):
            words = tree.leaves()
            assert words[constituent.start:constituent.end + 1] == bracket.leaves()
            # The tree holds the constituent, so it is at least as likely as the tree.
            assert result.tree_probability - 1e-5 <= constituent.probability <= 1 + 1e-6
    (sentence,) = parser.parse_text("The cat sat.", marginals=True)
    assert sentence.result.constituents[0].probability > 0


def test_span_marginals_list_every_labelled_span_at_or_above_the_floor(parser):
    word_lists = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hi"], [], ["a", "b"]]
    with_marginals = parser.parse_each(word_lists, marginals=True)
    every = parser.parse_each(word_lists, span_marginals=0.0, batch_size=3)
    likely = parser.parse_each(word_lists, span_marginals=0.2)
    assert with_marginals[0].span_marginals is None
    assert isinstance(every[2], SentenceError) and isinstance(likely[2], SentenceError)
    for plain, result, above in zip(with_marginals, every, likely):
        if isinstance(plain, SentenceError):
            continue
        # What marginals=True gives, and besides it every span the model admits.
        assert result.bracketed == plain.bracketed
        assert result.constituent_marginals == pytest.approx(plain.constituent_marginals)
        n = len(result.pos_tags)
        table = {(c.label, c.start, c.end): c.probability for c in result.span_marginals}
        assert len(table) == len(result.span_marginals)  # each labelled span once
        assert all(0 < p <= 1 and 0 <= start <= end < n
                   for (_, start, end), p in table.items())
        labels = parser.phrase_labels
        order = [(c.start, c.end, labels.index(c.label)) for c in result.span_marginals]
        assert order == sorted(order)  # by first word, last word, then label
        for constituent in plain.constituents:
            assert table[(constituent.label, constituent.start, constituent.end)] == \
                pytest.approx(constituent.probability, abs=1e-5)
        # The floor keeps exactly those at or above it.
        kept = {(c.label, c.start, c.end) for c in above.span_marginals}
        assert {key for key, p in table.items() if p >= 0.2 + 1e-5} <= kept
        assert kept <= {key for key, p in table.items() if p >= 0.2 - 1e-5}
        assert len(kept) < len(table)
    for bad in (1.5, -0.1, float("nan"), True):
        with pytest.raises(ValueError, match="span_marginals is a probability from 0 to 1"):
            parser.parse_each(word_lists, span_marginals=bad)
    with pytest.raises(ValueError, match=r"span_marginals\), k_best and constraints come"):
        parser.parse_each(word_lists, k_best=True, span_marginals=0.1)


def test_span_marginals_of_texts_are_those_of_their_words(parser):
    """parse_text(s)(span_marginals=p) gives each sentence what parse_each gives its words."""
    (document,) = parser.parse_texts(["It rained. We left (early)."], span_marginals=0.05)
    expected = parser.parse_each([s.words for s in document], span_marginals=0.05)
    for sentence, result in zip(document, expected, strict=True):
        assert sentence.result.bracketed == result.bracketed
        assert [(c.label, c.start, c.end) for c in sentence.result.span_marginals] == [
            (c.label, c.start, c.end) for c in result.span_marginals]
        assert [c.probability for c in sentence.result.span_marginals] == pytest.approx(
            [c.probability for c in result.span_marginals], abs=1e-5)
        assert sentence.result.constituent_marginals == pytest.approx(
            result.constituent_marginals, abs=1e-5)
    (sentence,) = parser.parse_text("Hi.", span_marginals=0.0)
    assert sentence.result.span_marginals
    with pytest.raises(ValueError, match="span_marginals is a probability from 0 to 1"):
        parser.parse_texts(["Hi."], span_marginals=float("nan"))


def test_span_marginals_batches_stay_within_the_signatures_cells(parser, monkeypatch):
    """parse_span_marginals refuses a call of more than its cells (sentences × longest
    words² × the larger of labels and 2 · (depth + 1)): the Parser's batches stay within."""
    from tetra_tf.contract import export_format

    per_word_squared = max(len(parser.phrase_labels), 2 * (parser.max_stack_depth + 1))
    monkeypatch.setattr(export_format, "MAX_SPAN_MARGINAL_CELLS", 2000 * per_word_squared)
    recorded = []
    call = parser._call

    def recording_call(joined, *args):
        recorded.append([sentence.count(" ") + 1 for sentence in joined])
        return call(joined, *args)

    monkeypatch.setattr(parser, "concurrent_calls", 1)
    monkeypatch.setattr(parser, "_call", recording_call)
    word_lists = [["word"] * n for n in (3, 30, 5, 1, 12, 8, 20, 30)]
    results = parser.parse_each(word_lists, span_marginals=0.5)
    assert all(isinstance(result, ParseResult) for result in results)
    # 6 × 20² and 3 × 30² would pass 2,000: new batches start there.
    assert recorded == [[1, 3, 5, 8, 12], [20, 30], [30]]
    recorded.clear()
    parser.parse_each(word_lists, marginals=True)  # no such bound: one batch
    assert recorded == [[1, 3, 5, 8, 12, 20, 30, 30]]


def test_k_best_trees_start_with_the_best_and_come_best_first(parser):
    from tetra_tf.contract.export_format import K_BEST

    word_lists = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hi"], []]
    plain = parser.parse_each(word_lists)
    results = parser.parse_each(word_lists, k_best=True)
    assert plain[0].k_best is None and isinstance(results[2], SentenceError)
    for alone, result in zip(plain[:2], results[:2]):
        assert result.bracketed == alone.bracketed
        assert result.k_best[0] == (alone.bracketed, pytest.approx(alone.score))
        scores = [score for _, score in result.k_best]
        assert scores == sorted(scores, reverse=True) and 1 <= len(scores) <= K_BEST
        for tree, _ in result.k_best:
            assert treebank.parse_tree(tree).leaves() == result.tree.leaves()
    assert len(results[0].k_best) == K_BEST  # seven words have more trees than that
    with pytest.raises(ValueError, match=r"span_marginals\), k_best and constraints come"):
        parser.parse_each(word_lists, marginals=True, k_best=True)


def test_marginals_refuse_a_sentence_over_their_word_bound_alone(parser):
    from tetra_tf.contract.export_format import MAX_MARGINALS_WORDS

    long = [f"w{i}" for i in range(MAX_MARGINALS_WORDS + 1)]
    results = parser.parse_each([["a", "b"], long], marginals=True)
    assert results[0].constituents is not None
    assert results[1].reason == sentences_lib.TOO_MANY_WORDS
    assert str(MAX_MARGINALS_WORDS) in results[1].detail
    assert isinstance(parser.parse_each([long])[0], ParseResult)  # no bound without them


def test_marginals_of_an_export_without_the_signature_are_an_export_error(parser,
                                                                             monkeypatch):
    signatures = {name: signature for name, signature in parser.model.signatures.items()
                  if name != "parse_marginals"}
    monkeypatch.setattr(parser, "_model", types.SimpleNamespace(signatures=signatures))
    with pytest.raises(ExportError, match="has no parse_marginals signature .* export it "
                                          "again"):
        parser.parse_each([["a"]], marginals=True)


@pytest.mark.parametrize("failure", [
    RuntimeError("the device is gone"),
    tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor"),
    tf.errors.InternalError(None, None, "internal"),
])
def test_a_failing_model_raises_model_error_at_once_without_retries(parser, monkeypatch,
                                                                    failure):
    calls = []

    def failing(**inputs):
        calls.append(len(inputs["sentences"].numpy()))
        raise failure

    monkeypatch.setattr(parser, "_serve", failing)
    monkeypatch.setattr(parser, "concurrent_calls", 1)
    with pytest.raises(ModelError, match=f"^the model failed: {type(failure).__name__}: "):
        parser.parse_each(SENTENCES, batch_size=2)
    assert calls == [2]  # the first batch's call, not its sentences again one at a time
    calls.clear()
    with pytest.raises(ModelError):
        parser.parse_sents([["Hi"]])
    assert calls == [1]
    calls.clear()
    # With concurrent calls, the batches already started stop there too.
    monkeypatch.setattr(parser, "concurrent_calls", 2)
    with pytest.raises(ModelError):
        parser.parse_each(SENTENCES * 4, batch_size=2)
    assert len(calls) <= 3 and all(count == 2 for count in calls)
    assert not issubclass(ModelError, ValueError)  # never taken for a refused sentence


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
    expected = [r.bracketed for r in parser.parse_each(sentences, batch_size=64)]
    counting = _CountingCalls(parser._serve, concurrent_calls)
    monkeypatch.setattr(parser, "_serve", counting)
    monkeypatch.setattr(parser, "concurrent_calls", concurrent_calls)
    counts = []
    assert [t.leaves() for t in parser.parse_sents(sentences, batch_size=3,
                                                   progress=counts.append)] == [
        _leaves(words) for words in sentences]
    assert counting.calls == 10 and counts == [3] * 10
    assert counting.most_in_flight == concurrent_calls
    counting.reset(concurrent_calls)
    assert [r.bracketed for r in parser.parse_each(sentences, batch_size=3)] == expected
    assert counting.most_in_flight == concurrent_calls
    assert [t.leaves() for t in parser.parse_sents(sentences, batch_size=4)] == [
        _leaves(words) for words in sentences]
    # Sentences that fit one batch are split among the call slots, which overlap.
    counting.reset(min(concurrent_calls, 3))
    calls_before = counting.calls
    assert [r.bracketed for r in parser.parse_each(sentences[:3])] == expected[:3]
    assert counting.calls - calls_before == min(concurrent_calls, 3)
    assert counting.most_in_flight == min(concurrent_calls, 3)
    if concurrent_calls == 1:  # one batch of several: in the calling thread
        assert counting.threads == {threading.current_thread().name}
    # One batch runs in the calling thread, with no pool.
    counting.reset(1)
    assert [r.bracketed for r in parser.parse_each(sentences[:1])] == expected[:1]
    assert counting.threads == {threading.current_thread().name}


def test_parse_each_retries_stay_within_the_concurrent_calls(parser, monkeypatch):
    # Sorted by length, in batches of two: [g, h], [a X, bbbbbb c], [dddd X, eeeeeeeeee ff].
    sentences = [["a", "REJECT"], ["bbbbbb", "c"], ["dddd", "REJECT"], ["eeeeeeeeee", "ff"],
                 ["g"], ["h"]]
    counting = _CountingCalls(parser._serve, 2, reject="REJECT")
    monkeypatch.setattr(parser, "_serve", counting)
    results = parser.parse_each(sentences, batch_size=2)
    assert [isinstance(r, SentenceError) for r in results] == [True, False, True, False, False,
                                                               False]
    assert str(results[0]) == "rejected: REJECT rejected"
    assert results[2].reason == "rejected"
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
    results = parser.parse_each(long + [rejected])
    # [rejected, long 0-2] failed and was parsed again alone; [long 3-4] passed.
    assert counting.calls == 2 + 4
    assert isinstance(results[5], SentenceError) and results[5].reason == "rejected"
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


def test_in_order_leaves_no_threads_when_closed_early():
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
    with pytest.raises(ExportError, match="no SavedModel"):
        Parser(str(tmp_path / "missing"))
    other = tf.Module()
    other.double = tf.function(lambda x: {"y": 2 * x},
                               input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(other, str(tmp_path / "other"),
                        signatures={"serving_default": other.double})
    with pytest.raises(ExportError, match="not a tetra-tf parser SavedModel"):
        Parser(str(tmp_path / "other"))


def test_max_stack_depth(parser):
    assert parser.max_stack_depth == 6  # the tiny model's (tests/conftest.py)


def test_with_pos_tags():
    tree = nltk.Tree.fromstring("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat))))")
    gold = with_pos_tags(tree, ["X", "Y", "Z"])
    assert gold.pos() == [("The", "X"), ("cat", "Y"), ("sat", "Z")]
    assert tree.pos()[0] == ("The", "DT")  # the input is not changed
    assert [t.label() for t in gold.subtrees()][:3] == ["TOP", "S", "NP"]
    with pytest.raises(ValueError, match="3 words but 2 POS tags"):
        with_pos_tags(tree, ["X", "Y"])


@pytest.mark.slow
def test_a_parser_in_a_fresh_process_gives_each_concurrent_call_its_share_of_the_cores(parser):
    from conftest import run_python  # pylint: disable=import-outside-toplevel

    code = ("import tetra_tf, tensorflow as tf\n"
            "from tetra_tf import cpu\n"
            "from tetra_tf.parser import Parser\n"
            "parser = Parser(%r, concurrent_calls=%d)\n"
            "print(parser.parse(['The', 'cat', 'sat', '.']).leaves(), cpu.available_cores(),\n"
            "      tf.config.threading.get_intra_op_parallelism_threads())\n")
    for calls in (1, 2):
        leaves, cores, intra_op = run_python(code % (parser.export_dir, calls)).rsplit(" ", 2)
        assert leaves == "['The', 'cat', 'sat', '.']"
        assert int(intra_op) == max(1, int(cores) // calls)


@pytest.mark.parametrize("calls, expected", [
    (1, [[1, 3, 5, 8, 12, 20, 30]]),
    (2, [[1, 3, 5, 8, 12, 20], [30]]),
    (3, [[1, 3, 5, 8, 12], [20], [30]])])
def test_sentences_that_fit_one_batch_are_split_so_every_call_slot_has_work(
        parser, calls, expected, monkeypatch):
    word_lists = [["word"] * n for n in (3, 30, 5, 1, 12, 8, 20)]
    recorded = []
    call = parser._call

    def recording_call(joined):
        recorded.append(sorted(sentence.count(" ") + 1 for sentence in joined))
        return call(joined)

    monkeypatch.setattr(parser, "concurrent_calls", calls)
    monkeypatch.setattr(parser, "_call", recording_call)
    trees = parser.parse_sents(word_lists, batch_size=64)
    assert [len(tree.leaves()) for tree in trees] == [len(w) for w in word_lists]
    assert sorted(recorded) == expected  # the pool's threads record in any order
    recorded.clear()
    parser.parse_sents(word_lists, batch_size=4)  # two batches already: as they are
    assert sorted(recorded) == [[1, 3, 5, 8], [12, 20, 30]]


def test_split_evenly_keeps_order_and_leaves_no_run_empty():
    split = parser_lib._split_evenly
    assert split([0, 1, 2, 3, 4, 5, 6], [1, 1, 1, 1, 1000, 1, 1], 4) == [
        [0, 1, 2, 3], [4], [5], [6]]
    assert split([0, 1, 2], [1000, 1, 1], 3) == [[0], [1], [2]]
    assert split([0, 1, 2], [1, 1, 1], 5) == [[0], [1], [2]]
    assert split([0, 1, 2, 3], [2, 2, 2, 2], 2) == [[0, 1], [2, 3]]
    assert split([0, 1, 2], [0, 0, 0], 2) == [[0], [1, 2]]
    assert split([7], [3], 2) == [[7]]

"""Tests for tetra_tf/export.py: the SavedModel, its signatures and the in-graph trees."""

import json
import os
import random
import shutil
import subprocess
import sys

import nltk
import numpy as np
import pytest
import tensorflow as tf

from tetra_tf import cpu
from tetra_tf.contract import export_format
from tetra_tf.contract.sentences import WHITESPACE, escape_leaf, split_words
from tetra_tf.data import tokenization
from tetra_tf.decode import decoding
from tetra_tf.decode.tree_writer import TreeWriter
from tetra_tf.errors import InputError
from tetra_tf.parser import Parser
from tetra_tf.savedmodel import exporter as export
from tetra_tf.savedmodel.inference_encoder import InferenceEncoder
from tetra_tf.training import encoders
from tetra_tf.training.model_dir import ModelDirError, TaggerSpec, build_tagger
from tetra_tf.trees import tags as tags_lib
from tetra_tf.trees import treebank
from tetra_tf.trees.tags import TagVocabularies

sys.path.insert(0, os.path.dirname(__file__))
import tiny_model  # noqa: E402
from conftest import preorder_constituents, run_cli  # noqa: E402

SENTENCES = ["The cat sat on the mat .", "Mr.  Smith   left", "", "-LRB- 1\\/2 -RRB- ``ok''",
             "Büro ünïcode 東京 ?"]


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    """tests/tiny_model.py's random model at stack depth 6 (shared, read-only)."""
    return tiny_model_dir


@pytest.fixture(scope="module")
def export_dir(tiny_export_dir):
    """Its export (shared, read-only)."""
    return tiny_export_dir


@pytest.fixture(scope="module")
def loaded(export_dir):
    return tf.saved_model.load(export_dir)


@pytest.fixture(scope="module")
def vocabs(model_dir):
    return TagVocabularies.load(os.path.join(model_dir, "vocab"))


def _strings(array) -> list:
    return [value.decode("utf-8") for value in np.asarray(array).ravel()]


# --------------------------------------------------------------------------------------
# In-graph trees


def _random_tree(rng: random.Random, num_words: int, labels=("S", "NP", "VP", "PP", "X")):
    """A random tree over num_words words with n-ary nodes and unary chains."""
    def build(words):
        if len(words) == 1 and rng.random() < 0.6:
            return nltk.Tree(rng.choice(["DT", "NN", "VB"]), [words[0]])
        if len(words) == 1:
            return nltk.Tree(rng.choice(labels), [build(words)])
        cuts = sorted(rng.sample(range(1, len(words)), rng.randint(1, min(3, len(words) - 1))))
        parts = [words[a:b] for a, b in zip([0] + cuts, cuts + [len(words)])]
        node = nltk.Tree(rng.choice(labels), [build(part) for part in parts])
        while rng.random() < 0.2:
            node = nltk.Tree(rng.choice(labels), [node])
        return node

    words = [f"w{i}" if i % 5 else f"(x{i})" for i in range(num_words)]
    return nltk.Tree("TOP", [build(words)])


def _pad(rows, fill, dtype):
    width = max([len(row) for row in rows] + [0])
    array = np.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        array[i, :len(row)] = row
    return array


def _tree_writer_output(taggings, vocabs, extra_empty_rows=0):
    taggings = list(taggings) + [None] * extra_empty_rows
    rows = [t or tags_lib.TetraTags((), (), (), ()) for t in taggings]
    writer = tf.function(TreeWriter(vocabs), autograph=False)
    out = writer(
        tf.constant(_pad([t.words for t in rows], "", object)),
        tf.constant(_pad([t.pos_tags for t in rows], "", object)),
        tf.constant(_pad([vocabs.leaf.ids(t.leaf_tags) for t in rows], -1, np.int32)),
        # Internal ids padded to the words' width (the last word's entry is padding).
        tf.constant(_pad([vocabs.internal.ids(t.internal_tags) + [-1] * bool(t.words)
                          for t in rows], -1, np.int32)),
        tf.constant([len(t.words) for t in rows], tf.int32))
    return _strings(out)


def _expected_line(tagging) -> str:
    """tags_to_tree's tree, its words escaped by the sentence contract (escape_leaf)."""
    words = [escape_leaf(word) for word in tagging.words]
    return treebank.tree_to_line(tags_lib.tags_to_tree(
        words, tagging.pos_tags, tagging.leaf_tags, tagging.internal_tags))


def test_tree_writer_matches_tags_to_tree_on_random_trees():
    rng = random.Random(7)
    taggings = [tags_lib.tree_to_tags(_random_tree(rng, rng.randint(1, 30)))
                for _ in range(300)]
    vocabs = TagVocabularies.build(taggings)
    rng.shuffle(taggings)
    got = _tree_writer_output(taggings, vocabs, extra_empty_rows=2)
    assert got[-2:] == ["", ""]
    for tagging, line in zip(taggings, got):
        assert line == _expected_line(tagging)


def test_tree_writer_matches_tags_to_tree_on_random_derivations():
    # Any valid derivation, not only those of trees tree_to_tags writes: random leaf and
    # internal directions, kept valid by the stack rule, and random labels.
    rng = random.Random(3)
    leaf_tags = ["l", "r", "l/NP", "r/NP", "l/S+VP", "r/ADJP+QP"]
    internal_tags = ["L", "R", "L/S", "R/VP", "L/SBAR+S", "R/NP+NP"]
    vocabs = TagVocabularies(tags_lib.TagVocabulary(leaf_tags),
                             tags_lib.TagVocabulary(internal_tags),
                             tags_lib.TagVocabulary(["NN", "VB"]))
    taggings = []
    for _ in range(200):
        n = rng.randint(1, 25)
        leaves, internals, depth = [], [], 0
        for i in range(n):
            # A leaf: r needs an open slot (depth ≥ 1 after an L/R); the first is l.
            if i == 0 or rng.random() < 0.5 or depth == 0:
                leaves.append(rng.choice(leaf_tags[0::2]))
                depth += 1
            else:
                leaves.append(rng.choice(leaf_tags[1::2]))
            if i == n - 1:
                break
            # Remaining words must be able to close every open slot: prefer R when deep.
            remaining = n - 1 - i
            if depth >= 2 and (rng.random() < 0.5 or depth > remaining):
                internals.append(rng.choice(internal_tags[1::2]))
                depth -= 1
            else:
                internals.append(rng.choice(internal_tags[0::2]))
        candidate = tags_lib.TetraTags(tuple(f"w{i}" for i in range(n)),
                                       tuple(rng.choice(["NN", "VB"]) for _ in range(n)),
                                       tuple(leaves), tuple(internals))
        try:
            tags_lib.tags_to_tree(candidate.words, candidate.pos_tags, candidate.leaf_tags,
                                  candidate.internal_tags)
        except ValueError:
            continue  # not a valid derivation
        taggings.append(candidate)
    assert len(taggings) > 50
    got = _tree_writer_output(taggings, vocabs)
    for tagging, line in zip(taggings, got):
        assert line == _expected_line(tagging)


def test_tree_writer_matches_tags_to_tree_on_treebank_sample():
    try:
        entries = list(treebank.read_nltk_sample("dev"))
    except treebank.NltkSampleNotFoundError:
        pytest.skip("NLTK treebank sample not found")
    trees = [treebank.clean_tree(e.tree) for e in entries if e.tree is not None]
    taggings = [tags_lib.tree_to_tags(t) for t in trees if len(t)]
    vocabs = TagVocabularies.build(taggings)
    got = _tree_writer_output(taggings, vocabs)
    assert got == [_expected_line(t) for t in taggings]


def test_constituents_in_bracket_order_are_the_trees_preorder_on_treebank_sample():
    """TreeWriter.node_spans and in_bracket_order: per-node values listed in the tree
    string's order are each constituent's label and span, chains top first."""
    try:
        entries = list(treebank.read_nltk_sample("dev"))[:120]
    except treebank.NltkSampleNotFoundError:
        pytest.skip("NLTK treebank sample not found")
    trees = [treebank.clean_tree(e.tree) for e in entries if e.tree is not None]
    taggings = [tags_lib.tree_to_tags(t) for t in trees if len(t)]
    vocabs = TagVocabularies.build(taggings)
    labels = sorted({label for tag in (*vocabs.leaf.tags, *vocabs.internal.tags)
                     for label in tags_lib.split_chain(tags_lib.tag_label(tag))})
    longest = 4

    def chain_ids(vocab):
        table = np.full((len(vocab.tags), longest), -1.0)
        for t, tag in enumerate(vocab.tags):
            for c, label in enumerate(tags_lib.split_chain(tags_lib.tag_label(tag))):
                table[t, c] = labels.index(label)
        return table

    leaf_ids = tf.constant(_pad([vocabs.leaf.ids(t.leaf_tags) for t in taggings], 0, np.int32))
    internal_ids = tf.constant(_pad([vocabs.internal.ids(t.internal_tags) + [0]
                                     for t in taggings], 0, np.int32))
    lengths = tf.constant([len(t.words) for t in taggings], tf.int32)
    writer = TreeWriter(vocabs)
    starts, ends = writer.node_spans(leaf_ids, internal_ids, lengths)
    words = tf.broadcast_to(tf.range(tf.shape(leaf_ids)[1])[None, :, None],
                            tf.concat([tf.shape(leaf_ids), [longest]], 0))

    def ordered(leaf_values, internal_values):
        return writer.in_bracket_order(tf.cast(leaf_values, tf.float32),
                                       tf.cast(internal_values, tf.float32),
                                       leaf_ids, internal_ids, lengths).to_list()

    label_rows = ordered(tf.gather(chain_ids(vocabs.leaf), leaf_ids),
                         tf.gather(chain_ids(vocabs.internal), internal_ids))
    first_rows = ordered(words, tf.broadcast_to(starts[..., None], words.shape))
    last_rows = ordered(words, tf.broadcast_to(ends[..., None], words.shape))
    for tagging, label_row, first_row, last_row in zip(taggings, label_rows, first_rows,
                                                        last_rows):
        tree = tags_lib.tags_to_tree(tagging.words, tagging.pos_tags, tagging.leaf_tags,
                                     tagging.internal_tags)
        got = [(labels[int(label)], int(first), int(last))
               for label, first, last in zip(label_row, first_row, last_row)]
        assert got == preorder_constituents(tree)


# --------------------------------------------------------------------------------------
# The SavedModel


def test_layout_assets_and_variables(export_dir, loaded, model_dir, vocabs):
    assert os.path.isfile(os.path.join(export_dir, "saved_model.pb"))
    assert os.path.isfile(os.path.join(export_dir, "assets", "encoder_vocab.txt"))
    assert int(loaded.max_stack_depth.numpy()) == 6 == TaggerSpec.load(model_dir).max_stack_depth
    # What export() exports from a model directory: its best checkpoint.
    assert export.resolve_checkpoint(model_dir)[1] == os.path.join(model_dir, "best", "model")
    assert _strings(loaded.leaf_tags) == vocabs.leaf.tags
    assert _strings(loaded.internal_tags) == vocabs.internal.tags
    assert _strings(loaded.pos_tags) == vocabs.pos.tags
    assert set(loaded.signatures) == {"serving_default", "parse_words", "parse_text",
                                      "parse_marginals", "parse_k_best", "parse_constrained",
                                      "parse_span_marginals"}
    # The labels a forced span may name: every label of every tag's chain.
    assert _strings(loaded.phrase_labels) == sorted(
        {label for tag in vocabs.leaf.tags + vocabs.internal.tags
         for label in tags_lib.split_chain(tags_lib.tag_label(tag))})
    # No staging directory is left next to the version directory.
    assert os.listdir(os.path.dirname(export_dir)) == ["1"]


def test_serving_default_outputs_are_consistent(loaded, vocabs):
    out = {k: v.numpy() for k, v in
           loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES)).items()}
    expected_words = [s.split() for s in SENTENCES]
    assert out["num_words"].tolist() == [len(w) for w in expected_words]
    assert out["words"].shape == out["leaf_tag_ids"].shape == (len(SENTENCES), 7)
    for row, words in enumerate(expected_words):
        n = len(words)
        assert _strings(out["words"][row, :n]) == words  # verbatim, escapes included
        assert (out["leaf_tag_ids"][row, n:] == -1).all()
        assert (out["internal_tag_ids"][row, max(n - 1, 0):] == -1).all()
        leaf = [vocabs.leaf.tag(i) for i in out["leaf_tag_ids"][row, :n]]
        internal = [vocabs.internal.tag(i)
                    for i in out["internal_tag_ids"][row, :max(n - 1, 0)]]
        pos = [vocabs.pos.tag(i) for i in out["pos_tag_ids"][row, :n]]
        assert _strings(out["leaf_tags"][row, :n]) == leaf
        assert _strings(out["internal_tags"][row, :max(n - 1, 0)]) == internal
        assert _strings(out["pos_tags"][row, :n]) == pos
        tree = out["tree"][row].decode("utf-8")
        if n == 0:
            assert tree == "" and out["score"][row] == 0
            continue
        expected = tags_lib.tags_to_tree(words, pos, leaf, internal)
        assert tree == treebank.tree_to_line(expected)
        assert out["score"][row] < 0  # a log-probability


def _tag_log_probabilities(loaded, sentences):
    """The export's own tag log-probabilities for sentences: (words, dense words [B, W],
    lengths, logits, leaf [B, W, NL], internal [B, W, NI])."""
    words = [s.split() for s in sentences]
    dense = tf.constant(_pad(words, "", object))
    lengths = tf.constant([len(w) for w in words], tf.int32)
    packed = loaded.tokenize(dense, lengths)
    logits = loaded.encode(packed["input_word_ids"], packed["input_mask"],
                           packed["input_type_ids"], packed["word_end_positions"])
    return (words, dense, lengths, logits, tf.nn.log_softmax(logits["leaf_logits"]).numpy(),
            tf.nn.log_softmax(logits["internal_logits"]).numpy())


def test_graph_decoding_equals_numpy_decoder(loaded, vocabs):
    words, dense, lengths, logits, leaf, internal = _tag_log_probabilities(loaded, SENTENCES)
    expected = decoding.decode_numpy(leaf, internal, lengths.numpy(), vocabs.leaf.directions(),
                                     vocabs.internal.directions(), 6)
    out = loaded.signatures["parse_words"](words=dense, num_words=lengths)
    np.testing.assert_array_equal(out["leaf_tag_ids"], expected.leaf_tag_ids)
    np.testing.assert_array_equal(out["internal_tag_ids"], expected.internal_tag_ids)
    np.testing.assert_allclose(out["score"], expected.scores, rtol=1e-5)
    np.testing.assert_array_equal(
        out["pos_tag_ids"], np.where(np.arange(leaf.shape[1]) < lengths.numpy()[:, None],
                                     logits["pos_logits"].numpy().argmax(-1), -1))


def _label_given_side(scores, tags, label):
    """[2]: P(a tag of each direction has `label` in its chain | that direction)."""
    directions = tags_lib.TagVocabulary(tags).directions()
    out = np.zeros(2)
    for side in (0, 1):
        own = [t for t, tag in enumerate(tags) if directions[t] == side]
        weights = np.exp(scores[own] - np.logaddexp.reduce(scores[own]))
        out[side] = sum(w for t, w in zip(own, weights)
                        if label in tags_lib.split_chain(tags_lib.tag_label(tags[t])))
    return out


def _outputs_beside_the_defaults(loaded, signature_name: str) -> dict:
    """A signature's outputs on SENTENCES, after checking that those it shares with
    serving_default are serving_default's, unchanged."""
    out = {k: v.numpy() for k, v in
           loaded.signatures[signature_name](sentences=tf.constant(SENTENCES)).items()}
    plain = loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES))
    for key, value in plain.items():
        np.testing.assert_array_equal(out[key], value.numpy())
    return out


def test_parse_marginals_equal_the_numpy_lattice_on_the_exports_own_logits(loaded, vocabs):
    """The parse_marginals signature: serving_default's outputs unchanged, and each
    constituent's probability (and the tree's) as marginals.Lattice computes them from the
    export's own tag log-probabilities."""
    from tetra_tf.decode import marginals

    words, _, _, _, leaf, internal = _tag_log_probabilities(loaded, SENTENCES)
    out = _outputs_beside_the_defaults(loaded, "parse_marginals")
    checked = 0
    for row, sentence in enumerate(words):
        n = len(sentence)
        if n == 0:  # no tree
            assert out["tree_probability"][row] == 0 and out["num_constituents"][row] == 0
            continue
        lattice = marginals.Lattice(leaf[row, :n], internal[row, :n], vocabs.leaf.directions(),
                                    vocabs.internal.directions(), 6)
        assert out["tree_probability"][row] == pytest.approx(
            np.exp(out["score"][row] - lattice.log_partition), rel=1e-4)
        directions = lattice.direction_marginals()
        tree = nltk.Tree.fromstring(out["tree"][row].decode())
        constituents = preorder_constituents(tree)
        assert out["num_constituents"][row] == len(constituents)
        for (label, i, j), got in zip(constituents, out["constituent_marginals"][row]):
            if i == j:
                expected = directions[2 * i] @ _label_given_side(leaf[row, i],
                                                                 vocabs.leaf.tags, label)
            else:
                nodes = lattice.node_marginals(i, j)
                expected = sum(nodes[k] @ _label_given_side(internal[row, k],
                                                            vocabs.internal.tags, label)
                               for k in range(i, j))
            assert got == pytest.approx(expected, abs=1e-4), (row, label, i, j)
            # The tree holds each of its constituents: none is less likely than the tree.
            assert out["tree_probability"][row] <= got + 1e-5
            checked += 1
        assert np.all(out["constituent_marginals"][row, len(constituents):] == 0)
    assert checked > 20


def test_parse_span_marginals_give_every_labelled_span_of_the_exports_own_logits(loaded,
                                                                                 vocabs):
    """parse_span_marginals: parse_marginals' outputs unchanged, and every labelled span
    whose probability (as marginals.Lattice computes it from the export's own tag
    log-probabilities) is at least the row's floor, by first word, last word and label:
    none left out, none added."""
    from tetra_tf.decode import marginals

    words, _, _, _, leaf, internal = _tag_log_probabilities(loaded, SENTENCES)
    floors = np.array([0.0, 0.05, 0.0, 0.3, 0.01], np.float32)
    out = {k: v.numpy() for k, v in loaded.signatures["parse_span_marginals"](
        sentences=tf.constant(SENTENCES), min_probability=tf.constant(floors)).items()}
    with_marginals = _outputs_beside_the_defaults(loaded, "parse_marginals")
    for key, value in with_marginals.items():
        if value.dtype.kind == "f":
            np.testing.assert_allclose(out[key], value, rtol=1e-6, atol=1e-7)
        else:
            np.testing.assert_array_equal(out[key], value)
    labels = sorted({label for tag in (*vocabs.leaf.tags, *vocabs.internal.tags)
                     for label in tags_lib.split_chain(tags_lib.tag_label(tag))})
    checked = 0
    for row, sentence in enumerate(words):
        n, count = len(sentence), out["num_spans"][row]
        got = [(int(i), int(j), label.decode(), float(p)) for i, j, label, p in zip(
            *(out[name][row, :count] for name in export_format.SPAN_OUTPUTS))]
        assert np.all(out["span_starts"][row, count:] == -1)
        assert np.all(out["span_labels"][row, count:] == b"")
        assert got == sorted(got, key=lambda span: (span[0], span[1], labels.index(span[2])))
        if n == 0:
            assert not got
            continue
        lattice = marginals.Lattice(leaf[row, :n], internal[row, :n], vocabs.leaf.directions(),
                                    vocabs.internal.directions(), 6)
        directions = lattice.direction_marginals()
        expected = {}
        for i in range(n):
            for j in range(i, n):
                nodes = lattice.node_marginals(i, j)
                for label in labels:
                    if i == j:
                        p = directions[2 * i] @ _label_given_side(leaf[row, i],
                                                                  vocabs.leaf.tags, label)
                    else:
                        p = sum(nodes[k] @ _label_given_side(internal[row, k],
                                                             vocabs.internal.tags, label)
                                for k in range(i, j))
                    assert floors[row] == 0 or abs(p - floors[row]) > 1e-4  # no tie
                    if p > 0 and p >= floors[row]:
                        expected[(i, j, label)] = p
        # float32 may round the least likely of all to 0 (not listed), no more.
        assert ({key for key, p in expected.items() if p > 1e-30}
                <= {span[:3] for span in got} <= set(expected)), row
        for i, j, label, p in got:
            assert p == pytest.approx(expected[(i, j, label)], abs=1e-5)
            checked += 1
        # The tree's constituents are among them, with their parse_marginals probability.
        tree = nltk.Tree.fromstring(out["tree"][row].decode())
        for (label, i, j), p in zip(preorder_constituents(tree),
                                    out["constituent_marginals"][row]):
            if p >= floors[row]:
                assert expected[(i, j, label)] == pytest.approx(p, abs=1e-5)
    assert checked > 100


def test_parse_span_marginals_refuses_bad_floors_and_calls_over_its_cells(loaded, vocabs):
    """Its work is bounded before the words³ loop runs: too many sentences × words² ×
    labels is refused as too_many_words (the Parser then parses them one by one)."""
    signature = loaded.signatures["parse_span_marginals"]
    for floors, message in (([0.5], "min_probability: one per sentence"),
                            ([0.5, 1.5], "min_probability: each must be a number from 0"),
                            ([0.5, float("nan")], "min_probability: each must be a number")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            signature(sentences=tf.constant(["a b", "c"]), min_probability=tf.constant(floors))
    labels = {label for tag in (*vocabs.leaf.tags, *vocabs.internal.tags)
              for label in tags_lib.split_chain(tags_lib.tag_label(tag))}
    words = export_format.MAX_MARGINALS_WORDS
    per_sentence = words ** 2 * max(len(labels), 2 * (6 + 1))
    sentences = export_format.MAX_SPAN_MARGINAL_CELLS // per_sentence + 1
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="too_many_words: parse_span_marginals needs more than"):
        signature(sentences=tf.constant([" ".join(["a"] * words)] * sentences),
                  min_probability=tf.fill([sentences], 0.5))


def test_parse_k_best_gives_the_k_best_trees_of_the_exports_own_logits(loaded, vocabs):
    """parse_k_best: serving_default's outputs unchanged, and the K best trees with their
    scores, as k_best_numpy finds them from the export's tag log-probabilities."""
    from tetra_tf.decode import k_best

    words, _, lengths, _, leaf, internal = _tag_log_probabilities(loaded, SENTENCES)
    out = _outputs_beside_the_defaults(loaded, "parse_k_best")
    expected = k_best.k_best_numpy(leaf, internal, lengths.numpy(), vocabs.leaf.directions(),
                                   vocabs.internal.directions(), export_format.K_BEST, 6)
    for row, sentence in enumerate(words):
        found = int(np.isfinite(expected.scores[row]).sum()) if sentence else 0
        assert out["num_k_best"][row] == found
        np.testing.assert_allclose(out["k_best_scores"][row, :found],
                                   expected.scores[row, :found], rtol=1e-4)
        trees = [t.decode() for t in out["k_best_trees"][row]]
        assert trees[found:] == [""] * (export_format.K_BEST - found)
        if not sentence:
            continue
        assert trees[0] == out["tree"][row].decode()  # the first is the best
        pos_tags = [t.decode() for t in out["pos_tags"][row, :len(sentence)]]
        for rank in range(found):
            n = len(sentence)
            leaf_tags = [vocabs.leaf.tag(int(t)) for t in expected.leaf_tag_ids[row, rank, :n]]
            internal_tags = [vocabs.internal.tag(int(t))
                             for t in expected.internal_tag_ids[row, rank, :n - 1]]
            assert trees[rank] == treebank.tree_to_line(tags_lib.tags_to_tree(
                [escape_leaf(w) for w in sentence], pos_tags, leaf_tags, internal_tags))


_ENCODE_INPUTS = ("input_word_ids", "input_mask", "input_type_ids", "word_end_positions")
_LOGITS = ("leaf_logits", "internal_logits", "pos_logits")


def _encode_inputs(loaded, words):
    """The export's own encoder inputs for `words`, and the [B, W] mask of real words."""
    dense = tf.constant(_pad(words, "", object))
    lengths = tf.constant([len(w) for w in words], tf.int32)
    packed = loaded.tokenize(dense, lengths)
    is_word = np.arange(dense.shape[1])[None, :] < lengths.numpy()[:, None]
    return [packed[key] for key in _ENCODE_INPUTS], is_word


def _assert_same_word_logits(got, expected, is_word):
    """The same logits for every word, and for every fencepost between two words (the one
    after a sentence's last word is never scored)."""
    is_fencepost = np.zeros_like(is_word)
    is_fencepost[:, :-1] = is_word[:, 1:]
    for key in _LOGITS:
        scored = is_fencepost if key == "internal_logits" else is_word
        np.testing.assert_allclose(got[key].numpy()[scored], expected[key].numpy()[scored],
                                   rtol=1e-4, atol=1e-4)


def test_encode_with_regrouped_windows_equals_the_keras_tagger(loaded, model_dir):
    # A sentence longer than one window next to short and empty ones: the export drops
    # padding windows and trims short ones, which must not change any word's logits.
    rng = random.Random(5)
    long_sentence = [rng.choice(["cat", "Smith", "1\\/2", "quoted"]) for _ in range(700)]
    words = [long_sentence, ["a"], [], ["The", "cat", "sat", "."], long_sentence[:150]]
    inputs, is_word = _encode_inputs(loaded, words)
    assert inputs[0].shape[1] >= 3  # windows
    tagger, _ = export.load_tagger(model_dir, os.path.join(model_dir, "best", "model"))
    expected = tagger(dict(zip(_ENCODE_INPUTS, inputs)), training=False)
    _assert_same_word_logits(loaded.encode(*inputs), expected, is_word)
    # Encoder calls of at most one 512-window (or 16 windows of 32): the same logits.
    chunked = export.WindowTagger(tagger, 512, positions_per_call=512)
    assert chunked._windows_per_call.tolist()[0] == 16
    _assert_same_word_logits(tf.function(chunked, autograph=False)(*inputs), expected,
                             is_word)


@pytest.mark.parametrize("words", [
    [["The", "cat", "sat", "."]],  # one request of one sentence: one encoder call
    [["a"], [], ["The", "cat", "sat", "."], ["Smith", "quoted", "1\\/2"]],  # one bucket
    [["a"], ["cat"] * 150, ["The", "cat"]],  # one window each, two buckets: the bucket loop
], ids=["one sentence", "one bucket", "two buckets"])
def test_encode_of_one_window_sentences_equals_the_keras_tagger(loaded, model_dir, words):
    inputs, is_word = _encode_inputs(loaded, words)
    assert inputs[0].shape[1] == 1  # windows
    tagger, _ = export.load_tagger(model_dir, os.path.join(model_dir, "best", "model"))
    _assert_same_word_logits(loaded.encode(*inputs),
                             tagger(dict(zip(_ENCODE_INPUTS, inputs)), training=False),
                             is_word)


def test_packed_windows_give_the_keras_taggers_logits(loaded, model_dir):
    # Mixed lengths: a 700-word sentence (several windows, one of them short), empty and
    # one-word sentences; rows of 128 then hold many short windows each. With 256 positions
    # per call the rows go through the encoder in several calls.
    rng = random.Random(7)
    long_sentence = [rng.choice(["cat", "Smith", "1\\/2", "quoted"]) for _ in range(700)]
    words = ([long_sentence, ["a"], [], ["The", "cat", "sat", "."]]
             + [long_sentence[:n] for n in (3, 9, 40, 150, 1, 20, 7)])
    inputs, is_word = _encode_inputs(loaded, words)
    assert inputs[0].shape[1] >= 3  # windows
    tagger, _ = export.load_tagger(model_dir, os.path.join(model_dir, "best", "model"))
    expected = tagger(dict(zip(_ENCODE_INPUTS, inputs)), training=False)
    encoder = InferenceEncoder(tagger.encoder, TaggerSpec.load(model_dir).encoder)
    for pack_length, positions_per_call in ((128, 8192), (128, 256), (512, 512)):
        packed = export.WindowTagger(tagger, 512, encoder=encoder, pack_length=pack_length,
                                     positions_per_call=positions_per_call)
        _assert_same_word_logits(tf.function(packed, autograph=False)(*inputs), expected,
                                 is_word)


def _export_gives_the_keras_taggers_logits(tmp_path, **model_options):
    """Exports a tiny model made with these options and checks that its logits are the
    Keras tagger's, in one encoder call and in packed windows, and that it parses batches
    of no words; returns the tagger and each batch's (inputs, is_word, the tagger's
    logits)."""
    model_dir = str(tmp_path / "model")
    tiny_model.make_model_dir(model_dir, max_stack_depth=6, **model_options)
    export_path = str(tmp_path / "export")
    export.export(model_dir, export_path)
    return _gives_the_keras_taggers_logits(model_dir, export_path)


def _gives_the_keras_taggers_logits(model_dir, export_path):
    """_export_gives_the_keras_taggers_logits' checks, on model_dir's export export_path."""
    exported = tf.saved_model.load(export_path)
    tagger, _ = export.load_tagger(model_dir, os.path.join(model_dir, "best", "model"))
    rng = random.Random(3)
    long_sentence = [rng.choice(["cat", "Smith", "1\\/2", "quoted"]) for _ in range(300)]
    batches = []
    for words in ([["The", "cat", "sat", "."]],  # one encoder call
                  [long_sentence, ["a"], [], ["Smith", "quoted"]]):  # packed windows
        inputs, is_word = _encode_inputs(exported, words)
        expected = tagger(dict(zip(_ENCODE_INPUTS, inputs)), training=False)
        _assert_same_word_logits(exported.encode(*inputs), expected, is_word)
        batches.append((inputs, is_word, expected))
    out = exported.signatures["serving_default"](sentences=tf.constant([], tf.string))
    assert out["tree"].shape == (0,)
    out = exported.signatures["serving_default"](sentences=tf.constant(["", " "]))
    assert _strings(out["tree"]) == ["", ""]  # a batch of no words
    return tagger, batches


@pytest.fixture(scope="module")
def mixed_layers_and_word_pairs(tmp_path_factory):
    """A tiny model with both of the heads' options, a mix of the last two of its three
    layers and internal tags from word pairs, exported and checked by
    `_export_gives_the_keras_taggers_logits` (one export for the two tests below)."""
    return _export_gives_the_keras_taggers_logits(
        tmp_path_factory.mktemp("mixed_layers_and_word_pairs"), mixed_layers=2, num_layers=3,
        internal_uses_next_word=True)


@pytest.mark.slow
def test_layer_mix_is_exported_and_gives_the_keras_taggers_logits(mixed_layers_and_word_pairs):
    # The last two of three layers: a mix of the first two would give other logits.
    tagger, batches = mixed_layers_and_word_pairs
    np.testing.assert_allclose(tagger.layer_weights().sum(), 1.5, rtol=1e-6)
    for inputs, is_word, expected in batches:
        # The mix matters: the last layer alone gives other logits.
        last_only = tagger.head_logits(tf.gather(
            tf.reshape(tagger.encoder({k: tf.reshape(x, [-1, x.shape[-1]]) for k, x in
                                       zip(_ENCODE_INPUTS, inputs[:3])})["sequence_output"],
                       [inputs[0].shape[0], -1, 32]), inputs[3], batch_dims=1))
        assert not np.allclose(last_only["leaf_logits"].numpy()[is_word],
                               expected["leaf_logits"].numpy()[is_word], atol=1e-3)


@pytest.mark.slow
def test_internal_tags_from_word_pairs_are_exported_with_the_keras_taggers_logits(
        mixed_layers_and_word_pairs):
    tagger, _ = mixed_layers_and_word_pairs
    assert tagger.internal_head.kernel.shape[0] == 2 * tagger.leaf_head.kernel.shape[0]


@pytest.mark.slow
def test_mpnet_export_gives_the_keras_taggers_logits(tiny_mpnet_model_dir,
                                                     tiny_mpnet_export_dir, tmp_path):
    # The relative position bias, no segment embeddings and MPNet's specials, in one
    # encoder call and in packed windows (each window's bias from its own positions).
    # The export is conftest's (shared with tests/test_ways_in.py), of a tiny MPNet model.
    _gives_the_keras_taggers_logits(tiny_mpnet_model_dir, tiny_mpnet_export_dir)
    exported = tf.saved_model.load(tiny_mpnet_export_dir)
    vocab = open(os.path.join(tiny_mpnet_export_dir, "assets", "encoder_vocab.txt")
                 ).read().split("\n")
    ids = exported.tokenize(words=tf.constant([["The", "cat"]]),
                            num_words=tf.constant([2]))["input_word_ids"].numpy()[0, 0]
    assert [vocab[i] for i in ids[:5]] == ["<s>", "the", "cat", "</s>", "<pad>"]
    card = json.load(open(os.path.join(tiny_mpnet_export_dir, "assets.extra",
                                       "model_card.json")))
    assert card["encoder"]["model_type"] == "mpnet"
    assert card["encoder"]["special_tokens"] == {"cls": "<s>", "sep": "</s>", "pad": "<pad>",
                                                 "unk": "[UNK]"}
    # In bfloat16 the bias and the mask stay float32: the logits move by the matmuls' rounding.
    export.export(tiny_mpnet_model_dir, str(tmp_path / "bf16"), encoder_dtype="bfloat16")
    bf16 = tf.saved_model.load(str(tmp_path / "bf16"))
    inputs, is_word = _encode_inputs(exported, [["The", "cat", "sat", "."], ["Smith"] * 40])
    for key in _LOGITS:
        want = exported.encode(*inputs)[key].numpy()[is_word]
        got = bf16.encode(*inputs)[key].numpy()[is_word]
        assert not np.array_equal(got, want)
        np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())


@pytest.mark.slow
def test_packed_and_unpacked_exports_give_the_same_trees_on_the_test_split(model_dir, loaded,
                                                                          tmp_path):
    try:
        entries = list(treebank.read_nltk_sample("test"))
    except treebank.NltkSampleNotFoundError:
        pytest.skip("NLTK treebank sample not found")
    export_dir = str(tmp_path / "unpacked" / "1")
    export.export(model_dir, export_dir, pack_length=0)
    unpacked = tf.saved_model.load(export_dir)
    assert export.DEFAULT_PACK_LENGTH > 0  # `loaded`: the default export packs
    sentences = [" ".join(treebank.clean_tree(e.tree).leaves()) for e in entries
                 if e.tree is not None]
    for start in range(0, len(sentences), 64):
        batch = tf.constant(sentences[start:start + 64])
        assert (_strings(unpacked.signatures["serving_default"](sentences=batch)["tree"])
                == _strings(loaded.signatures["serving_default"](sentences=batch)["tree"]))
    card = json.load(open(os.path.join(export_dir, "assets.extra", "model_card.json")))
    assert card["encoder"]["pack_length"] == 0
    for bad in (-1, export.MAX_PACK_LENGTH + 1):
        with pytest.raises(InputError, match="pack_length"):
            export.export(model_dir, str(tmp_path / "bad" / "1"), pack_length=bad)


@pytest.mark.slow
def test_bfloat16_encoder_export_stays_close_to_float32(model_dir, loaded, tmp_path,
                                                        monkeypatch):
    export_dir = str(tmp_path / "bf16" / "1")
    warnings = []
    # On a CPU without bfloat16 instructions, the export and the Parser say so in one line.
    monkeypatch.setattr(cpu, "cpu_flags", lambda: {"avx2", "avx512f"})
    monkeypatch.setattr(export.logging, "warning", lambda *args: warnings.append(args))
    export.export(model_dir, export_dir, encoder_dtype="bfloat16")
    assert len(warnings) == 1 and "neither AVX-512 BF16 nor AMX" in warnings[0][1]
    monkeypatch.setattr(cpu, "cpu_flags", lambda: {"avx2", "amx_bf16"})
    assert Parser(export_dir).encoder_dtype == "bfloat16" and len(warnings) == 1
    monkeypatch.setattr(cpu, "cpu_flags", lambda: {"avx2"})
    Parser(export_dir)
    assert len(warnings) == 2 and warnings[1][1] == export_dir
    bf16 = tf.saved_model.load(export_dir)
    dtypes = tf.train.load_checkpoint(os.path.join(
        export_dir, "variables", "variables")).get_variable_to_dtype_map()
    kernels = {name: dtype for name, dtype in dtypes.items() if name.startswith("encoders/0/")
               and name.split("/")[-3].endswith("_kernel")}
    assert len(kernels) == 4 * 2, dtypes  # four dense kernels in each of the 2 layers
    assert set(kernels.values()) == {tf.bfloat16}
    assert dtypes["encoders/0/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"] == tf.float32
    assert json.load(open(os.path.join(export_dir, "assets.extra", "model_card.json")))[
        "encoder"]["compute_dtype"] == "bfloat16"
    inputs, is_word = _encode_inputs(loaded, [s.split() for s in SENTENCES])
    for key in _LOGITS:
        want = loaded.encode(*inputs)[key].numpy()[is_word]
        got = bf16.encode(*inputs)[key].numpy()[is_word]
        assert not np.array_equal(got, want)  # the matmuls did run in bfloat16...
        # ...which keeps 8 significant bits: logits move by about 1% of their range.
        np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())
    out = bf16.signatures["serving_default"](sentences=tf.constant(SENTENCES))
    for tree, sentence in zip(_strings(out["tree"]), SENTENCES):
        assert (nltk.Tree.fromstring(tree).leaves() if tree else []) == sentence.split()
    with pytest.raises(InputError, match="encoder_dtype"):
        export.export(model_dir, str(tmp_path / "fp16" / "1"), encoder_dtype="float16")


@pytest.mark.parametrize("activation, epsilon", [("gelu", 1e-12), ("gelu_approximate", 1e-6),
                                                 ("relu", 1e-5)])
def test_inference_encoder_equals_keras_encoder(activation, epsilon):
    config = encoders.EncoderConfig(vocab_size=50, hidden_size=16, num_layers=2,
                                    num_attention_heads=4, intermediate_size=24,
                                    max_sequence_length=16, activation=activation,
                                    norm_epsilon=epsilon)
    encoder = encoders.build_encoder(config)
    rng = np.random.default_rng(0)
    for variable in encoder.variables:  # random biases, gammas and betas too
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype(np.float32))
    lengths = np.array([10, 1, 4, 7])
    mask = (np.arange(10)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1, 50, (4, 10)).astype(np.int32) * mask
    types = rng.integers(0, 2, (4, 10)).astype(np.int32) * mask
    expected = encoder(dict(input_word_ids=ids, input_mask=mask, input_type_ids=types),
                       training=False)["sequence_output"].numpy()
    got = InferenceEncoder(encoder, config)(tf.constant(ids), tf.constant(mask),
                                                   tf.constant(types)).numpy()
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], expected[real], rtol=1e-4, atol=1e-4)


def test_parse_words_equals_serving_default(loaded):
    words = [s.split() for s in SENTENCES]
    by_words = loaded.signatures["parse_words"](
        words=tf.constant(_pad(words, "", object)),
        num_words=tf.constant([len(w) for w in words], tf.int32))
    by_sentences = loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES))
    assert set(by_words) == set(by_sentences)
    for key in by_words:
        np.testing.assert_array_equal(by_words[key].numpy(), by_sentences[key].numpy())


def test_parse_words_rejects_bad_input(loaded):
    parse_words = loaded.signatures["parse_words"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad_words: empty word"):
        parse_words(words=tf.constant([["a", ""]]), num_words=tf.constant([2]))
    for word in ("g h", "a\u00a0b", "c\u3000d", "e\x1cf", "x\u2028", "\t"):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="bad_words: a word contains whitespace"):
            parse_words(words=tf.constant([["ok", word]]), num_words=tf.constant([2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_words exceeds"):
        parse_words(words=tf.constant([["a", "b"]]), num_words=tf.constant([3]))
    # Padding past num_words may be anything, including empty strings.
    out = parse_words(words=tf.constant([["a", ""]]), num_words=tf.constant([1]))
    assert nltk.Tree.fromstring(out["tree"].numpy()[0].decode()).leaves() == ["a"]


def test_empty_batch(loaded):
    out = loaded.signatures["serving_default"](sentences=tf.constant([], tf.string))
    assert out["tree"].shape == (0,)
    out = loaded.signatures["serving_default"](sentences=tf.constant(["", " "]))
    assert _strings(out["tree"]) == ["", ""]


# The export guide's one-liner, then the trees as JSON and the modules that got imported.
ONE_LINER = ("import tensorflow as tf, tensorflow_text; m = tf.saved_model.load({path!r}); "
             "print(m.signatures['serving_default'](tf.constant(['The cat sat .']))['tree'])")
_FRESH_PROCESS = r"""
import json, sys
{one_liner}
out = m.signatures["serving_default"](sentences=tf.constant(json.loads(sys.argv[1])))
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("tetra_tf", "tf_keras", "official"))
print(json.dumps({{"trees": [t.decode("utf-8") for t in out["tree"].numpy()], "leaked": leaked}}))
"""


@pytest.mark.slow
def test_fresh_process_without_project_code_gives_parser_trees(export_dir, tmp_path):
    sentences = [s for s in SENTENCES if s.strip()]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)
    env.pop("TF_USE_LEGACY_KERAS", None)
    code = _FRESH_PROCESS.format(one_liner=ONE_LINER.format(path=export_dir))
    result = subprocess.run([sys.executable, "-c", code, json.dumps(sentences)],
                            capture_output=True, text=True, env=env, cwd=str(tmp_path),
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    printed, fresh = result.stdout.strip().splitlines()[-2:]
    assert "(TOP " in printed and "The)" in printed  # the one-liner's output
    fresh = json.loads(fresh)
    assert fresh["leaked"] == []
    parser = Parser(export_dir)
    trees = parser.parse_sents([s.split() for s in sentences])
    assert fresh["trees"] == [treebank.tree_to_line(t) for t in trees]


@pytest.mark.slow
def test_saved_model_cli_show(export_dir):
    cli = shutil.which("saved_model_cli")
    if cli is None:
        pytest.skip("saved_model_cli is not installed")
    result = subprocess.run([cli, "show", "--all", "--dir", export_dir], capture_output=True,
                            text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for text in ("signature_def['serving_default']", "signature_def['parse_words']",
                 "inputs['sentences']", "outputs['tree']", "inputs['num_words']"):
        assert text in result.stdout


# --------------------------------------------------------------------------------------
# Checkpoints and errors


def test_rolling_checkpoint_is_used_without_best(model_dir, tmp_path, loaded):
    # A model dir with only ckpt/ (weights plus optimizer-like state) exports the same model.
    rolling = tmp_path / "rolling"
    shutil.copytree(model_dir, rolling, ignore=shutil.ignore_patterns("best"))
    spec = TaggerSpec.load(model_dir)
    tagger = build_tagger(spec)
    best = os.path.join(model_dir, "best", "model")
    tf.train.Checkpoint(model=tagger).read(best).assert_existing_objects_matched()
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=tagger, step=tf.Variable(5, dtype=tf.int64)),
        str(rolling / "ckpt"), max_to_keep=1)
    prefix = manager.save(checkpoint_number=5)
    assert export.resolve_checkpoint(str(rolling))[1] == prefix
    module = export.build_module([export.resolve_checkpoint(str(rolling))])
    sentences = tf.constant(SENTENCES[:2])
    np.testing.assert_array_equal(module.parse_sentences(sentences)["tree"].numpy(),
                                  loaded.signatures["serving_default"](sentences=sentences)["tree"])


def test_mismatched_checkpoint_is_a_clear_error(model_dir, tmp_path):
    other = tmp_path / "other"
    tiny_model.make_model_dir(str(other))
    spec = TaggerSpec.load(str(other))
    spec.heads.num_pos_tags += 1  # a different model
    spec.save(str(other))
    with pytest.raises(ModelDirError, match="does not restore"):
        export.export(str(other), str(tmp_path / "out" / "1"))
    assert not (tmp_path / "out" / "1").exists()


def test_cli_errors_are_one_line(model_dir, export_dir, tmp_path):
    result = run_cli(export.define_flags, export.main, f"--checkpoint={tmp_path / 'nope'}",
                     f"--export_dir={tmp_path / 'x' / '1'}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in result.stderr
    with pytest.raises(InputError, match="already exists"):
        export.export(model_dir, export_dir)


# --------------------------------------------------------------------------------------
# Work bounds and hostile input


def _tokenize(loaded, sentences):
    words = [s.split() for s in sentences]
    return loaded.tokenize(tf.constant(_pad(words, "", object)),
                           tf.constant([len(w) for w in words], tf.int32))


@pytest.mark.parametrize("char", ["!", "東"])
def test_a_40kb_word_costs_a_bounded_number_of_pieces(loaded, char):
    """Each '!' or CJK character is a piece of its own: the word keeps the cap, no more."""
    word = char * (40_000 // len(char.encode("utf-8")))
    packed = _tokenize(loaded, [f"a {word} b"])
    ids = packed["input_word_ids"].numpy()
    mask = packed["input_mask"].numpy()
    assert ids.shape[:2] == (1, 1)  # one window: 3 words, at most 1 + 8 + 1 pieces
    assert mask.sum() == 2 + 1 + tokenization.MAX_PIECES_PER_WORD + 1  # [CLS] [SEP] pieces
    # The word's feature is still its last piece.
    positions = packed["word_end_positions"].numpy()[0]
    assert positions.tolist() == [1, 1 + tokenization.MAX_PIECES_PER_WORD,
                                  2 + tokenization.MAX_PIECES_PER_WORD]
    out = loaded.signatures["serving_default"](sentences=tf.constant([f"a {word} b"]))
    assert out["num_words"].numpy().tolist() == [3]


def test_too_many_pieces_per_call_is_an_invalid_argument(loaded):
    limit = int(loaded.max_pieces_per_call.numpy())
    assert limit == tokenization.MAX_PIECES_PER_CALL
    # Eight pieces per word ("!!!!!!!!"), one word more than the limit allows.
    sentence = " ".join(["!" * 8] * (limit // 8 + 1))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"holds {limit + 8} subword pieces; at most {limit}"):
        loaded.signatures["serving_default"](sentences=tf.constant([sentence]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_pieces_per_call"):
        loaded.signatures["serving_default"](
            sentences=tf.constant([sentence[:len(sentence) // 2]] * 2))
    # At the limit, the call goes through.
    out = _tokenize(loaded, [" ".join(["!" * 8] * (limit // 8))])
    assert out["input_mask"].numpy().sum() > limit


def test_padding_many_short_sentences_to_one_long_one_is_an_invalid_argument(loaded):
    """500 one-word sentences next to one of 20,000 pieces would pad to 500 × 78 windows."""
    long_sentence = " ".join(["!" * 8] * 2500)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"pads to 20007936 encoder window positions \(501 sentences x 78 "
                             r"windows of 512\); at most 16777216"):
        _tokenize(loaded, ["a"] * 500 + [long_sentence])
    # The same pieces in sentences of similar length go through.
    out = _tokenize(loaded, [" ".join(["!" * 8] * 100)] * 25)
    assert out["input_word_ids"].shape[:2] == (25, 3)


def test_limits_are_stored_in_the_saved_model(export_dir, loaded):
    with open(os.path.join(export_dir, export_format.LIMITS_FILE), encoding="utf-8") as f:
        limits = json.load(f)
    assert limits == {
        "max_pieces_per_word": tokenization.MAX_PIECES_PER_WORD,
        "max_pieces_per_call": tokenization.MAX_PIECES_PER_CALL,
        "max_window_positions_per_call": tokenization.MAX_WINDOW_POSITIONS_PER_CALL}
    assert int(loaded.max_pieces_per_word.numpy()) == limits["max_pieces_per_word"]


def test_tree_strings_read_back_with_one_leaf_per_word(loaded):
    """All six brackets become their PTB escapes (sentences.escape_leaf's table)."""
    rows = [["f(x)", "(", ")", "((", "[a]", "{b}", ":-)"],
            ["]", "[", "}", "{", "東京", "\u200b", "-LRB-"]]
    out = loaded.signatures["parse_words"](
        words=tf.constant(_pad(rows, "", object)),
        num_words=tf.constant([len(r) for r in rows], tf.int32))
    for words, line in zip(rows, _strings(out["tree"])):
        leaves = nltk.Tree.fromstring(line).leaves()
        assert leaves == [escape_leaf(w) for w in words]
    assert escape_leaf("[a]") == "-LSB-a-RSB-" and escape_leaf("{b}") == "-LCB-b-RCB-"
    assert _strings(out["words"])[:7] == rows[0]  # the words output stays verbatim


def test_serving_default_splits_on_the_contracts_whitespace(loaded):
    """The graph splits sentences on every character of sentences.WHITESPACE (what Python's
    str.split splits on), so that a line gets the words it gets in Python."""
    separators = sorted(WHITESPACE)
    text = "".join(f"w{i}{c}" for i, c in enumerate(separators)) + "end"
    sentences = [text, "a\u00a0b\u3000c\x1cd\u2028e  f", "\u200bzero\u200dwidth \ufeff"]
    out = loaded.signatures["serving_default"](sentences=tf.constant(sentences))
    assert out["num_words"].numpy().tolist() == [len(split_words(s)) for s in sentences]
    assert out["num_words"].numpy().tolist()[:2] == [len(separators) + 1, 6]
    for sentence, words, line in zip(sentences, out["words"].numpy(), _strings(out["tree"])):
        expected = split_words(sentence)
        assert [w.decode() for w in words[:len(expected)]] == expected
        assert nltk.Tree.fromstring(line).leaves() == [escape_leaf(w) for w in expected]


def test_tree_writer_on_a_wide_sentence_is_linear_in_words():
    """A right-branching sentence of 20,000 words: no [W, W] tensors (they'd be 1.6 GB)."""
    n = 20_000
    tree = nltk.Tree("NN", ["end"])
    for i in reversed(range(n - 1)):
        tree = nltk.Tree("X", [nltk.Tree("NN", [f"w{i}"]), tree])
    tagging = tags_lib.tree_to_tags(nltk.Tree("TOP", [tree]))
    vocabs = TagVocabularies.build([tagging])
    (line,) = _tree_writer_output([tagging], vocabs)
    assert line == _expected_line(tagging)


# --------------------------------------------------------------------------------------
# Ensembles


@pytest.mark.slow
def test_ensemble_decodes_its_members_mean_tag_log_probabilities(model_dir, loaded, vocabs,
                                                                 tmp_path):
    other = str(tmp_path / "other")
    tiny_model.make_model_dir(other, max_stack_depth=6, seed=1)
    checkpoints = [export.resolve_checkpoint(path) for path in (model_dir, other)]
    ensemble = export.build_module(checkpoints)
    long_sentence = ["cat", "Smith", "1\\/2", "quoted"] * 175  # several windows
    words = [["The", "cat", "sat", "."], ["a"], [], long_sentence, ["Smith", "quoted"]]
    inputs, is_word = _encode_inputs(loaded, words)
    members = [export.load_tagger(*checkpoint)[0](dict(zip(_ENCODE_INPUTS, inputs)),
                                                  training=False)
               for checkpoint in checkpoints]
    assert not np.allclose(members[0]["leaf_logits"], members[1]["leaf_logits"], atol=1e-2)
    expected = {key: (tf.nn.log_softmax(members[0][key]) + tf.nn.log_softmax(members[1][key])) / 2
                for key in _LOGITS}
    _assert_same_word_logits(ensemble.encode(*inputs), expected, is_word)

    lengths = np.array([len(w) for w in words], np.int32)
    decoded = decoding.decode_numpy(expected["leaf_logits"].numpy(),
                                    expected["internal_logits"].numpy(), lengths,
                                    vocabs.leaf.directions(), vocabs.internal.directions(), 6)
    out = ensemble.parse_words(tf.constant(_pad(words, "", object)), tf.constant(lengths))
    np.testing.assert_array_equal(out["leaf_tag_ids"], decoded.leaf_tag_ids)
    np.testing.assert_array_equal(out["internal_tag_ids"], decoded.internal_tag_ids)
    # Each member's encoder and heads are saved: twice the variables of one model.
    assert len(ensemble.encoders) == 2
    assert len(ensemble.head_variables) == 2 * len(loaded.head_variables)


def test_ensemble_members_must_share_vocabularies_architecture_and_depth(model_dir, tmp_path):
    other = str(tmp_path / "other")
    tiny_model.make_model_dir(other, max_stack_depth=8, num_layers=3)
    with pytest.raises(ModelDirError, match="cannot join .* in an ensemble: their encoder "
                                            "architecture and max_stack_depth differ"):
        export.export(f"{model_dir},{other}", str(tmp_path / "out" / "1"))
    with open(os.path.join(other, "vocab", "encoder_vocab.txt"), "a", encoding="utf-8") as f:
        f.write("extra\n")
    with pytest.raises(ModelDirError, match="their vocabularies, encoder architecture and "
                                            "max_stack_depth differ"):
        export.export(f"{model_dir},{other}", str(tmp_path / "out" / "1"))
    assert not (tmp_path / "out" / "1").exists()

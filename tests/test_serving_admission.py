"""Tests for the server's admission checks and codecs (tetra_tf.serving.admission, .codecs):
the export's limits lowered by the flags, the sentence contract, declared shapes."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tetra_tf.contract import sentences
from tetra_tf.serving import admission, codecs
from tetra_tf.serving.errors import RequestError

EXPORT_LIMITS = {"max_pieces_per_word": 8, "max_pieces_per_call": 32768,
                 "max_window_positions_per_call": 16777216}


def _limits(**flags):
    return admission.ModelLimits.of(admission.Limits(**flags), EXPORT_LIMITS)


def _refusal(call, *args):
    with pytest.raises(RequestError) as error:
        call(*args)
    return str(error.value)


def test_flags_only_lower_the_export_limits():
    assert _limits().max_pieces_per_request == 32768
    assert _limits(max_pieces_per_request=200).max_pieces_per_request == 200
    assert _limits(max_pieces_per_request=100_000).max_pieces_per_request == 32768
    assert _limits().sentence.max_words == 0  # None beyond the export's pieces.
    assert _limits(max_words_per_sentence=50).sentence.max_words == 50
    assert _limits().sentence.max_pieces_per_word == 8
    # An export without limits.json (a generic SavedModel): only the flags.
    generic = admission.ModelLimits.of(admission.Limits(), {})
    assert generic.max_pieces_per_request == 0 and generic.sentence.max_pieces == 0


def _sentences(*texts):
    array = np.empty(len(texts), dtype=object)
    array[:] = [t if isinstance(t, bytes) else t.encode("utf-8") for t in texts]
    return {"sentences": array}


def test_sentences_split_on_unicode_whitespace_as_the_graph_does():
    # U+2003 (em space) and U+00A0 separate words, as in str.split and the exported graph;
    # bytes.split (ASCII whitespace) saw one word in each.
    prepared = admission.prepare("serving_default",
                                 _sentences("a\u2003b", "c\u00a0d e"), _limits())
    assert prepared.row_widths.tolist() == [2, 3]


@pytest.mark.parametrize("text, reason", [
    ("\u3000\u2028", sentences.EMPTY),  # only Unicode whitespace: no words
    (b"caf\xe9", sentences.NOT_UTF8),
    (" ".join(["w"] * 51), sentences.TOO_MANY_WORDS),
])
def test_refused_sentence_messages_carry_the_reason(text, reason):
    message = _refusal(admission.prepare, "serving_default", _sentences("ok", text),
                       _limits(max_words_per_sentence=50))
    assert message.startswith("sentence 1: ") and sentences.reason_in(message) == reason


@pytest.mark.parametrize("words, num_words, reason", [
    (["a\u00a0b", "c"], 2, sentences.BAD_WORDS),  # a word holding Unicode whitespace
    (["a", ""], 2, sentences.BAD_WORDS),
    (["a"], 0, sentences.EMPTY),
    (["a"], 2, sentences.BAD_WORDS),
])
def test_word_rows_follow_the_sentence_contract(words, num_words, reason):
    inputs = {"words": np.array([[w.encode() for w in words]], dtype=object),
              "num_words": np.array([num_words], np.int32)}
    message = _refusal(admission.prepare, "parse_words", inputs, _limits())
    assert message.startswith("sentence 0: ") and sentences.reason_in(message) == reason


class _Counter:
    max_pieces_per_word = 8

    def count(self, words):
        return np.array([min(len(w), 8) for w in words], np.int32)


def test_too_many_pieces_is_its_reason():
    message = _refusal(admission.prepare, "serving_default", _sentences("abcdefgh " * 26),
                       _limits(max_pieces_per_request=200), _Counter())
    assert "208 subword pieces" in message
    assert sentences.reason_in(message) == sentences.TOO_MANY_PIECES


def _texts(*texts):
    array = np.empty(len(texts), dtype=object)
    array[:] = [t if isinstance(t, bytes) else t.encode("utf-8") for t in texts]
    return {"text": array}


@pytest.mark.parametrize("text, where, reason", [
    (b"caf\xe9. Ok.", "text 1: ", sentences.NOT_UTF8),
    # Sentences count from 0, as the request's texts and sentences do.
    ("Fine. " + " ".join(["W"] * 51) + ".", "text 1: sentence 1: ", sentences.TOO_MANY_WORDS),
    ("Fine. " + "Abcdefgh " * 30 + ".", "text 1: sentence 1: ", sentences.TOO_MANY_PIECES),
    ("x" * 2_000, "text 1: ", sentences.TOO_LONG),
])
def test_raw_texts_are_split_as_the_graph_splits_them_and_each_sentence_checked(
        text, where, reason):
    prepared = admission.prepare("parse_text", _texts("It rained. We left (early).", " "),
                                 _limits(), _Counter())
    # Far under the limit, each word counts as its most pieces: 9 tokens in 2 sentences.
    assert prepared.row_pieces.tolist() == [8 * 9, 0]
    assert prepared.row_widths is None  # a text's outputs are [sentences, words]
    limits = dataclasses.replace(_limits(max_words_per_sentence=50, max_pieces_per_request=200),
                                 sentence=_limits(max_words_per_sentence=50).sentence.lowered(
                                     max_line_bytes=1_000))
    message = _refusal(admission.prepare, "parse_text", _texts("Ok.", text), limits,
                       _Counter())
    assert message.startswith(where) and sentences.reason_in(message) == reason, message


@pytest.mark.parametrize("dims, message", [
    ([100_000_000], "declares 100000000 rows, more than --max_batch_size=64"),
    ([-5], "negative dimension (-5)"),
    ([2 ** 62], f"declares {2 ** 62} rows"),
    ([1, 2 ** 62], "values, more than a request may hold"),
    ([1] * 9, "9 dimensions"),
])
def test_tensor_proto_declared_shape_is_refused_before_any_array(dims, message,
                                                                 monkeypatch):
    """A few bytes declaring 10^8 rows of one value: tf.make_ndarray would expand it."""
    proto = tf.make_tensor_proto(["x"])
    proto.tensor_shape.Clear()
    for size in dims:
        proto.tensor_shape.dim.add(size=size)
    spec = tf.TensorSpec([None], tf.string) if len(dims) == 1 else tf.TensorSpec(None, tf.string)
    expanded = []  # tensor_proto_to_array's one way to build the array
    monkeypatch.setattr(tf, "make_ndarray", expanded.append)
    refusal = _refusal(codecs.tensor_proto_to_array, "sentences", proto, spec, _limits())
    assert message in refusal and expanded == []


def test_json_shape_is_refused_before_any_array():
    """REST's declared shape is the nesting of its lists: checked along the first elements,
    before the leaves are gathered."""
    specs = {"sentences": tf.TensorSpec([None], tf.string)}
    message = _refusal(codecs.request_inputs, {"inputs": {"sentences": ["a"] * 70}}, specs,
                       _limits())
    assert "declares 70 rows, more than --max_batch_size=64" in message
    words = {"words": tf.TensorSpec([None, None], tf.string),
             "num_words": tf.TensorSpec([None], tf.int32)}
    message = _refusal(codecs.request_inputs,
                       {"inputs": {"words": [["w"] * 20_000], "num_words": [1]}}, words,
                       _limits())
    assert "declares 20000 values" in message

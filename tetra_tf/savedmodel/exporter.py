r"""Exports a trained tagger as one self-contained SavedModel for TF Serving.

The library of `python -m tetra_tf.export` (tetra_tf/export.py, whose docstring is the
program's --help).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from typing import Callable, Sequence

from tetra_tf import train_extra  # noqa: F401  (first: the [train] extra, Keras 2)

from absl import flags, logging
import numpy as np
import tensorflow as tf

from tetra_tf import cli, cpu
from tetra_tf.contract import export_format
from tetra_tf.contract import sentences as sentences_lib
from tetra_tf.contract import text as text_lib
from tetra_tf.data.tokenization import (MAX_PIECES_PER_CALL, MAX_WINDOW_POSITIONS_PER_CALL,
                                        SubwordTokenizer)
from tetra_tf.decode import chart_decoding
from tetra_tf.decode import constraints as constraints_lib
from tetra_tf.decode import decoding
from tetra_tf.decode import k_best as k_best_lib
from tetra_tf.decode import marginals
from tetra_tf.decode.tree_writer import TreeWriter
from tetra_tf.errors import InputError, ModelDirError
from tetra_tf.savedmodel.inference_encoder import InferenceEncoder
from tetra_tf.training import encoders, model_card
from tetra_tf.training import model_dir as model_dir_lib
from tetra_tf.training.model import ENCODER_INPUTS, TetraTagger, mean_log_probabilities
from tetra_tf.training.model_dir import load_tagger, resolve_checkpoint
from tetra_tf.trees import tags as tags_lib
from tetra_tf.trees.tags import TagVocabularies

# Windows shorter than seq_length go through the encoder trimmed to the longest of them,
# rounded up to a multiple of this (CPU matmuls prefer aligned sizes).
DEFAULT_LENGTH_MULTIPLE = 8
# Windows are grouped by real length into these buckets (up to the encoder's length).
DEFAULT_WINDOW_BUCKETS = (32, 64, 96, 128, 192, 256, 384)
# One encoder call runs at most this many window positions (windows × their bucket's
# length): attention's memory grows with positions × length, so a call of 32,768 pieces
# (128 windows of 512) takes ~0.2 GB of scores for MiniLM instead of ~1.6 GB at once.
DEFAULT_POSITIONS_PER_ENCODER_CALL = 8192
# Packed windows: several windows share an encoder row of at least this many positions
# (block-diagonal attention, per-window positions); 0 runs one window per row.
DEFAULT_PACK_LENGTH = 128  # measured: 1.14-1.39x at batch 64, the same at batch 1
MAX_PACK_LENGTH = 512  # BERT's positions: a row is at most one window long
# The encoder's matmul precision: float32, or bfloat16 (dense kernels and matmuls).
ENCODER_DTYPES = ("float32", "bfloat16")
DEFAULT_ENCODER_DTYPE = "float32"
# Warm-up requests written into every export (TF Serving replays them when it loads a
# version, so that no user request pays for the first run of each graph): a short, a
# medium and a long sentence, alone and together (the long one reaches the larger window
# buckets), through each signature.
WARMUP_SENTENCES = (
    "The cat sat on the mat .",
    "Analysts said the company 's shares , which rose 3 % last week , could fall again "
    "if sales do n't improve by the end of the year .",
    " , and ".join(["the committee approved the plan that the board had proposed in May"] * 8)
    + " .",
)


# --------------------------------------------------------------------------------------
# The serving module


def _string_variable(values: list[str], name: str) -> tf.Variable:
    return tf.Variable(tf.constant(values, tf.string), trainable=False, name=name)


# The signatures' inputs, by export_format's names.
_SENTENCES_SPEC = tf.TensorSpec([None], tf.string, export_format.SENTENCES_INPUT)
_WORDS_SPEC = tf.TensorSpec([None, None], tf.string, export_format.WORDS_INPUT)
_NUM_WORDS_SPEC = tf.TensorSpec([None], tf.int32, export_format.NUM_WORDS_INPUT)
_TEXT_SPEC = tf.TensorSpec([None], tf.string, export_format.TEXT_INPUT)
_MIN_PROBABILITY_SPEC = tf.TensorSpec([None], tf.float32, export_format.MIN_PROBABILITY_INPUT)
_CONSTRAINT_SPECS = [
    tf.TensorSpec([None, None, 2], tf.int32, export_format.FORCED_SPANS_INPUT),
    tf.TensorSpec([None, None], tf.string, export_format.FORCED_LABELS_INPUT),
    tf.TensorSpec([None, None, 2], tf.int32, export_format.FORBIDDEN_SPANS_INPUT),
    tf.TensorSpec([None, None], tf.string, export_format.GIVEN_POS_TAGS_INPUT),
]
# The inner functions' inputs: words [B, (W)], encoder windows [B, F, L], word end
# positions and tag ids [B, W], tag scores [B, W, V].
_RAGGED_WORDS_SPEC = tf.RaggedTensorSpec([None, None], tf.string, ragged_rank=1)
_WINDOWS_SPEC = tf.TensorSpec([None, None, None], tf.int32)
_POSITIONS_SPEC = tf.TensorSpec([None, None], tf.int32)
_IDS_SPEC = tf.TensorSpec([None, None], tf.int32)
_SCORES_SPEC = tf.TensorSpec([None, None, None], tf.float32)


class ParserModule(tf.Module):
    """The exported object: tokenizer, tagger weights, vocabularies and parse functions.

    Each signature is a `tf.function` method (`SIGNATURE_FUNCTIONS` names which); they
    share one `_ParseGraph`, whose pieces are written to the SavedModel's function library
    once. With several taggers (an ensemble), each runs on the same windows and their tag
    log-probabilities are averaged before the decoder. The Keras taggers themselves are
    kept out of the object graph (only the head variables and the `InferenceEncoder`s'
    copies of the encoder weights are tracked), so saving writes plain functions and
    variables without Keras metadata, which keeps the export fast and the SavedModel
    loadable without Keras.
    """

    def __init__(self, taggers: Sequence[TetraTagger], encoder_config: encoders.EncoderConfig,
                 tokenizer: SubwordTokenizer, vocabs: TagVocabularies, max_stack_depth: int,
                 length_multiple: int = DEFAULT_LENGTH_MULTIPLE,
                 encoder_dtype: str = DEFAULT_ENCODER_DTYPE,
                 pack_length: int = DEFAULT_PACK_LENGTH):
        """Args:
          taggers: the trained tagger, or an ensemble's members (same tag vocabularies and
            encoder_config).
          encoder_config: the taggers' encoder architecture.
          tokenizer, vocabs, max_stack_depth: the model directory's.
          length_multiple, encoder_dtype, pack_length: see `export`.
        """
        super().__init__(name="tetra_parser")
        if not taggers:
            raise ValueError("ParserModule needs at least one tagger")
        self.tokenizer = tokenizer
        self.encoders = [InferenceEncoder(tagger.encoder, encoder_config,
                                          compute_dtype=tf.as_dtype(encoder_dtype),
                                          layer_weights=tagger.layer_weights())
                         for tagger in taggers]
        self.pack_length = pack_length  # a Python int: fixed in the graph, not saved
        # The layer mix is folded into the encoder: only the tag heads are saved.
        self.head_variables = [v for tagger in taggers for v in tagger.tag_head_variables]
        self.max_stack_depth = tf.Variable(max_stack_depth, dtype=tf.int32, trainable=False,
                                           name="max_stack_depth")
        self.leaf_tags = _string_variable(vocabs.leaf.tags, "leaf_tags")
        self.internal_tags = _string_variable(vocabs.internal.tags, "internal_tags")
        self.pos_tags = _string_variable(vocabs.pos.tags, "pos_tags")
        graph_rules = constraints_lib.GraphRules(
            [tags_lib.split_chain(tags_lib.tag_label(tag)) for tag in vocabs.leaf.tags],
            [tags_lib.split_chain(tags_lib.tag_label(tag)) for tag in vocabs.internal.tags])
        # The labels a forced span may name (each label of every tag's chain).
        self.phrase_labels = _string_variable(graph_rules.labels or [""], "phrase_labels")
        if tokenizer.max_pieces_per_word is None:
            raise ValueError("the exported tokenizer needs a max_pieces_per_word cap")
        # The work bounds the graph enforces, for clients (also in assets.extra/limits.json).
        self.max_pieces_per_word = tf.Variable(
            tokenizer.max_pieces_per_word, dtype=tf.int32, trainable=False,
            name=export_format.MAX_PIECES_PER_WORD_KEY)
        self.max_pieces_per_call = tf.Variable(
            MAX_PIECES_PER_CALL, dtype=tf.int32, trainable=False,
            name=export_format.MAX_PIECES_PER_CALL_KEY)
        self.max_window_positions_per_call = tf.Variable(
            MAX_WINDOW_POSITIONS_PER_CALL, dtype=tf.int32, trainable=False,
            name=export_format.MAX_WINDOW_POSITIONS_PER_CALL_KEY)
        # A plain object, so that what it holds stays out of the object graph.
        self._parse_graph = _ParseGraph(self, taggers, encoder_config.max_sequence_length,
                                        vocabs, graph_rules, max_stack_depth, length_multiple)

    def signatures(self) -> dict[str, Callable]:
        """The SavedModel's signatures: each name and its function (`SIGNATURE_FUNCTIONS`).

        The functions themselves, not concrete functions traced here: saving traces them
        again in its own context, and would then write every graph twice.
        """
        return {name: getattr(self, function)
                for name, function in SIGNATURE_FUNCTIONS.items()}

    @tf.function(input_signature=[_WINDOWS_SPEC] * 3 + [_POSITIONS_SPEC], autograph=False)
    def encode(self, input_word_ids: tf.Tensor, input_mask: tf.Tensor,
               input_type_ids: tf.Tensor, word_end_positions: tf.Tensor) -> dict:
        """The encoder inputs (`tokenize`'s) → leaf, internal and POS logits [B, W, V] (an
        ensemble's: its members' mean log-probabilities)."""
        outputs = [window_tagger(input_word_ids, input_mask, input_type_ids,
                                 word_end_positions)
                   for window_tagger in self._parse_graph.window_taggers]
        return outputs[0] if len(outputs) == 1 else mean_log_probabilities(outputs)

    @tf.function(input_signature=[_WORDS_SPEC, _NUM_WORDS_SPEC], autograph=False)
    def tokenize(self, words: tf.Tensor, num_words: tf.Tensor) -> dict:
        """Words [B, W] and num_words [B] → the encoder inputs (`encode`'s)."""
        return self._parse_graph.pack(_checked_ragged(words, num_words))

    @tf.function(input_signature=[_SENTENCES_SPEC], autograph=False)
    def parse_sentences(self, sentences: tf.Tensor) -> dict:
        """serving_default: sentences [B], words separated by whitespace."""
        return self._parse_graph.parse(split_sentences(sentences))

    @tf.function(input_signature=[_WORDS_SPEC, _NUM_WORDS_SPEC], autograph=False)
    def parse_words(self, words: tf.Tensor, num_words: tf.Tensor) -> dict:
        """parse_words: words [B, W], of which each row's first num_words [B]."""
        return self._parse_graph.parse(_checked_ragged(words, num_words))

    @tf.function(input_signature=[_TEXT_SPEC], autograph=False)
    def parse_text(self, text: tf.Tensor) -> dict:
        """parse_text: raw texts [B], split into sentences and words in the graph; the
        outputs by text [B, S, ...], with the character offsets."""
        documents = text_lib.graph_tokenize_document(text)
        sentences_per_text = documents.words.row_lengths()
        parsed = self._parse_graph.parse(documents.words.values)

        def per_text(name: str, padding) -> tf.Tensor:
            """An output [N, ...] over all sentences → [B, S, ...] by text."""
            return tf.RaggedTensor.from_row_lengths(
                parsed[name], sentences_per_text).to_tensor(default_value=padding)

        def offsets(ragged: tf.RaggedTensor) -> tf.Tensor:
            return tf.cast(ragged.to_tensor(default_value=-1), tf.int32)

        return {
            export_format.NUM_SENTENCES_OUTPUT: tf.cast(sentences_per_text, tf.int32),
            export_format.SENTENCE_STARTS_OUTPUT: offsets(documents.sentence_starts),
            export_format.SENTENCE_ENDS_OUTPUT: offsets(documents.sentence_ends),
            export_format.NUM_WORDS_OUTPUT: per_text(export_format.NUM_WORDS_OUTPUT, -1),
            export_format.WORDS_OUTPUT: per_text(export_format.WORDS_OUTPUT, ""),
            export_format.WORD_STARTS_OUTPUT: offsets(documents.word_starts),
            export_format.WORD_ENDS_OUTPUT: offsets(documents.word_ends),
            export_format.POS_TAGS_OUTPUT: per_text(export_format.POS_TAGS_OUTPUT, ""),
            export_format.SCORE_OUTPUT: per_text(export_format.SCORE_OUTPUT, 0.0),
            export_format.TREE_OUTPUT: per_text(export_format.TREE_OUTPUT, ""),
        }

    @tf.function(input_signature=[_SENTENCES_SPEC], autograph=False)
    def parse_marginals(self, sentences: tf.Tensor) -> dict:
        """parse_marginals: serving_default's, and each constituent's probability."""
        return self._parse_graph.parse_with_marginals(split_sentences(sentences))

    @tf.function(input_signature=[_SENTENCES_SPEC], autograph=False)
    def parse_k_best(self, sentences: tf.Tensor) -> dict:
        """parse_k_best: serving_default's, and the K_BEST best trees."""
        return self._parse_graph.parse_with_k_best(split_sentences(sentences))

    @tf.function(input_signature=[_SENTENCES_SPEC, _MIN_PROBABILITY_SPEC], autograph=False)
    def parse_span_marginals(self, sentences: tf.Tensor, min_probability: tf.Tensor) -> dict:
        """parse_span_marginals: parse_marginals', and every labelled span with at least
        its sentence's min_probability [B]."""
        check = tf.debugging.assert_equal(
            tf.shape(min_probability), tf.shape(sentences),
            message=f"{export_format.MIN_PROBABILITY_INPUT}: one per sentence")
        with tf.control_dependencies([check]):
            min_probability = tf.identity(min_probability)
        return self._parse_graph.parse_body(split_sentences(sentences),
                                            min_span_probability=min_probability)

    @tf.function(input_signature=[_SENTENCES_SPEC] + _CONSTRAINT_SPECS, autograph=False)
    def parse_constrained(self, sentences: tf.Tensor, forced_spans: tf.Tensor,
                          forced_labels: tf.Tensor, forbidden_spans: tf.Tensor,
                          given_pos_tags: tf.Tensor) -> dict:
        """parse_constrained: the best tree under each sentence's constraints, and whether
        one satisfies them."""
        inputs = (forced_spans, forced_labels, forbidden_spans, given_pos_tags)
        rules = self._parse_graph.rules
        with tf.control_dependencies(rules.shape_checks(tf.shape(sentences)[0], *inputs)):
            sentences, *inputs = (tf.identity(x) for x in (sentences,) + inputs)
        return self._parse_graph.parse_body(
            split_sentences(sentences),
            constraint_inputs=dict(zip(export_format.CONSTRAINT_INPUTS, inputs)))


# The one table of the SavedModel's signatures: each name and the ParserModule function
# that serves it (the export writes them, the warm-up requests call them, in this order).
SIGNATURE_FUNCTIONS = {
    export_format.SERVING_SIGNATURE: "parse_sentences",
    export_format.PARSE_WORDS_SIGNATURE: "parse_words",
    export_format.PARSE_TEXT_SIGNATURE: "parse_text",
    export_format.PARSE_MARGINALS_SIGNATURE: "parse_marginals",
    export_format.PARSE_K_BEST_SIGNATURE: "parse_k_best",
    export_format.PARSE_CONSTRAINED_SIGNATURE: "parse_constrained",
    export_format.PARSE_SPAN_MARGINALS_SIGNATURE: "parse_span_marginals",
}


def _checked_ragged(words: tf.Tensor, num_words: tf.Tensor) -> tf.RaggedTensor:
    """Words [B, W] and num_words [B] → words [B, (W)], once each row's count fits its
    width and each word is non-empty and holds no whitespace."""
    checks = [
        tf.debugging.assert_non_negative(num_words, message="negative num_words"),
        tf.debugging.assert_less_equal(
            num_words, tf.shape(words)[1],
            message="num_words exceeds the width of words"),
        tf.debugging.assert_equal(tf.shape(words)[0], tf.shape(num_words)[0],
                                  message="words and num_words differ in batch size"),
    ]
    with tf.control_dependencies(checks):
        ragged = tf.RaggedTensor.from_tensor(words, lengths=num_words)
    word_checks = [
        tf.debugging.assert_positive(tf.strings.length(ragged.flat_values),
                                     message="bad_words: empty word"),
        tf.debugging.Assert(tf.logical_not(tf.reduce_any(tf.strings.regex_full_match(
            ragged.flat_values, "(?s).*" + sentences_lib.WHITESPACE_PATTERN + ".*"))),
            ["bad_words: a word contains whitespace"]),
    ]
    with tf.control_dependencies(word_checks):
        return tf.identity(ragged)


class _ParseGraph:
    """The graph behind the signatures, words [B, (W)] → the outputs: tokenizer, tagger
    (the module's `encode`), log-softmax, decoder, POS argmax, tree writer, and marginals,
    k best trees or constraints for the signatures that give them.

    The pieces every signature calls are tf.functions of their own, so that the
    SavedModel's function library holds the tagger and the decoder once, whichever
    signature calls them. A plain object, not a tf.Module: what it holds (the Keras
    taggers, through their `WindowTagger`s; the decoders' Python settings) stays out of
    the SavedModel's object graph, and so do its functions.
    """

    def __init__(self, module: ParserModule, taggers: Sequence[TetraTagger], seq_length: int,
                 vocabs: TagVocabularies, rules: constraints_lib.GraphRules,
                 max_stack_depth: int, length_multiple: int):
        """Args:
          module: the module whose tokenizer, encoders, `encode` and vocabularies it uses.
          taggers, vocabs, max_stack_depth, length_multiple: `ParserModule`'s.
          seq_length: the encoder's window length.
          rules: the constraints' span rules over vocabs' tags.
        """
        self._module = module
        self._seq_length = seq_length
        self.window_taggers = [
            WindowTagger(tagger, seq_length, encoder=encoder, length_multiple=length_multiple,
                         pack_length=module.pack_length)
            for tagger, encoder in zip(taggers, module.encoders)]
        self.rules = rules
        self._max_stack_depth = max_stack_depth
        self._tree_writer = TreeWriter(vocabs)
        self._leaf_directions = vocabs.leaf.directions()
        self._internal_directions = vocabs.internal.directions()
        self._chain_marginals = marginals.ChainMarginals(
            vocabs.leaf.tags, vocabs.internal.tags, self._leaf_directions,
            self._internal_directions)
        # parse_span_marginals names its labels by phrase_labels' ids.
        assert self._chain_marginals.labels == rules.labels

    @tf.function(input_signature=[_RAGGED_WORDS_SPEC], autograph=False)
    def pack(self, ragged_words: tf.RaggedTensor) -> dict:
        return self._module.tokenizer.tokenize_and_pack(
            ragged_words, self._seq_length, max_pieces_per_call=MAX_PIECES_PER_CALL,
            max_window_positions_per_call=MAX_WINDOW_POSITIONS_PER_CALL)

    @tf.function(input_signature=[_SCORES_SPEC, _SCORES_SPEC, _NUM_WORDS_SPEC],
                 autograph=False)
    def decode_best(self, leaf_scores: tf.Tensor, internal_scores: tf.Tensor,
                    lengths: tf.Tensor) -> decoding.DecodeResult:
        return decoding.decode(leaf_scores, internal_scores, lengths, self._leaf_directions,
                               self._internal_directions, self._max_stack_depth)

    @tf.function(input_signature=[_WORDS_SPEC, _WORDS_SPEC, _IDS_SPEC, _IDS_SPEC,
                                  _NUM_WORDS_SPEC], autograph=False)
    def write_trees(self, words: tf.Tensor, pos_tags: tf.Tensor, leaf_tag_ids: tf.Tensor,
                    internal_tag_ids: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
        return self._tree_writer(words, pos_tags, leaf_tag_ids, internal_tag_ids, lengths)

    @tf.function(input_signature=[_RAGGED_WORDS_SPEC], autograph=False)
    def parse(self, ragged_words: tf.RaggedTensor) -> dict:
        return self.parse_body(ragged_words)

    @tf.function(input_signature=[_RAGGED_WORDS_SPEC], autograph=False)
    def parse_with_marginals(self, ragged_words: tf.RaggedTensor) -> dict:
        return self.parse_body(ragged_words, with_marginals=True)

    @tf.function(input_signature=[_RAGGED_WORDS_SPEC], autograph=False)
    def parse_with_k_best(self, ragged_words: tf.RaggedTensor) -> dict:
        return self.parse_body(ragged_words, with_k_best=True)

    def parse_body(self, ragged_words: tf.RaggedTensor, with_marginals: bool = False,
                   with_k_best: bool = False, constraint_inputs: dict | None = None,
                   min_span_probability: tf.Tensor | None = None) -> dict:
        """Words [B, (W)] → every parse's outputs, and those asked for besides.

        Args:
          ragged_words: the sentences' words.
          with_marginals: add each constituent's marginal probability.
          with_k_best: add the K_BEST best trees.
          constraint_inputs: parse_constrained's inputs by name: decode under them.
          min_span_probability: [B]: add the marginals, and every labelled span at or above
            its row's floor.
        """
        module = self._module
        if with_marginals or min_span_probability is not None:
            ragged_words = self._within_marginal_bounds(ragged_words, min_span_probability)
        packed = self.pack(ragged_words)
        logits = module.encode(*(packed[key]
                                 for key in ENCODER_INPUTS + ("word_end_positions",)))
        lengths = packed["num_words"]
        leaf_scores = tf.nn.log_softmax(logits["leaf_logits"])
        internal_scores = tf.nn.log_softmax(logits["internal_logits"])
        if constraint_inputs is None:
            result = self.decode_best(leaf_scores, internal_scores, lengths)
        else:
            result = self._constrained_decode(leaf_scores, internal_scores, lengths,
                                              constraint_inputs)
        width = tf.shape(result.leaf_tag_ids)[1]
        is_word = tf.range(width)[None, :] < lengths[:, None]
        pos_tag_ids = tf.where(
            is_word, tf.argmax(logits["pos_logits"], axis=-1, output_type=tf.int32), -1)
        if constraint_inputs is not None:
            pos_tag_ids = self._given_pos_tag_ids(
                pos_tag_ids, constraint_inputs[export_format.GIVEN_POS_TAGS_INPUT], lengths)
        words = ragged_words.to_tensor(default_value="")
        pos_tags = _lookup(module.pos_tags, pos_tag_ids)
        tree_lengths = (lengths if constraint_inputs is None
                        else tf.where(result.satisfied, lengths, 0))
        outputs = {
            export_format.NUM_WORDS_OUTPUT: lengths,
            export_format.WORDS_OUTPUT: words,
            export_format.LEAF_TAG_IDS_OUTPUT: result.leaf_tag_ids,
            export_format.INTERNAL_TAG_IDS_OUTPUT: result.internal_tag_ids,
            export_format.POS_TAG_IDS_OUTPUT: pos_tag_ids,
            export_format.LEAF_TAGS_OUTPUT: _lookup(module.leaf_tags, result.leaf_tag_ids),
            export_format.INTERNAL_TAGS_OUTPUT: _lookup(module.internal_tags,
                                                        result.internal_tag_ids),
            export_format.POS_TAGS_OUTPUT: pos_tags,
            export_format.SCORE_OUTPUT: tf.cast(result.scores, tf.float32),
            export_format.TREE_OUTPUT: self.write_trees(
                words, pos_tags, result.leaf_tag_ids, result.internal_tag_ids, tree_lengths),
        }
        if constraint_inputs is not None:
            # A sentence no tree satisfies gets no tree (tags −1, tree "", score 0).
            outputs[export_format.SATISFIED_OUTPUT] = result.satisfied
            outputs[export_format.SCORE_OUTPUT] = tf.where(
                result.satisfied, outputs[export_format.SCORE_OUTPUT], 0.0)
        if with_marginals or min_span_probability is not None:
            lattice = marginals.GraphLattice(leaf_scores, internal_scores, lengths,
                                             self._leaf_directions, self._internal_directions,
                                             self._max_stack_depth)
            outputs.update(self._constituent_marginals(lattice, leaf_scores, internal_scores,
                                                       lengths, result))
        if min_span_probability is not None:
            outputs.update(self._every_span_marginals(lattice, leaf_scores, internal_scores,
                                                      min_span_probability))
        if with_k_best:
            outputs.update(self._k_best_trees(leaf_scores, internal_scores, lengths, words,
                                              pos_tags))
        return outputs

    def _constrained_decode(self, leaf_scores, internal_scores, lengths, inputs: dict):
        """The best tree under parse_constrained's `inputs`, once the call's bounds hold."""
        forced_spans = inputs[export_format.FORCED_SPANS_INPUT]
        forced_labels = inputs[export_format.FORCED_LABELS_INPUT]
        forbidden_spans = inputs[export_format.FORBIDDEN_SPANS_INPUT]
        checks = self.rules.checks(forced_spans, forced_labels, forbidden_spans, lengths)
        checks.append(tf.debugging.assert_less_equal(
            lengths, export_format.MAX_CONSTRAINED_WORDS,
            message=f"too_many_words: parse_constrained takes sentences of at most "
                    f"{export_format.MAX_CONSTRAINED_WORDS} words"))
        shape = tf.shape(internal_scores, out_type=tf.int64)
        cells = (shape[0] * shape[1]
                 * tf.maximum(tf.shape(leaf_scores, out_type=tf.int64)[2], shape[2])
                 * (1 + tf.shape(forced_spans, out_type=tf.int64)[1]
                    + tf.shape(forbidden_spans, out_type=tf.int64)[1]))
        most_cells = export_format.MAX_CONSTRAINT_SCORE_CELLS
        checks.append(tf.debugging.Assert(cells <= most_cells, [
            f"{sentences_lib.BAD_CONSTRAINTS}: the constraints of the call need more "
            f"than {most_cells} score cells (sentences x words x tags "
            f"x (spans + 1)): send fewer sentences or spans per call"]))
        chart_cells = shape[0] * shape[1] * shape[1] * 2 * self._max_stack_depth
        checks.append(tf.debugging.Assert(chart_cells <= export_format.MAX_CHART_CELLS, [
            f"{sentences_lib.TOO_MANY_WORDS}: the chart of the call needs more than "
            f"{export_format.MAX_CHART_CELLS} cells (sentences x words x words x 2 x "
            f"depth): send fewer or shorter sentences per call"]))
        with tf.control_dependencies(checks):
            leaf_scores, internal_scores, forced_spans, forbidden_spans = (
                tf.identity(x) for x in (leaf_scores, internal_scores, forced_spans,
                                         forbidden_spans))
        rules = self.rules(forced_spans, forced_labels, forbidden_spans)
        return chart_decoding.chart_decode(leaf_scores, internal_scores, lengths,
                                           self._leaf_directions, self._internal_directions,
                                           rules, self._max_stack_depth)

    def _given_pos_tag_ids(self, predicted, given, lengths):
        """The predicted ids, replaced where a part of speech is given."""
        pos_tags = self._module.pos_tags
        width = tf.shape(predicted)[1]
        given = tf.pad(given, [[0, 0], [0, tf.maximum(width - tf.shape(given)[1], 0)]])
        positions = tf.range(tf.shape(given)[1])[None, :]
        matches = tf.equal(given[..., None], pos_tags[None, None, :])
        known = tf.reduce_any(matches, axis=-1)
        is_given = tf.not_equal(given, "")
        checks = [
            tf.debugging.Assert(tf.reduce_all(~is_given | known), [
                f"{sentences_lib.BAD_CONSTRAINTS}: a given part of speech is not one the "
                f"model knows"]),
            tf.debugging.Assert(tf.reduce_all(~is_given | (positions < lengths[:, None])), [
                f"{sentences_lib.BAD_CONSTRAINTS}: a part of speech is given past the "
                f"last word of its sentence"]),
        ]
        with tf.control_dependencies(checks):
            ids = tf.argmax(tf.cast(matches, tf.int32), axis=-1, output_type=tf.int32)
        return tf.where(is_given[:, :width], ids[:, :width], predicted)

    def _k_best_trees(self, leaf_scores, internal_scores, lengths, words, pos_tags) -> dict:
        k = export_format.K_BEST
        best = k_best_lib.k_best(leaf_scores, internal_scores, lengths, self._leaf_directions,
                                 self._internal_directions, k, self._max_stack_depth)
        batch, width = tf.shape(words)[0], tf.shape(words)[1]
        found = (best.scores > -np.inf) & (lengths > 0)[:, None]  # [B, K]

        def rows(ids):
            return tf.reshape(ids, [batch * k, width])

        def repeated(values):
            return tf.repeat(values, k, axis=0)

        trees = self.write_trees(repeated(words), repeated(pos_tags), rows(best.leaf_tag_ids),
                                 rows(best.internal_tag_ids),
                                 tf.where(tf.reshape(found, [-1]), repeated(lengths), 0))
        return {
            export_format.NUM_K_BEST_OUTPUT: tf.reduce_sum(tf.cast(found, tf.int32), axis=1),
            export_format.K_BEST_TREES_OUTPUT: tf.reshape(trees, [batch, k]),
            export_format.K_BEST_SCORES_OUTPUT: tf.where(
                found, tf.cast(best.scores, tf.float32), 0.0),
        }

    def _within_marginal_bounds(self, ragged_words: tf.RaggedTensor,
                                min_span_probability: tf.Tensor | None) -> tf.RaggedTensor:
        """The words, once the marginals' bounds hold: checked before any model work."""
        lengths = ragged_words.row_lengths()
        checks = [tf.debugging.assert_less_equal(
            lengths, tf.constant(export_format.MAX_MARGINALS_WORDS, tf.int64),
            message=f"{sentences_lib.TOO_MANY_WORDS}: marginals take sentences of at "
                    f"most {export_format.MAX_MARGINALS_WORDS} words")]
        if min_span_probability is not None:
            width = tf.reduce_max(tf.concat([lengths, [0]], axis=0))
            cells = (tf.shape(lengths, out_type=tf.int64)[0] * width * width
                     * max(len(self._chain_marginals.labels),
                           2 * (self._max_stack_depth + 1)))
            checks += [
                tf.debugging.Assert(cells <= export_format.MAX_SPAN_MARGINAL_CELLS, [
                    f"{sentences_lib.TOO_MANY_WORDS}: parse_span_marginals needs more "
                    f"than {export_format.MAX_SPAN_MARGINAL_CELLS} cells for the call "
                    f"(sentences x words x words x max(labels, 2 x (depth + 1))): send "
                    f"fewer or shorter sentences per call"]),
                tf.debugging.Assert(tf.reduce_all(
                    (min_span_probability >= 0.0) & (min_span_probability <= 1.0)), [
                    f"{export_format.MIN_PROBABILITY_INPUT}: each must be a number from 0 "
                    f"to 1"]),
            ]
        with tf.control_dependencies(checks):
            return ragged_words.with_flat_values(tf.identity(ragged_words.flat_values))

    def _constituent_marginals(self, lattice, leaf_scores, internal_scores, lengths,
                               result) -> dict:
        ids = (result.leaf_tag_ids, result.internal_tag_ids)
        starts, ends = self._tree_writer.node_spans(*ids, lengths)
        per_node = self._chain_marginals(lattice, leaf_scores, internal_scores, *ids, starts,
                                         ends)
        ordered = self._tree_writer.in_bracket_order(*per_node, *ids, lengths)
        probability = tf.exp(result.scores - lattice.log_partition)
        return {
            export_format.CONSTITUENT_MARGINALS_OUTPUT: ordered.to_tensor(default_value=0.0),
            export_format.NUM_CONSTITUENTS_OUTPUT: tf.cast(ordered.row_lengths(), tf.int32),
            export_format.TREE_PROBABILITY_OUTPUT: tf.where(lengths > 0, probability, 0.0),
        }

    def _every_span_marginals(self, lattice, leaf_scores, internal_scores,
                              min_probability) -> dict:
        """Every labelled span at or above its row's min_probability: [B, S] each (its
        bounds were checked by _within_marginal_bounds)."""
        table = tf.minimum(tf.cast(self._chain_marginals.every_span(
            lattice, leaf_scores, internal_scores), tf.float32), 1.0)  # [B, I, J, E]
        found = tf.where((table > 0.0) & (table >= min_probability[:, None, None, None]))
        batch = tf.shape(table, out_type=tf.int64)[0]

        def by_row(values, padding):
            return tf.RaggedTensor.from_value_rowids(
                values, found[:, 0], nrows=batch).to_tensor(default_value=padding)

        return {
            export_format.SPAN_STARTS_OUTPUT: by_row(tf.cast(found[:, 1], tf.int32), -1),
            export_format.SPAN_ENDS_OUTPUT: by_row(tf.cast(found[:, 2], tf.int32), -1),
            export_format.SPAN_LABELS_OUTPUT: by_row(
                _lookup(self._module.phrase_labels, found[:, 3]), ""),
            export_format.SPAN_PROBABILITIES_OUTPUT: by_row(tf.gather_nd(table, found), 0.0),
            export_format.NUM_SPANS_OUTPUT: tf.math.bincount(
                tf.cast(found[:, 0], tf.int32), minlength=tf.cast(batch, tf.int32),
                maxlength=tf.cast(batch, tf.int32)),
        }


class WindowTagger:
    """The tagger's logits (inference), with the encoder run on length-bucketed windows.

    Equal to ``tagger(inputs, training=False)``, but the [B, F, L] windows are regrouped
    before the encoder: all-padding windows (the extra windows of sentences shorter than
    the batch's longest) are dropped, and the others are grouped by their real length into
    buckets, each run trimmed to its own longest window (rounded up to a multiple of
    `length_multiple`). So a batch is never padded much beyond each sentence's own length,
    even when it mixes short sentences with long (or multi-window) ones, as unsorted
    requests do. A loop visits only the buckets present (one for a length-sorted batch),
    in chunks of at most `positions_per_call` // bucket length windows (bounding the
    encoder's memory per call), each writing its words' features into the batch's [B·W, H]
    feature rows. When every sentence has one window and all share a bucket (one-sentence
    requests, length-sorted batches), one encoder call on the trimmed windows does it all.
    With `pack_length` (the export's default), the windows are first packed several to a
    row (`_packed_features`), and the rows take the windows' place in the buckets.
    """

    def __init__(self, tagger: TetraTagger, seq_length: int, encoder=None,
                 bucket_lengths: tuple[int, ...] = DEFAULT_WINDOW_BUCKETS,
                 length_multiple: int = DEFAULT_LENGTH_MULTIPLE,
                 positions_per_call: int = DEFAULT_POSITIONS_PER_ENCODER_CALL,
                 pack_length: int = 0):
        """Args:
          tagger: the Keras tagger, for its heads (and its encoder if `encoder` is None).
          seq_length: the windows' length L.
          encoder: (input_word_ids, input_mask, input_type_ids) [N, L'] → [N, L', H],
            e.g. an `InferenceEncoder`; None: the tagger's Keras encoder.
          bucket_lengths: upper bounds of the length buckets below L.
          length_multiple: trimmed windows are rounded up to a multiple of this.
          positions_per_call: windows × bucket length per encoder call (at least one window).
          pack_length: > 0: pack the windows into rows of max(pack_length, the longest
            window) positions instead (`_packed_features`); the encoder must take
            position_ids and segment_ids (`InferenceEncoder` does).
        """
        self._tagger = tagger
        if encoder is None:
            encoder = lambda *inputs: tagger.sequence_features(  # noqa: E731
                dict(zip(ENCODER_INPUTS, inputs)), training=False)
        self._encoder = encoder
        upper_bounds = [n for n in sorted(bucket_lengths) if n < seq_length] + [seq_length]
        self._upper_bounds = np.array(upper_bounds, dtype=np.int32)
        self._windows_per_call = np.maximum(
            1, positions_per_call // self._upper_bounds).astype(np.int32)
        self._length_multiple = length_multiple
        self._positions_per_call = positions_per_call
        self._pack_length = pack_length
        self._hidden_size = int(tagger.leaf_head.kernel.shape[0])

    def __call__(self, input_word_ids: tf.Tensor, input_mask: tf.Tensor,
                 input_type_ids: tf.Tensor, word_end_positions: tf.Tensor) -> dict:
        """Returns leaf_logits, internal_logits, pos_logits: float32 [B, W, V].

        Args:
          input_word_ids, input_mask, input_type_ids: int32 [B, F, L] from `pack_windows`.
          word_end_positions: int32 [B, W], positions in each sentence's F·L positions.
        """
        shape = tf.shape(input_word_ids)
        windows, length = shape[1], shape[2]
        flat = [tf.reshape(x, [-1, length])
                for x in (input_word_ids, input_mask, input_type_ids)]
        window_lengths = tf.reduce_sum(flat[1], axis=1)  # [B·F], 0 for padding windows
        batch_size = tf.shape(word_end_positions)[0]
        # The common case (every request of one sentence, and length-sorted batches): one
        # window per sentence, all in one bucket, one encoder call. It skips the bucket
        # loop's bookkeeping, which costs as much as a short sentence's decoding.
        longest = tf.reduce_max(tf.concat([window_lengths, [0]], axis=0))
        shortest = tf.reduce_min(tf.concat([tf.boolean_mask(window_lengths, window_lengths > 0),
                                            [longest]], axis=0))
        trim = tf.minimum(-(-longest // self._length_multiple) * self._length_multiple, length)
        one_call = ((windows == 1) & (longest > 0)
                    & tf.equal(self._bucket_of(longest), self._bucket_of(shortest))
                    & (batch_size * trim <= self._positions_per_call))
        if self._pack_length > 0:  # packed, unless the batch is one window
            one_call &= tf.equal(batch_size, 1)
            several = lambda: self._packed_features(  # noqa: E731
                flat, window_lengths, windows, length, word_end_positions)
        else:
            several = lambda: self._bucketed_features(  # noqa: E731
                flat, window_lengths, windows, length, word_end_positions)
        features = tf.cond(
            one_call, lambda: self._features_in_one_call(flat, trim, word_end_positions),
            several)
        return self._tagger.head_logits(features)

    def _bucket_of(self, window_length: tf.Tensor) -> tf.Tensor:
        return tf.searchsorted(self._upper_bounds, window_length[None], side="left")[0]

    def _features_in_one_call(self, flat: list[tf.Tensor], trim: tf.Tensor,
                              word_end_positions: tf.Tensor) -> tf.Tensor:
        """[B, W, H] features from one encoder call on one-window sentences trimmed to `trim`."""
        output = self._encoder(*(x[:, :trim] for x in flat))
        output = tf.reshape(tf.cast(output, tf.float32), [-1, self._hidden_size])
        rows = tf.range(tf.shape(word_end_positions)[0])[:, None] * trim + word_end_positions
        # Padded words (position 0, the [CLS]) get zero features, as in the bucketed path.
        return tf.where(word_end_positions[..., None] > 0, tf.gather(output, rows), 0.0)

    def _bucketed_features(self, flat: list[tf.Tensor], window_lengths: tf.Tensor,
                           windows: tf.Tensor, length: tf.Tensor,
                           word_end_positions: tf.Tensor) -> tf.Tensor:
        """[B, W, H] features, the windows grouped by length bucket, in bounded chunks."""
        word_window, word_position = _word_places(word_end_positions, windows, length)
        return self._encode_rows(flat, window_lengths, length, word_window, word_position,
                                 tf.shape(word_end_positions))

    def _encode_rows(self, rows: list[tf.Tensor], row_lengths: tf.Tensor, length: tf.Tensor,
                     word_row: tf.Tensor, word_column: tf.Tensor, words_shape: tf.Tensor,
                     packing: dict[str, tf.Tensor] | None = None) -> tf.Tensor:
        """[B, W, H] features of words at (row, column) of encoder rows [N, L].

        The rows are grouped by their real length into buckets, each bucket's in chunks of
        at most windows_per_call[bucket] rows, each chunk's encoder call trimmed to its
        longest row. `packing` holds the rows' position_ids and segment_ids when they hold
        several windows each. A word whose row is empty (−1 or no pieces) gets zero
        features.
        """
        # Bucket k holds the rows with upper_bounds[k − 1] < length ≤ upper_bounds[k].
        buckets = tf.where(
            row_lengths > 0, tf.searchsorted(self._upper_bounds, row_lengths, side="left"), -1)
        present, _ = tf.unique(tf.boolean_mask(buckets, buckets >= 0))
        word_bucket = tf.where(word_row >= 0, tf.gather(buckets, tf.maximum(word_row, 0)), -1)
        multiple = self._length_multiple

        # (bucket, chunk) pairs: each bucket's rows in chunks of windows_per_call[bucket].
        per_call = tf.gather(self._windows_per_call, present)
        counts = tf.reduce_sum(tf.cast(tf.equal(buckets[None, :], present[:, None]), tf.int32),
                               axis=1)
        num_chunks = (counts + per_call - 1) // per_call
        pair_bucket = tf.repeat(present, num_chunks)
        pair_chunk = tf.ragged.range(num_chunks).flat_values

        def encode_chunk(i, features):
            bucket, chunk = pair_bucket[i], pair_chunk[i]
            size = tf.gather(self._windows_per_call, bucket)
            in_bucket = tf.equal(buckets, bucket)
            rank = tf.cumsum(tf.cast(in_bucket, tf.int32), exclusive=True)  # within bucket
            in_chunk = in_bucket & tf.equal(rank // size, chunk)
            selected = tf.cast(tf.where(in_chunk)[:, 0], tf.int32)
            longest = tf.reduce_max(tf.gather(row_lengths, selected))
            trim = tf.minimum(-(-longest // multiple) * multiple, length)
            extra = {name: tf.gather(x, selected)[:, :trim]
                     for name, x in (packing or {}).items()}
            output = self._encoder(*(tf.gather(x, selected)[:, :trim] for x in rows), **extra)
            output = tf.reshape(tf.cast(output, tf.float32), [-1, self._hidden_size])
            word_rank = tf.gather(rank, tf.maximum(word_row, 0))
            words = tf.cast(tf.where(tf.equal(word_bucket, bucket)
                                     & tf.equal(word_rank // size, chunk))[:, 0], tf.int32)
            positions = ((tf.gather(word_rank, words) - chunk * size) * trim
                         + tf.gather(word_column, words))
            return i + 1, tf.tensor_scatter_nd_update(features, words[:, None],
                                                      tf.gather(output, positions))

        # Words of sentences without pieces keep zero features (their tags are ignored).
        features = tf.zeros([tf.size(word_row), self._hidden_size], tf.float32)
        _, features = tf.while_loop(lambda i, _: i < tf.size(pair_bucket), encode_chunk,
                                    (tf.constant(0), features))
        return tf.reshape(features, tf.concat([words_shape, [self._hidden_size]], axis=0))

    def _packed_features(self, flat: list[tf.Tensor], window_lengths: tf.Tensor,
                         windows: tf.Tensor, length: tf.Tensor,
                         word_end_positions: tf.Tensor) -> tf.Tensor:
        """[B, W, H] features, the windows packed several to an encoder row.

        The windows go first-fit decreasing into rows of max(pack_length, the longest
        window) positions; the rows then go through `_encode_rows` (bucketed by how full
        they are, so a lone short window is not padded to a full row). Each window keeps
        its own positions (0, 1, ...) and attends only to itself, so its features equal an
        unpacked run's to float rounding, while padding falls to the rows' ends.
        """
        num_windows = tf.shape(window_lengths)[0]
        multiple = self._length_multiple
        longest = tf.reduce_max(tf.concat([window_lengths, [0]], axis=0))
        row_length = tf.minimum(
            tf.maximum(self._pack_length, -(-longest // multiple) * multiple), length)
        real = tf.cast(tf.where(window_lengths > 0)[:, 0], tf.int32)
        order = tf.gather(real, tf.argsort(tf.gather(window_lengths, real),
                                           direction="DESCENDING", stable=True))

        def place(i, room, row_of, offset_of):
            window = order[i]
            need = window_lengths[window]
            row = tf.argmax(tf.cast(room >= need, tf.int32), output_type=tf.int32)
            offset_of = tf.tensor_scatter_nd_update(offset_of, [[window]],
                                                    [row_length - room[row]])
            row_of = tf.tensor_scatter_nd_update(row_of, [[window]], [row])
            return i + 1, tf.tensor_scatter_nd_sub(room, [[row]], [need]), row_of, offset_of

        zeros = tf.zeros([num_windows], tf.int32)
        room = tf.fill([tf.maximum(tf.size(order), 1)], row_length)
        _, room, row_of, offset_of = tf.while_loop(
            lambda i, *_: i < tf.size(order), place, (tf.constant(0), room, zeros, zeros))
        num_rows = tf.reduce_sum(tf.cast(room < row_length, tf.int32))

        # Every real piece (window, t) moves to (its window's row, its offset + t).
        pieces = tf.cast(tf.where(tf.range(length)[None, :] < window_lengths[:, None]),
                         tf.int32)
        piece_window, piece_position = pieces[:, 0], pieces[:, 1]
        targets = tf.stack([tf.gather(row_of, piece_window),
                            tf.gather(offset_of, piece_window) + piece_position], axis=1)
        shape = tf.stack([num_rows, row_length])

        def packed(values):
            return tf.scatter_nd(targets, values, shape)

        rows = [packed(tf.gather_nd(flat[0], pieces)), packed(tf.ones_like(piece_window)),
                packed(tf.gather_nd(flat[2], pieces))]
        packing = {"position_ids": packed(piece_position),
                   "segment_ids": packed(piece_window + 1)}

        word_window, word_position = _word_places(word_end_positions, windows, length)
        word_row = tf.where(tf.gather(window_lengths, word_window) > 0,
                            tf.gather(row_of, word_window), -1)
        word_column = tf.gather(offset_of, word_window) + word_position
        return self._encode_rows(rows, row_length - room[:num_rows], row_length, word_row,
                                 word_column, tf.shape(word_end_positions), packing)


def _word_places(word_end_positions: tf.Tensor, windows: tf.Tensor,
                 length: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Each word's window among the batch's [B·F] windows and its position in it, flat
    [B·W] (word_end_positions count positions across a sentence's F windows of L)."""
    batch_size = tf.shape(word_end_positions)[0]
    word_window = tf.range(batch_size)[:, None] * windows + word_end_positions // length
    return tf.reshape(word_window, [-1]), tf.reshape(word_end_positions % length, [-1])


def split_sentences(sentences: tf.Tensor) -> tf.RaggedTensor:
    """Sentences [B] → words [B, (W)], split as `sentences.split_words` splits: on the
    contract's whitespace (Python's str.split set), not only the ASCII whitespace that
    tf.strings.split knows."""
    return tf.strings.split(tf.strings.regex_replace(
        sentences, sentences_lib.WHITESPACE_PATTERN, " "))


def _lookup(vocabulary: tf.Variable, ids: tf.Tensor) -> tf.Tensor:
    """Tag strings of ids, "" where the id is −1."""
    return tf.where(ids >= 0, tf.gather(vocabulary, tf.maximum(ids, 0)), "")


def _vocabularies(model_dir: str) -> tuple[TagVocabularies, list[str]]:
    """A model directory's tag vocabularies and encoder wordpieces."""
    try:
        vocabs = TagVocabularies.load(model_dir_lib.vocab_dir(model_dir))
    except (FileNotFoundError, ValueError) as e:
        raise ModelDirError(str(e)) from None
    encoder_vocab = model_dir_lib.encoder_vocab_path(model_dir)
    if not os.path.isfile(encoder_vocab):
        raise ModelDirError(f"{encoder_vocab} not found: the encoder vocabulary is missing")
    with open(encoder_vocab, encoding="utf-8") as f:
        return vocabs, f.read().splitlines()


def build_module(checkpoints: Sequence[tuple[str, str]],
                 length_multiple: int = DEFAULT_LENGTH_MULTIPLE,
                 encoder_dtype: str = DEFAULT_ENCODER_DTYPE,
                 pack_length: int = DEFAULT_PACK_LENGTH) -> ParserModule:
    """Restores the taggers of (model directory, checkpoint) pairs and wraps them for export:
    one tagger, or an ensemble of several.

    Raises:
      ModelDirError: for a bad model directory, or ensemble members that differ in tag
        vocabularies or wordpieces, encoder architecture, or decoder depth.
    """
    first_dir = checkpoints[0][0]
    vocabularies = _vocabularies(first_dir)
    members = []
    for model_dir, checkpoint in checkpoints:
        tagger, spec = load_tagger(model_dir, checkpoint)
        if members:
            first = members[0][1]
            differences = [what for what, differs in (
                ("vocabularies", _vocabularies(model_dir) != vocabularies),
                ("encoder architecture", spec.encoder != first.encoder),
                ("max_stack_depth", spec.max_stack_depth != first.max_stack_depth),
            ) if differs]
            if differences:
                listed = ", ".join(differences[:-1]) + " and " * (len(differences) > 1)
                raise ModelDirError(f"{model_dir} cannot join {first_dir} in an ensemble: "
                                    f"their {listed}{differences[-1]} differ")
        members.append((tagger, spec))
    spec = members[0][1]
    tokenizer = spec.encoder.tokenizer(model_dir_lib.encoder_vocab_path(first_dir))
    return ParserModule([tagger for tagger, _ in members], spec.encoder, tokenizer,
                        vocabularies[0], spec.max_stack_depth, length_multiple, encoder_dtype,
                        pack_length)


def write_limits(module: ParserModule, export_dir: str) -> str:
    """Writes assets.extra/limits.json (the graph's work bounds) into a SavedModel directory.

    TF Serving ignores assets.extra; deployments and clients read the file (or the
    module's max_pieces_per_word / max_pieces_per_call variables) to size requests.
    """
    path = os.path.join(export_dir, export_format.LIMITS_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({key: int(getattr(module, key).numpy()) for key in export_format.LIMIT_KEYS},
                  f, indent=2)
        f.write("\n")
    return path


# Signatures the warm-up runs on all its sentences together only: their graphs are the
# same at every size.
_WARMED_UP_TOGETHER_ONLY = (export_format.PARSE_CONSTRAINED_SIGNATURE,
                            export_format.PARSE_SPAN_MARGINALS_SIGNATURE)


def _warmup_inputs(batch: list[str]) -> dict[str, np.ndarray]:
    """Every signature input, by name, for a batch of warm-up sentences: the sentences,
    their words, each as a text of one sentence, no constraints, a span floor of 0.5."""
    word_lists = [sentence.split() for sentence in batch]
    width = max(map(len, word_lists))
    return {
        export_format.SENTENCES_INPUT: np.array(batch, dtype=object),
        export_format.WORDS_INPUT: np.array(
            [words + [""] * (width - len(words)) for words in word_lists], dtype=object),
        export_format.NUM_WORDS_INPUT: np.array([len(words) for words in word_lists],
                                                np.int32),
        export_format.TEXT_INPUT: np.array(batch, dtype=object),
        export_format.MIN_PROBABILITY_INPUT: np.full(len(batch), 0.5, np.float32),
        **constraints_lib.as_inputs([None] * len(batch)),
    }


def warmup_requests(sentences: tuple[str, ...] = WARMUP_SENTENCES) -> list:
    """TF Serving PredictionLog protos: each sentence alone, then all together, through
    each signature of `SIGNATURE_FUNCTIONS` with the inputs it takes (`_warmup_inputs`),
    but `parse_constrained` and `parse_span_marginals` on all together only (their graphs
    are the same at every size)."""
    from tensorflow_serving.apis import (  # pylint: disable=import-outside-toplevel
        predict_pb2, prediction_log_pb2)

    batches = [[sentence] for sentence in sentences] + [list(sentences)]
    logs = []
    for batch in batches:
        inputs = _warmup_inputs(batch)
        for signature_name, function in SIGNATURE_FUNCTIONS.items():
            if len(batch) == 1 and signature_name in _WARMED_UP_TOGETHER_ONLY:
                continue
            request = predict_pb2.PredictRequest()
            request.model_spec.signature_name = signature_name
            for spec in getattr(ParserModule, function).input_signature:
                request.inputs[spec.name].CopyFrom(tf.make_tensor_proto(inputs[spec.name]))
            logs.append(prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)))
    return logs


def write_warmup_requests(export_dir: str) -> str:
    """Writes assets.extra/tf_serving_warmup_requests (TF Serving's warm-up records: a
    TFRecord file of PredictionLog protos) into a SavedModel directory; returns its path."""
    path = os.path.join(export_dir, export_format.WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for log in warmup_requests():
            writer.write(log.SerializeToString())
    return path


def export(checkpoint: str, export_dir: str, overwrite: bool = False,
           length_multiple: int = DEFAULT_LENGTH_MULTIPLE,
           encoder_dtype: str = DEFAULT_ENCODER_DTYPE,
           pack_length: int = DEFAULT_PACK_LENGTH) -> str:
    """Exports the model of `checkpoint` (a model dir or a checkpoint in one) to export_dir.

    Several checkpoints joined by commas export their ensemble (see `ParserModule`).

    `encoder_dtype` "bfloat16" runs the encoder's dense matmuls in bfloat16 (see
    `InferenceEncoder`): faster on CPUs with AVX-512 BF16 or AMX, at a small cost in F1.
    `pack_length` > 0 packs the encoder's windows into rows of at least that many
    positions (`WindowTagger._packed_features`).

    The SavedModel is written next to export_dir first and moved into place at the end,
    so TF Serving, which watches the parent directory, never sees a partial version.

    Returns:
      The checkpoint prefix that was exported (an ensemble's, joined by commas).

    Raises:
      ModelDirError: for a bad checkpoint path or model directory.
      InputError: for an existing export_dir (unless overwrite), or a bad option.
    """
    checkpoints = [resolve_checkpoint(path.strip())
                   for path in checkpoint.split(",") if path.strip()]
    if not checkpoints:
        raise InputError("no checkpoint given")
    export_dir = os.path.normpath(export_dir)
    if os.path.exists(export_dir) and not overwrite:
        raise InputError(f"{export_dir} already exists (pass --overwrite to replace it)")
    if encoder_dtype not in ENCODER_DTYPES:
        raise InputError(f"encoder_dtype must be one of {', '.join(ENCODER_DTYPES)}, "
                          f"got {encoder_dtype!r}")
    if encoder_dtype == "bfloat16" and (warning := cpu.bfloat16_warning()):
        logging.warning("%s", warning)
    if not 0 <= pack_length <= MAX_PACK_LENGTH:
        raise InputError(f"pack_length must be 0 (no packing) or up to {MAX_PACK_LENGTH}, "
                             f"got {pack_length}")
    module = build_module(checkpoints, length_multiple, encoder_dtype, pack_length)
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(export_dir)}.tmp-", dir=parent)
    try:
        tf.saved_model.save(module, staging, signatures=module.signatures())
        model_card.write(staging, model_card.build(checkpoints, module))
        write_limits(module, staging)
        write_warmup_requests(staging)
        if os.path.exists(export_dir):
            shutil.rmtree(export_dir)
        os.replace(staging, export_dir)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)
    return ",".join(prefix for _, prefix in checkpoints)


# --------------------------------------------------------------------------------------
# Command line

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the flags; only when run as a program, so that importing stays side-effect free."""
    flags.DEFINE_string("checkpoint", None, "A training model directory (its best/model, else "
                        "the latest ckpt/ checkpoint) or a checkpoint prefix inside one; "
                        "several joined by commas export their ensemble (tag log-probabilities "
                        "averaged; N times the encoder's cost).")
    flags.DEFINE_string("export_dir", None, "Where to write the SavedModel, in TF Serving's "
                        "layout: BASE/VERSION, e.g. models/tetra/1.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing export_dir.")
    flags.DEFINE_enum("encoder_dtype", DEFAULT_ENCODER_DTYPE, ENCODER_DTYPES,
                      "float32, or bfloat16: the encoder's dense matmuls in bfloat16 (about "
                      "1.45x the throughput at batch 64 on a CPU with AVX-512 BF16; see "
                      "docs/guides/export.md for the F1 it costs).")
    flags.DEFINE_integer("pack_length", DEFAULT_PACK_LENGTH, "Pack several encoder windows "
                         "into rows of at least this many positions (block-diagonal "
                         "attention: the same trees, less padding); 0: one window per row.")


def main(argv) -> int:
    del argv
    cli.require("checkpoint", "export_dir")
    logging.set_verbosity(logging.WARNING)  # TF's INFO lines about saving are noise here
    started = time.time()
    prefix = export(FLAGS.checkpoint, FLAGS.export_dir, overwrite=FLAGS.overwrite,
                    encoder_dtype=FLAGS.encoder_dtype, pack_length=FLAGS.pack_length)
    print(f"exported {prefix} to {FLAGS.export_dir} in {time.time() - started:.1f} s")
    return 0



def run_program() -> None:
    """Runs `python -m tetra_tf.export` (tetra_tf/export.py)."""
    define_flags()
    cli.adopt_program_flags(__name__)
    cli.run(main)

"""What a tetra-tf export is, and the one reader of it. Imports neither TensorFlow nor Keras.

An export is a TF Serving version directory (BASE/VERSION) that `tetra_tf.export` writes:

  saved_model.pb                 the graph: words in, trees out (signatures below)
  assets/encoder_vocab.txt       the encoder's WordPiece vocabulary (the graph's asset)
  assets.extra/limits.json       the work bounds the graph enforces (LIMIT_KEYS)
  assets.extra/model_card.json   what the export is: encoder, data, scores (and a .md)
  assets.extra/tf_serving_warmup_requests
                                 requests TF Serving (and tetra_tf's server) replay when a
                                 version loads: a TFRecord file of PredictionLog protos

Every way in (`Parser`, the servers, Beam, Spark, spaCy, tools/eval_export.py) reads an
export through this module; writing one stays with `tetra_tf.export` and
`tetra_tf.training.model_card`. The defaults every way in shares (`DEFAULT_BATCH_SIZE`) live here
too. Local paths are read without TensorFlow; gs:// and the other file systems TensorFlow
knows are read through tf.io.gfile.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
from typing import Any

from tetra_tf.errors import ExportError

SAVED_MODEL_FILE = "saved_model.pb"
SAVED_MODEL_FILES = (SAVED_MODEL_FILE, "saved_model.pbtxt")  # binary, or text (TF Serving's)
ASSETS_EXTRA_DIR = "assets.extra"  # TF Serving ignores it: files for clients and tools
LIMITS_FILE = os.path.join(ASSETS_EXTRA_DIR, "limits.json")
CARD_FILE = os.path.join(ASSETS_EXTRA_DIR, "model_card.json")
CARD_MARKDOWN_FILE = os.path.join(ASSETS_EXTRA_DIR, "model_card.md")
ENCODER_VOCAB_ASSET = os.path.join("assets", "encoder_vocab.txt")
# TF Serving's name and place for warm-up records (its saved_model_warmup.cc).
WARMUP_FILE = os.path.join(ASSETS_EXTRA_DIR, "tf_serving_warmup_requests")
CARD_FORMAT = "tetra-tf model card v1"

# Signatures: `sentences` [B] (words separated by whitespace), or `words` [B, W] with
# `num_words` [B]; both return the same outputs. `text` [B]: raw text, each split into
# sentences and PTB tokens with character offsets. `parse_marginals` and `parse_k_best`:
# `sentences`, and each constituent's probability, or the k best trees, besides (see
# tetra_tf/export.py). `parse_constrained`: `sentences` and the constraints on each parse
# (CONSTRAINT_INPUTS, `tetra_tf.decode.constraints`), and whether a tree satisfies them.
# `parse_span_marginals`: `sentences` and `min_probability` [B], parse_marginals' outputs
# and every labelled span with at least that probability (SPAN_OUTPUTS).
SERVING_SIGNATURE = "serving_default"
PARSE_WORDS_SIGNATURE = "parse_words"
PARSE_TEXT_SIGNATURE = "parse_text"
PARSE_MARGINALS_SIGNATURE = "parse_marginals"
PARSE_K_BEST_SIGNATURE = "parse_k_best"
PARSE_CONSTRAINED_SIGNATURE = "parse_constrained"
PARSE_SPAN_MARGINALS_SIGNATURE = "parse_span_marginals"
SIGNATURES = (SERVING_SIGNATURE, PARSE_WORDS_SIGNATURE, PARSE_TEXT_SIGNATURE,
              PARSE_MARGINALS_SIGNATURE, PARSE_K_BEST_SIGNATURE, PARSE_CONSTRAINED_SIGNATURE,
              PARSE_SPAN_MARGINALS_SIGNATURE)
# The signatures' input names (tetra_tf/export.py gives their shapes and types).
SENTENCES_INPUT = "sentences"
WORDS_INPUT = "words"
NUM_WORDS_INPUT = "num_words"  # with WORDS_INPUT: how many leading entries of a row are words
TEXT_INPUT = "text"
MIN_PROBABILITY_INPUT = "min_probability"
# parse_constrained's inputs besides `sentences` ([B, N, ...] each, padded with −1 or "" to
# the batch's largest N: the servers pad them so when they merge requests;
# `tetra_tf.decode.constraints` writes them).
FORCED_SPANS_INPUT = "forced_spans"        # int32 [B, F, 2]: first and last word; −1 pads
FORCED_LABELS_INPUT = "forced_labels"      # string [B, F]: the label each must carry; "" any
FORBIDDEN_SPANS_INPUT = "forbidden_spans"  # int32 [B, G, 2]
GIVEN_POS_TAGS_INPUT = "given_pos_tags"    # string [B, P]: a word's part of speech; "" keeps
CONSTRAINT_INPUTS = (FORCED_SPANS_INPUT, FORCED_LABELS_INPUT, FORBIDDEN_SPANS_INPUT,
                     GIVEN_POS_TAGS_INPUT)
# The signatures' output names (their shapes and types: tetra_tf/export.py). Every parse:
NUM_WORDS_OUTPUT = "num_words"
WORDS_OUTPUT = "words"
LEAF_TAG_IDS_OUTPUT = "leaf_tag_ids"
INTERNAL_TAG_IDS_OUTPUT = "internal_tag_ids"
POS_TAG_IDS_OUTPUT = "pos_tag_ids"
LEAF_TAGS_OUTPUT = "leaf_tags"
INTERNAL_TAGS_OUTPUT = "internal_tags"
POS_TAGS_OUTPUT = "pos_tags"
SCORE_OUTPUT = "score"
TREE_OUTPUT = "tree"
# parse_constrained's:
SATISFIED_OUTPUT = "satisfied"
# parse_marginals' and parse_span_marginals':
CONSTITUENT_MARGINALS_OUTPUT = "constituent_marginals"
NUM_CONSTITUENTS_OUTPUT = "num_constituents"
TREE_PROBABILITY_OUTPUT = "tree_probability"
# parse_k_best's:
NUM_K_BEST_OUTPUT = "num_k_best"
K_BEST_TREES_OUTPUT = "k_best_trees"
K_BEST_SCORES_OUTPUT = "k_best_scores"
# parse_span_marginals':
SPAN_STARTS_OUTPUT, SPAN_ENDS_OUTPUT = "span_starts", "span_ends"
SPAN_LABELS_OUTPUT = "span_labels"
SPAN_PROBABILITIES_OUTPUT = "span_probabilities"
NUM_SPANS_OUTPUT = "num_spans"
# parse_text's, by text [B, S] or [B, S, W] (besides num_words, words, pos_tags, score and
# tree):
NUM_SENTENCES_OUTPUT = "num_sentences"
SENTENCE_STARTS_OUTPUT, SENTENCE_ENDS_OUTPUT = "sentence_starts", "sentence_ends"
WORD_STARTS_OUTPUT, WORD_ENDS_OUTPUT = "word_starts", "word_ends"
# Outputs [B, N] padded to the batch's largest N, by the output that counts each row's N.
SPAN_OUTPUTS = (SPAN_STARTS_OUTPUT, SPAN_ENDS_OUTPUT, SPAN_LABELS_OUTPUT,
                SPAN_PROBABILITIES_OUTPUT)
# The longest sentence parse_marginals and parse_span_marginals take: their sums hold a
# state per span start and end, memory O(batch · words² · depth).
MAX_MARGINALS_WORDS = 256
# parse_span_marginals' tables of every span: a call may hold at most this many cells
# (sentences × the longest one's words² × max(labels, 2 · (depth + 1))), checked before the
# encoder runs; its peak memory is a few tables of that many floats (64 MB each).
MAX_SPAN_MARGINAL_CELLS = 2 ** 24
# The longest sentence parse_constrained takes: its chart holds a cell per span, and its
# work grows with words³.
MAX_CONSTRAINED_WORDS = 256
# parse_constrained scores every tag for every span rule at every word: a call may hold at
# most this many (sentences × words × tags × (rules + 1)), 256 MB of float32 per table.
MAX_CONSTRAINT_SCORE_CELLS = 2 ** 26
# ... and its chart holds a cell per sentence, span start, span width, direction and depth
# (64 MB of float32 at most; any one sentence of up to MAX_CONSTRAINED_WORDS fits).
MAX_CHART_CELLS = 2 ** 24
# Signatures whose bounds count a call's sentences (their tables grow with sentences ×
# words²): a server that batches requests must not pad their calls with extra rows
# (allowed_batch_sizes), which could take a request that fits over a bound.
ROW_BOUNDED_SIGNATURES = (PARSE_CONSTRAINED_SIGNATURE, PARSE_SPAN_MARGINALS_SIGNATURE)
COUNTED_OUTPUTS = {CONSTITUENT_MARGINALS_OUTPUT: NUM_CONSTITUENTS_OUTPUT,
                   **{name: NUM_SPANS_OUTPUT for name in SPAN_OUTPUTS}}
# parse_k_best's trees per sentence, and its outputs of that fixed width [B, K_BEST].
K_BEST = 8
K_BEST_OUTPUTS = (K_BEST_TREES_OUTPUT, K_BEST_SCORES_OUTPUT)
# Outputs whose second dimension is not the batch's longest sentence.
NOT_WORD_WIDE_OUTPUTS = frozenset(COUNTED_OUTPUTS) | frozenset(K_BEST_OUTPUTS)
# Most sentences per call of the model, unless a caller asks otherwise: the one default of
# every way in (`Parser`, the bulk programs' --batch_size, Beam, Spark, spaCy, the tools).
DEFAULT_BATCH_SIZE = 64

# The work bounds the graph enforces (their values: tetra_tf.data.tokenization), by their keys in
# limits.json (and the SavedModel's variables of the same names).
MAX_PIECES_PER_WORD_KEY = "max_pieces_per_word"
MAX_PIECES_PER_CALL_KEY = "max_pieces_per_call"
MAX_WINDOW_POSITIONS_PER_CALL_KEY = "max_window_positions_per_call"
LIMIT_KEYS = (MAX_PIECES_PER_WORD_KEY, MAX_PIECES_PER_CALL_KEY,
              MAX_WINDOW_POSITIONS_PER_CALL_KEY)

# A vocabulary with more capitals than this share of its regular entries is cased.
_CASED_VOCABULARY_SHARE = 0.01


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    """The vocabulary entries an encoder window starts and ends with, pads with, and gives a
    word WordPiece cannot spell: BERT's by default. MPNet's are ``<s>``, ``</s>``, ``<pad>``
    and ``[UNK]`` (its vocabulary also holds ``[CLS]``, ``[SEP]`` and ``[PAD]``, which it
    never saw as specials), read from a checkpoint's tokenizer files."""

    cls: str = "[CLS]"
    sep: str = "[SEP]"
    pad: str = "[PAD]"
    unk: str = "[UNK]"


def check_span_floor(value: Any, name: str = "span_marginals") -> float:
    """A floor of parse_span_marginals (its `min_probability`), as every way in checks it
    before any work: a probability from 0 to 1 (NaN and bools are none).

    Args:
      value: the floor asked for.
      name: what the caller calls it, for the message (an option, a flag, a setting).

    Returns:
      The floor, as a float.

    Raises:
      ValueError: naming `name`, for any other value.
    """
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not 0.0 <= value <= 1.0):
        raise ValueError(f"{name} is a probability from 0 to 1, got {value!r}")
    return float(value)


def _is_remote(path: str) -> bool:
    return "://" in path


def _exists(path: str) -> bool:
    if not _is_remote(path):
        return os.path.isfile(path)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf.io.gfile.exists(path)


def _read_text(path: str) -> str | None:
    """A file's text, or None if there is no such file."""
    if not _is_remote(path):
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        return f.read()


def _read_json(path: str) -> Any:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ExportError(f"{path}: not JSON ({e})") from None


def saved_model_file(export_dir: str) -> str | None:
    """The SavedModel's saved_model.pb (or .pbtxt) in export_dir, None if none."""
    for name in SAVED_MODEL_FILES:
        path = os.path.join(export_dir, name)
        if _exists(path):
            return path
    return None


def has_saved_model(export_dir: str) -> bool:
    """Whether export_dir holds a SavedModel (a local path is checked without TensorFlow)."""
    return saved_model_file(export_dir) is not None


def no_saved_model_message(export_dir: str) -> str:
    """The one-line message for a directory without a SavedModel."""
    return (f"{export_dir} holds no SavedModel ({SAVED_MODEL_FILE}); export one with "
            "python -m tetra_tf.export")


def check(export_dir: str) -> None:
    """Raises ExportError (the one-line message) if export_dir holds no SavedModel."""
    if not has_saved_model(export_dir):
        raise ExportError(no_saved_model_message(export_dir))


def read_limits(export_dir: str) -> dict[str, int]:
    """The export's work bounds (assets.extra/limits.json, keys LIMIT_KEYS); {} if none.

    Raises:
      ExportError: if the file is there but is not a JSON object of positive integers.
    """
    path = os.path.join(export_dir, LIMITS_FILE)
    limits = _read_json(path)
    if limits is None:
        return {}
    if not isinstance(limits, dict) or not all(
            isinstance(value, int) and not isinstance(value, bool) and value > 0
            for value in limits.values()):
        raise ExportError(f"{path}: expected a JSON object of positive integers")
    return limits


def read_card(export_dir: str) -> dict[str, Any] | None:
    """The export's model card, or None for an export made without one.

    Raises:
      ExportError: if the card is there but is not a JSON object.
    """
    path = os.path.join(export_dir, CARD_FILE)
    card = _read_json(path)
    if card is not None and not isinstance(card, dict):
        raise ExportError(f"{path}: expected a JSON object")
    return card


def encoder_vocab_path(export_dir: str) -> str:
    """The path of the encoder's WordPiece vocabulary asset (it may be missing)."""
    return os.path.join(export_dir, ENCODER_VOCAB_ASSET)


def vocabulary_is_uncased(tokens: list[str]) -> bool:
    """Whether a BERT vocabulary is uncased: at most 1% capitals among its regular entries
    (uncased vocabularies have a few from other scripts' case rules; cased ones, many)."""
    regular = [token for token in tokens if not (token.startswith("[") and token.endswith("]"))]
    capitalized = sum(1 for token in regular if token.lower() != token)
    return capitalized <= _CASED_VOCABULARY_SHARE * max(1, len(regular))


def lower_case(export_dir: str) -> bool | None:
    """Whether the export's tokenizer lower-cases: as its model card records it, else as
    its vocabulary says (`vocabulary_is_uncased`); None if it has neither."""
    card = read_card(export_dir)
    recorded = ((card or {}).get("encoder") or {}).get("lower_case")
    if isinstance(recorded, bool):
        return recorded
    text = _read_text(encoder_vocab_path(export_dir))
    if text is None:
        return None
    return vocabulary_is_uncased(text.splitlines())


def special_tokens(export_dir: str) -> SpecialTokens:
    """The export's tokenizer's special tokens, as its model card records them; BERT's for
    a BERT export whose card predates them (or an export without a card).

    Raises:
      ExportError: the card names another encoder type but not its special tokens.
    """
    card = read_card(export_dir)
    encoder = (card or {}).get("encoder") or {}
    recorded = encoder.get("special_tokens")
    names = [field.name for field in dataclasses.fields(SpecialTokens)]
    if isinstance(recorded, dict) and all(isinstance(recorded.get(n), str) for n in names):
        return SpecialTokens(**{name: recorded[name] for name in names})
    if encoder.get("model_type", "bert") != "bert":
        raise ExportError(f"{os.path.join(export_dir, CARD_FILE)}: a "
                          f"{encoder['model_type']} encoder's card must name its special "
                          f"tokens ({', '.join(names)})")
    return SpecialTokens()


PACKAGED_CARD_FILE = "MODEL_CARD.md"
"""A packaged model's hand-written card (data, licence, teachers, recipe, F1, speed), beside
its SavedModel (tetra_tf/packaged_models.py, tools/pack_model.py)."""


def describe(export_dir: str) -> str:
    """The export's model card as text (`render_card`), or a line saying it has none; a
    packaged model's hand-written card (PACKAGED_CARD_FILE) first.

    Raises:
      ExportError: if export_dir holds no SavedModel.
    """
    check(export_dir)
    card = read_card(export_dir)
    if card is None:
        text = (f"{export_dir}: no model card (exported before tetra-tf wrote them, or by "
                "another tool); it still parses\n")
    else:
        text = render_card(card)
    packaged_card = os.path.join(export_dir, PACKAGED_CARD_FILE)
    if os.path.isfile(packaged_card):
        with open(packaged_card, encoding="utf-8") as f:
            text = f.read().rstrip("\n") + "\n\n" + text
    return text


# The training recipe's values a card leaves off its recipe line: shown in lines of their
# own (keep, max_stack_depth), or how the run executed rather than what it trained.
RECIPE_NOT_ON_CARD = ("keep", "max_stack_depth", "checkpoint_every_steps", "jit_compile")


def _number(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _model_lines(card: dict[str, Any]) -> list[str]:
    """The card's lines on one model's training, scores and checkpoint."""
    training, scores = card.get("training"), card["scores"]
    lines = []
    if training:
        for split in ("train_data", "dev_data"):
            data = training.get(split)
            if data:
                extra = ", ".join(f"{k} {v}" for k, v in data.items()
                                  if k not in ("path", "licence"))
                lines.append(f"- {split.replace('_', ' ')}: {data['path']}"
                             + (f" ({extra})" if extra else ""))
        lines += _licence_lines([training])
        if training.get("kept_weights"):
            lines.append(f"- kept weights: {training['kept_weights']}")
        recipe = training.get("recipe") or {}
        if recipe:
            lines.append("- recipe: " + ", ".join(
                f"{name} {value}" for name, value in recipe.items()
                if name not in RECIPE_NOT_ON_CARD))
        lines.append(f"- training command: {training.get('command') or 'unknown'}")
        lines.append(f"- trained: {training.get('date')} ({training.get('runs')} run(s))")
    else:
        lines.append("- training: no record (the model directory has no training.json)")
    dev, test = scores.get("dev"), scores.get("test")
    if dev:
        lines.append(f"- dev F1 {_number(dev['f1'])}, dev POS accuracy "
                     f"{_number(dev['pos_accuracy'])} (epoch {dev['epoch']}, step {dev['step']})")
    else:
        lines.append("- dev F1: not recorded for this checkpoint")
    if test:
        lines.append(f"- test F1 {_number(test['f1'])} ({test['sentences']} sentences; with "
                     f"predicted POS {_number(test['f1_predicted_pos'])}), test POS accuracy "
                     f"{_number(test['pos_accuracy'])}")
    else:
        lines.append("- test F1: not recorded (run python -m tetra_tf.train --model_dir=DIR "
                     "--evaluate=TEST_DATA before exporting)")
    for evaluation in scores.get("evaluations", []):
        if evaluation != test:
            lines.append(f"- {evaluation['split']} F1 {_number(evaluation['f1'])} "
                         f"({evaluation['data']})")
    lines.append(f"- checkpoint: {card['checkpoint']} (step {card['step']})")
    return lines


def _ensemble_lines(ensemble: dict[str, Any]) -> list[str]:
    """The card's lines on an ensemble: how it combines, and each member's record."""
    lines = [f"- an ensemble of {len(ensemble['members'])} models: {ensemble['combination']}; "
             "its own F1 is not recorded at export (tools/eval_export.py measures it)"]
    for number, member in enumerate(ensemble["members"], start=1):
        scores, training = member["scores"], member.get("training") or {}
        figures = [f"{split} F1 {_number(scores[split]['f1'])}"
                   for split in ("dev", "test") if scores.get(split)]
        lines.append(f"- member {number}: {member['checkpoint']} (step {member['step']})"
                     + "".join(f"; {figure}" for figure in figures)
                     + (f"; kept weights: {training['kept_weights']}"
                        if training.get("kept_weights") else ""))
    return lines + _licence_lines([member.get("training") or {}
                                   for member in ensemble["members"]])


def _licence_lines(trainings: list[dict[str, Any]]) -> list[str]:
    """The licence of the data the models trained on, where their converted data named one."""
    licences = sorted({(training.get("train_data") or {}).get("licence")
                       for training in trainings} - {None})
    return [f"- training data licence: {licence}" for licence in licences]


def render_card(card: dict[str, Any]) -> str:
    """A short human-readable (Markdown) rendering of a model card."""
    encoder, tags = card["encoder"], card["tag_vocabularies"]
    ensemble = card.get("ensemble")
    copies = f" ×{len(ensemble['members'])}" if ensemble else ""
    lines = [
        "# tetra-tf model card",
        "",
        f"- encoder: {encoder.get('name') or 'unknown'}{copies}; {encoder['parameters']:,} "
        f"parameters, {encoder['layers']} layers, hidden {encoder['hidden_size']}, "
        f"{encoder['attention_heads']} heads, up to "
        f"{encoder['max_sequence_length_subword_pieces']} subword pieces per window; "
        f"matmuls in {encoder.get('compute_dtype', 'float32')}; "
        + (f"windows packed into rows of {encoder['pack_length']}+ positions"
           if encoder.get("pack_length") else "one window per row"),
        f"- parameters in all (encoder + tag heads): {card['parameters']:,}",
        f"- tag vocabularies: {tags['leaf']} leaf, {tags['internal']} internal, "
        f"{tags['pos']} POS; decoder stack depth cap {card['max_stack_depth']}",
    ]
    lines += _ensemble_lines(ensemble) if ensemble else _model_lines(card)
    lines.append(f"- exported {card['exported']} with tetra-tf {card['tetra_tf_version']}")
    return "\n".join(lines) + "\n"

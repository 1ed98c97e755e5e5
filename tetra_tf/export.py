r"""Exports a trained tagger as one self-contained SavedModel for TF Serving.

  python -m tetra_tf.export --checkpoint=MODEL_DIR_OR_CKPT --export_dir=models/tetra/1
  python -m tetra_tf.export --checkpoint=RUN_A,RUN_B,RUN_C --export_dir=models/ensemble/1

Several checkpoints (trained with the same tag vocabularies and encoder architecture) make
an ensemble: one SavedModel that runs each member's encoder and heads on the same windows
and averages their tag log-probabilities before the decoder; N× the encoder's cost, for
offline work where accuracy matters more than speed.

The SavedModel's graph does everything, words in → trees out: splitting, WordPiece
tokenization (PTB escapes undone inside), encoder windows (grouped by length, so that a
batch is not padded far beyond each sentence), the tagger, log-softmax, the DP decoder
(a plain graph: TF Serving rejects XLA-compiled functions), POS argmax, and the bracketed
tree, built in-graph from the tags exactly as `tags.tags_to_tree` builds it.
Loading it needs only `tensorflow` and `tensorflow_text` (for the tokenizer's ops).

Signatures (no ragged inputs, which TF Serving cannot feed):

* ``serving_default``: ``sentences`` tf.string [B], each sentence its pre-tokenized words
  separated by whitespace: the sentence contract's set (`sentences.WHITESPACE`, what
  Python's str.split splits on), runs of it one separator; no words → tree "".
* ``parse_words``: ``words`` tf.string [B, W] and ``num_words`` int32 [B] (the first
  num_words entries of each row are the words; each must be non-empty and hold no
  whitespace, else InvalidArgumentError "bad_words: ...").

* ``parse_text``: ``text`` tf.string [B], raw text (a sentence, a paragraph or a document),
  split into sentences and PTB tokens by tetra_tf/contract/text.py's rules run as TF ops; returns
  num_sentences [B], sentence_starts and sentence_ends [B, S], num_words [B, S], words,
  word_starts and word_ends [B, S, W] (character offsets in the text), pos_tags [B, S, W],
  score and tree [B, S] (padding: −1 for integers, "" for strings, 0 for scores).

The first two return, per sentence (W = the batch's longest sentence; padding: −1 ids, ""
strings):
  num_words int32 [B]; words string [B, W] (the input tokens verbatim); leaf_tag_ids,
  internal_tag_ids, pos_tag_ids int32 [B, W]; leaf_tags, internal_tags, pos_tags string
  [B, W] (internal entry i is the fencepost after word i; the last word's is padding);
  score float32 [B] (log-probability of the chosen leaf and internal tags); tree string [B]
  (``(TOP (S (NP (DT The) (NN cat)) ...))``, "" for a sentence without words).

Work bounds, in subword pieces, enforced by the graph itself (so plain TF Serving gets
them too): a word's pieces past ``max_pieces_per_word`` (8) are dropped from its middle,
keeping its last piece, whose position the heads read; a call holding more than
``max_pieces_per_call`` (32,768) pieces in all fails with InvalidArgumentError ("the call
holds N subword pieces; at most 32768 ...") before the encoder runs; so does a call whose
windows would pad to more than ``max_window_positions_per_call`` (16,777,216 = sentences ×
windows of the longest sentence × seq_length: thousands of short sentences next to one of
30,000 pieces). All three are int32 variables on the loaded model and written to
``assets.extra/limits.json``.

Objects on the loaded model: ``max_stack_depth`` (int32 variable), ``leaf_tags``,
``internal_tags``, ``pos_tags`` (string variables: the tag vocabularies in id order),
``tokenize`` (words [B, W], num_words [B] → the encoder inputs) and ``encode`` (encoder
inputs → logits), which split the pipeline for benchmarks; the encoder's vocab.txt is the
asset ``assets/encoder_vocab.txt``. The model card (tetra_tf/training/model_card.py: encoder, data,
scores) is ``assets.extra/model_card.json``; TF Serving's warm-up records (`WARMUP_SENTENCES`
through every signature) are ``assets.extra/tf_serving_warmup_requests``.

Exit codes: 0 exported; 2 usage error (missing flag, no model directory or checkpoint
there, export directory already exists); 1 any other failure.
"""

from tetra_tf import _moved
from tetra_tf.savedmodel import exporter

__getattr__ = _moved.forward(__name__, exporter)

if __name__ == "__main__":
    exporter.run_program()

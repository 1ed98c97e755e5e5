"""WordPiece tokenization of treebank words, and packing into encoder windows.

Everything here runs as TensorFlow ops (tensorflow-text), so the same code serves the
training input pipeline (tf.data) and the exported SavedModel graph.

Words arrive already split (one treebank token each, PTB escapes included). Each word is
tokenized on its own, so a word's pieces never merge with its neighbours'; a word that
yields no pieces at all (zero-width space, lone combining mark, control characters, empty
string) gets one ``[UNK]`` piece so every word has a last piece to take its features from.

Normalization follows HuggingFace's BERT tokenizer rather than tensorflow-text's own
``lower_case`` mode (which applies NFKC case folding: ``ß`` → ``ss``, ``½`` → ``1⁄2``):
control characters are dropped, Unicode spaces become spaces, and for uncased vocabularies
text is NFD-normalized, stripped of nonspacing marks and lowercased. The remaining
differences from HF are characters whose Unicode category differs between ICU's and
Rust's Unicode versions, and a word-final capital sigma (``Σ`` → ``ς`` here, ``σ`` in HF).
"""

from __future__ import annotations

import dataclasses
import re

import tensorflow as tf
import tensorflow_text as tf_text

from tetra_tf.contract import sentences
from tetra_tf.contract.export_format import SpecialTokens

CLS_TOKEN = SpecialTokens.cls
SEP_TOKEN = SpecialTokens.sep
PAD_TOKEN = SpecialTokens.pad
UNK_TOKEN = SpecialTokens.unk

# Work bounds, in subword pieces (what the encoder's cost grows with). A word's pieces past
# the cap are dropped from its middle, keeping its last piece (whose position the heads read).
# On the NLTK sample (all 3,914 cleaned trees, 94,084 words, MiniLM's uncased vocabulary)
# every word has at most 8 pieces (90.3% one, 2 words exactly 8), so the cap changes no
# treebank word; a 40 KB word of '!' or of CJK characters has 13,000–40,000 before the cap.
MAX_PIECES_PER_WORD = 8
# Tokenizing costs time in a word's characters, before any cap: a word longer than twice
# this is tokenized from its first and last WORD_EDGE_CHARS characters (after normalization)
# only. Its first pieces and its last piece come from there anyway (WordPiece
# gives one [UNK] for a run of over 100 bytes without punctuation); no treebank word is
# near this long.
WORD_EDGE_CHARS = 256
# The most pieces one call of the exported model accepts, over all its sentences.
MAX_PIECES_PER_CALL = 32768
# The most encoder window positions one call may pad to: sentences × windows of its longest
# sentence × seq_length (the [B, F, L] tensors `pack_windows` builds). Calls of sentences of
# similar length stay far below it (32,768 one-piece sentences: 512 × 32,768); it stops a
# call of thousands of short sentences next to one of 30,000 pieces from taking gigabytes.
MAX_WINDOW_POSITIONS_PER_CALL = 512 * MAX_PIECES_PER_CALL


def unescape_ptb_tokens(tokens: tf.Tensor) -> tf.Tensor:
    """In-graph `sentences.unescape_token` on a tf.string tensor of any shape."""
    for escape, text in sentences.PTB_BACKSLASH_ESCAPES.items():
        tokens = tf.strings.regex_replace(tokens, re.escape(escape), text)
    for escaped, text in sentences.PTB_TOKEN_ESCAPES.items():
        tokens = tf.where(tf.equal(tokens, escaped), text, tokens)
    return tokens


def read_vocab(vocab_path: str) -> list[str]:
    """The vocabulary tokens, one per line, in id order."""
    with tf.io.gfile.GFile(vocab_path, "r") as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


class SubwordTokenizer(tf.Module):
    """Words → WordPiece ids over a BERT-style vocab.txt, as TF ops.

    The vocabulary file is a tracked asset: saving a tf.Module that holds this tokenizer
    with tf.saved_model.save copies it into the SavedModel.

    Attributes:
      special_tokens: the `SpecialTokens` in use.
      cls_id, sep_id, pad_id, unk_id: their ids.
      vocab_size: number of entries in vocab.txt.
      lower_case: whether text is lowercased and stripped of accents.
    """

    def __init__(self, vocab_path: str, lower_case: bool, unescape_ptb: bool = True,
                 max_pieces_per_word: int | None = MAX_PIECES_PER_WORD,
                 name: str | None = None, special_tokens: SpecialTokens = SpecialTokens()):
        """Args:
          vocab_path: the encoder's vocab.txt.
          lower_case: True for uncased vocabularies.
          unescape_ptb: map PTB escapes (-LRB-, ``, \\/ ...) to text before tokenizing.
          max_pieces_per_word: a longer word keeps its first max_pieces_per_word − 1 pieces
            and its last one; words over 2 × WORD_EDGE_CHARS characters are tokenized from
            their edges (None: neither; only for measuring).
          name: the tf.Module's name.
          special_tokens: the encoder's special tokens (default: BERT's).
        """
        super().__init__(name=name)
        if max_pieces_per_word is not None and max_pieces_per_word < 1:
            raise ValueError(f"max_pieces_per_word must be positive, got {max_pieces_per_word}")
        self.max_pieces_per_word = max_pieces_per_word
        vocab = read_vocab(vocab_path)
        ids = {}
        for index, token in enumerate(vocab):
            ids.setdefault(token, index)
        tokens = dataclasses.astuple(special_tokens)
        missing = [t for t in tokens if t not in ids]
        if missing:
            raise ValueError(f"{vocab_path}: vocabulary lacks {', '.join(missing)}")
        self.special_tokens = special_tokens
        self.cls_id, self.sep_id, self.pad_id, self.unk_id = (ids[t] for t in tokens)
        self.vocab_size = len(vocab)
        self.lower_case = bool(lower_case)
        self.unescape_ptb = bool(unescape_ptb)
        # Normalization is done by `_normalize` (HF-compatible), so the tokenizer itself only
        # splits on whitespace/punctuation/CJK and runs WordPiece.
        self._bert_tokenizer = tf_text.BertTokenizer(
            vocab_path, token_out_type=tf.int32, unknown_token=special_tokens.unk,
            lower_case=False)

    def _normalize(self, words: tf.Tensor) -> tf.Tensor:
        if self.unescape_ptb:
            words = unescape_ptb_tokens(words)
        words = tf.strings.regex_replace(words, r"[\t\n\r\p{Z}]", " ")
        words = tf.strings.regex_replace(words, r"[\p{C}\x{FFFD}]", "")
        if self.lower_case:
            words = tf_text.normalize_utf8(words, "NFD")
            words = tf.strings.regex_replace(words, r"\p{Mn}", "")
            words = tf.strings.lower(words, encoding="utf-8")
        return words

    def tokenize_flat_words(self, words: tf.Tensor) -> tf.RaggedTensor:
        """Words [N] tf.string → piece ids int32 [N, (P)], every word 1 to max_pieces_per_word.

        A word with no pieces gets [UNK]; a word with more than the cap keeps its first
        cap − 1 pieces and its last one, so that its feature (its last piece) is unchanged.
        """
        words = self._normalize(tf.convert_to_tensor(words, tf.string))
        if self.max_pieces_per_word is not None:
            words = _word_edges(words, WORD_EDGE_CHARS)
        pieces = self._bert_tokenizer.tokenize(words).merge_dims(1, 2)  # [N, (p)]
        # Flat index arithmetic rather than ragged concat/mask ops: a handful of ops, so
        # that a one-sentence call pays little besides the tokenizer itself.
        num_pieces = tf.cast(pieces.row_lengths(), tf.int32)
        kept = tf.maximum(num_pieces, 1)
        if self.max_pieces_per_word is not None:
            kept = tf.minimum(kept, self.max_pieces_per_word)
        word = tf.repeat(tf.range(tf.size(kept)), kept)  # word of each output piece
        index = tf.range(tf.size(word)) - tf.gather(tf.cumsum(kept, exclusive=True), word)
        # The last kept index takes the word's last piece; a word without pieces, [UNK]
        # (the entry appended past the real pieces).
        word_pieces = tf.gather(num_pieces, word)
        source = tf.gather(tf.cast(pieces.row_starts(), tf.int32), word) + tf.where(
            tf.equal(index, tf.gather(kept, word) - 1), word_pieces - 1, index)
        values = tf.concat([pieces.flat_values, [self.unk_id]], axis=0)
        source = tf.where(word_pieces > 0, source, tf.size(values) - 1)
        return tf.RaggedTensor.from_row_lengths(tf.gather(values, source),
                                                tf.cast(kept, tf.int64), validate=False)

    def tokenize_words(self, words: tf.RaggedTensor | tf.Tensor) -> tf.RaggedTensor:
        """Words → WordPiece ids, one list of pieces per word.

        Args:
          words: tf.string RaggedTensor [B, (W)] (or a dense [W] tensor for one sentence).

        Returns:
          int32 RaggedTensor [B, (W), (P)] (or [W, (P)] for dense [W] input).
        """
        if isinstance(words, tf.RaggedTensor):
            if words.ragged_rank != 1:
                raise ValueError("words must be a RaggedTensor [batch, (words)]")
            return words.with_flat_values(self.tokenize_flat_words(words.flat_values))
        words = tf.convert_to_tensor(words, tf.string)
        if words.shape.rank != 1:
            raise ValueError("dense words must have rank 1 (one sentence); batch them as "
                             "a RaggedTensor [batch, (words)]")
        return self.tokenize_flat_words(words)

    def tokenize_and_pack(self, words: tf.RaggedTensor, seq_length: int,
                          num_windows: int | None = None, max_words: int | None = None,
                          max_pieces_per_call: int | None = None,
                          max_window_positions_per_call: int | None = None
                          ) -> dict[str, tf.Tensor]:
        """`tokenize_words` then `pack_windows` with this vocabulary's special ids."""
        return pack_windows(self.tokenize_words(words), seq_length, num_windows=num_windows,
                            max_words=max_words, cls_id=self.cls_id, sep_id=self.sep_id,
                            pad_id=self.pad_id, max_pieces_per_call=max_pieces_per_call,
                            max_window_positions_per_call=max_window_positions_per_call)


def _word_edges(words: tf.Tensor, edge: int) -> tf.Tensor:
    """Words of more than 2·edge characters → their first and last `edge`, joined."""
    length = tf.strings.length(words, unit="UTF8_CHAR")
    head = tf.strings.substr(words, tf.zeros_like(length), tf.fill(tf.shape(length), edge),
                             unit="UTF8_CHAR")
    tail = tf.strings.substr(words, tf.maximum(length - edge, 0),
                             tf.fill(tf.shape(length), edge), unit="UTF8_CHAR")
    return tf.where(length > 2 * edge, tf.strings.join([head, tail]), words)


def num_windows_for(num_pieces: int, seq_length: int) -> int:
    """Windows `pack_windows` uses for a sentence of `num_pieces` pieces (Python ints)."""
    content, stride = _window_sizes(seq_length)
    return 1 + max(0, -(-(num_pieces - content) // stride))


def _window_sizes(seq_length: int) -> tuple[int, int]:
    content = seq_length - 2
    if content < 2:
        raise ValueError(f"seq_length must be at least 4, got {seq_length}")
    return content, content // 2


def _work_bound_checks(sentence_pieces: tf.RaggedTensor, batch_size: tf.Tensor,
                       windows: tf.Tensor, seq_length: int, max_pieces: int | None,
                       max_positions: int | None) -> list[tf.Operation]:
    """Asserts that a call is within its work bounds, naming the figure and the limit."""
    checks = []
    if max_pieces is not None:
        total = tf.size(sentence_pieces.values, out_type=tf.int64)
        message = tf.strings.format(
            "the call holds {} subword pieces; at most " + str(max_pieces)
            + " (max_pieces_per_call) are allowed: send fewer or shorter sentences", [total])
        checks.append(tf.debugging.Assert(total <= max_pieces, [message]))
    if max_positions is not None:
        positions = (tf.cast(batch_size, tf.int64) * tf.cast(windows, tf.int64)
                     * seq_length)
        message = tf.strings.format(
            "the call pads to {} encoder window positions ({} sentences x {} windows of "
            + str(seq_length) + "); at most " + str(max_positions)
            + " (max_window_positions_per_call) are allowed: send sentences of similar "
            "length together", [positions, batch_size, windows])
        checks.append(tf.debugging.Assert(positions <= max_positions, [message]))
    return checks


def pack_windows(word_pieces: tf.RaggedTensor, seq_length: int,
                 num_windows: int | None = None, max_words: int | None = None,
                 cls_id: int = 101, sep_id: int = 102, pad_id: int = 0,
                 max_pieces_per_call: int | None = None,
                 max_window_positions_per_call: int | None = None
                 ) -> dict[str, tf.Tensor]:
    """Packs per-word pieces into overlapping [CLS] … [SEP] encoder windows.

    Each window holds C = seq_length − 2 pieces; windows start every stride = C // 2 pieces,
    so a sentence of P pieces needs F = 1 + max(0, ceil((P − C) / stride)) windows. Each word
    is represented by its last piece, read from the window where that piece is most central:
    window k = clamp(floor((p − C // 4) / stride), 0, F − 1) for piece index p.

    Args:
      word_pieces: int RaggedTensor [B, (W), (P)] from `SubwordTokenizer.tokenize_words`.
      seq_length: encoder input length L (at most the encoder's max_sequence_length).
      num_windows: static F (e.g. 1 for training; sentences must then fit, which is
        asserted); None: as many as the longest sentence of the batch needs.
      max_words: static W to pad the word dimension to (asserted to fit); None: the batch's
        longest sentence.
      cls_id, sep_id, pad_id: special piece ids (defaults: BERT uncased vocab).
      max_pieces_per_call: if set, more pieces than this in the batch raise
        InvalidArgumentError (naming both figures) before anything is padded.
      max_window_positions_per_call: if set, so do more padded window positions
        (B × F × seq_length) than this.

    Returns:
      input_word_ids, input_mask, input_type_ids: int32 [B, F, L]; empty windows are all
        padding with input_mask 0.
      word_end_positions: int32 [B, W], index of each word's feature in that sentence's
        flattened F·L positions (0 for padded words).
      num_words: int32 [B].
    """
    if not isinstance(word_pieces, tf.RaggedTensor) or word_pieces.ragged_rank != 2:
        raise ValueError("word_pieces must be a RaggedTensor [batch, (words), (pieces)]")
    if num_windows is not None and num_windows < 1:
        raise ValueError(f"num_windows must be positive, got {num_windows}")
    content, stride = _window_sizes(seq_length)
    word_pieces = tf.cast(word_pieces, tf.int32)
    sentence_pieces = word_pieces.merge_dims(1, 2)  # [B, (T)]
    num_pieces = tf.cast(sentence_pieces.row_lengths(), tf.int32)  # [B]
    num_words = tf.cast(word_pieces.row_lengths(), tf.int32)  # [B]
    batch_size = tf.shape(num_words)[0]

    max_pieces = tf.reduce_max(tf.concat([num_pieces, [0]], axis=0))
    checks = []
    if num_windows is None:
        windows = 1 + tf.maximum(0, (max_pieces - content + stride - 1) // stride)
    else:
        windows = num_windows
        capacity = content + (num_windows - 1) * stride
        checks.append(tf.debugging.assert_less_equal(
            max_pieces, capacity,
            message=f"a sentence has more subword pieces than {num_windows} window(s) of "
                    f"seq_length {seq_length} hold ({capacity})"))
    if max_words is not None:
        checks.append(tf.debugging.assert_less_equal(
            tf.reduce_max(tf.concat([num_words, [0]], axis=0)), max_words,
            message=f"a sentence has more than max_words={max_words} words"))
    checks += _work_bound_checks(sentence_pieces, batch_size, windows, seq_length,
                                 max_pieces_per_call, max_window_positions_per_call)
    with tf.control_dependencies(checks):
        padded_length = tf.identity(content + (windows - 1) * stride)
        num_words = tf.identity(num_words)
        # Dense pieces [B, content + (F − 1)·stride], then each window's slice [B, F, C].
        dense_pieces = sentence_pieces.to_tensor(default_value=pad_id)
    dense_pieces = tf.pad(dense_pieces,
                          [[0, 0], [0, padded_length - tf.shape(dense_pieces)[1]]],
                          constant_values=pad_id)
    window_starts = tf.range(windows) * stride  # [F]
    gather_index = window_starts[:, None] + tf.range(content)[None, :]  # [F, C]
    window_pieces = tf.gather(dense_pieces, gather_index, axis=1)  # [B, F, C]

    # Pieces in each window, then [CLS] + pieces + [SEP] + padding.
    pieces_in_window = tf.clip_by_value(num_pieces[:, None] - window_starts[None, :],
                                        0, content)  # [B, F]
    ids = tf.concat([tf.fill([batch_size, windows, 1], cls_id), window_pieces,
                     tf.fill([batch_size, windows, 1], pad_id)], axis=2)  # [B, F, L]
    positions = tf.range(seq_length)[None, None, :]
    sep_position = pieces_in_window[:, :, None] + 1
    real = (positions <= sep_position) & (pieces_in_window[:, :, None] > 0)
    ids = tf.where(positions == sep_position, sep_id, ids)
    ids = tf.where(real, ids, pad_id)
    input_mask = tf.cast(real, tf.int32)

    # Feature position of each word: its last piece, in the window where it is most central.
    word_lengths = tf.cast(word_pieces.values.row_lengths(), tf.int32)  # [N words]
    sentence_of_word = tf.cast(word_pieces.value_rowids(), tf.int32)
    sentence_start = tf.cast(sentence_pieces.row_starts(), tf.int32)
    last_piece = tf.cumsum(word_lengths) - 1 - tf.gather(sentence_start, sentence_of_word)
    window = tf.clip_by_value(tf.math.floordiv(last_piece - content // 4, stride),
                              0, windows - 1)
    flat_position = window * seq_length + (last_piece - window * stride) + 1
    word_end_positions = word_pieces.with_values(flat_position).to_tensor(
        default_value=0, shape=None if max_words is None else [None, max_words])

    static_windows = num_windows
    outputs = {
        "input_word_ids": tf.ensure_shape(ids, [None, static_windows, seq_length]),
        "input_mask": tf.ensure_shape(input_mask, [None, static_windows, seq_length]),
        "input_type_ids": tf.zeros_like(ids),
        "word_end_positions": tf.ensure_shape(word_end_positions, [None, max_words]),
        "num_words": num_words,
    }
    return outputs

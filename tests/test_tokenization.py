"""WordPiece tokenization, PTB unescaping and window packing."""

import math
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tokenizers  # the oracle, from the [dev] extra

from tetra_tf.contract.sentences import unescape_token as unescape_ptb_token
from tetra_tf.data import tokenization
from tetra_tf.data.tokenization import SubwordTokenizer, pack_windows
from tetra_tf.training import encoders

SENTENCES = [
    "Pierre Vinken , 61 years old , will join the board as a nonexecutive director Nov. 29 .",
    "`` We 're not going to be pushed around , '' said Mr. Smith -LRB- the chairman -RRB- .",
    "Prices rose 3\\/4 % to $ 1.2 billion in the quarter ended Sept. 30 .",
    "The naïve café owner's Übermensch-style résumé impressed Zoë at the Hôtel de Ville .",
    "Xerox Corp. 's third-quarter net income grew 6.2 % on 7.3 % higher revenue .",
    "Mr. Vinken is chairman of Elsevier N.V. , the Dutch publishing group .",
]


@pytest.fixture(scope="module")
def vocab_path():
    return os.path.join(encoders.default_encoder_dir(), "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer(vocab_path):
    return SubwordTokenizer(vocab_path, lower_case=True)


@pytest.fixture(scope="module")
def hf_tokenizer(vocab_path):
    # What transformers.BertTokenizerFast runs for this vocab (lowercase, strip accents).
    return tokenizers.BertWordPieceTokenizer(vocab_path, lowercase=True)


def _treebank_sentences(limit):
    try:
        from nltk.corpus import treebank  # pylint: disable=import-outside-toplevel
        return [list(s) for s in treebank.sents()[:limit]]
    except LookupError:
        return []


def _hf_word_ids(hf_tokenizer, word, unk_id):
    ids = hf_tokenizer.encode(word, add_special_tokens=False).ids
    return ids or [unk_id]


def _ragged(sentences):
    return tf.ragged.constant(sentences, dtype=tf.string, ragged_rank=1)


# ------------------------------------------------------------------------------------------
# PTB unescaping

UNESCAPE_CASES = {
    "-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
    "``": '"', "''": '"', "`": "'", "3\\/4": "3/4", "Macmillan\\/McGraw": "Macmillan/McGraw",
    "\\*": "*", "\\*\\*": "**", "'s": "'s", "'": "'", "--": "--", "-LRB-x": "-LRB-x",
    "LRB": "LRB", "-lrb-": "-lrb-", "a``": "a``", "": "", "naïve": "naïve",
}


def test_unescape_ptb_token():
    for token, text in UNESCAPE_CASES.items():
        assert unescape_ptb_token(token) == text, token


def test_unescape_ptb_tokens_in_graph_matches_python():
    tokens = list(UNESCAPE_CASES)
    got = tokenization.unescape_ptb_tokens(tf.constant(tokens)).numpy()
    assert [t.decode() for t in got] == [unescape_ptb_token(t) for t in tokens]


def test_tokenizer_sees_unescaped_text(tokenizer, hf_tokenizer, vocab_path):
    words = ["-LRB-", "1\\/2", "``", "''", "-RCB-"]
    pieces = tokenizer.tokenize_words(_ragged([words])).to_list()[0]
    assert pieces == [hf_tokenizer.encode(t, add_special_tokens=False).ids
                      for t in ["(", "1/2", '"', '"', "}"]]
    verbatim = SubwordTokenizer(vocab_path, lower_case=True, unescape_ptb=False)
    assert verbatim.tokenize_words(_ragged([["-LRB-"]])).to_list()[0][0] == (
        hf_tokenizer.encode("-LRB-", add_special_tokens=False).ids)


# ------------------------------------------------------------------------------------------
# Word pieces


def test_special_ids(tokenizer, vocab_path):
    vocab = tokenization.read_vocab(vocab_path)
    assert tokenizer.vocab_size == len(vocab) == 30522
    for attribute, token in (("cls_id", "[CLS]"), ("sep_id", "[SEP]"), ("pad_id", "[PAD]"),
                             ("unk_id", "[UNK]")):
        assert vocab[getattr(tokenizer, attribute)] == token


def test_wordpieces_match_hf(tokenizer, hf_tokenizer):
    sentences = [s.split() for s in SENTENCES] + _treebank_sentences(300)
    pieces = tokenizer.tokenize_words(_ragged(sentences))
    assert pieces.dtype == tf.int32
    for words, word_pieces in zip(sentences, pieces.to_list()):
        text = " ".join(unescape_ptb_token(w) for w in words)
        expected = hf_tokenizer.encode(text, add_special_tokens=False).ids
        assert sum(word_pieces, []) == expected, text
        assert len(word_pieces) == len(words)
        for word, ids in zip(words, word_pieces):
            assert ids == _hf_word_ids(hf_tokenizer, unescape_ptb_token(word),
                                       tokenizer.unk_id), word


def test_unicode_characters_match_hf(vocab_path, hf_tokenizer):
    tokenizer = SubwordTokenizer(vocab_path, lower_case=True, unescape_ptb=False)
    # Latin-1, Latin Extended, IPA, spacing modifiers, combining marks, Greek, Cyrillic,
    # general punctuation, letterlike symbols; some CJK, emoji, whitespace and controls.
    code_points = [c for r in ((0x01, 0x530), (0x2000, 0x2150)) for c in range(*r)]
    code_points += [0x3000, 0x3001, 0x4E2D, 0x6587, 0xFEFF, 0xFFFD, 0x1F600, 0xAC00]
    chars = [chr(c) for c in code_points if chr(c) != "Σ"]  # final sigma: see module doc
    words = chars + ["x" + c + "y" for c in chars] + ["A" + c for c in chars]
    pieces = tokenizer.tokenize_words(tf.constant(words)).to_list()
    mismatches = [(hex(ord(w[1] if len(w) > 1 else w)), w) for w, ids in zip(words, pieces)
                  if ids != _hf_word_ids(hf_tokenizer, w, tokenizer.unk_id)]
    assert not mismatches, mismatches[:20]


def test_zero_piece_words_get_one_unk(tokenizer):
    odd = ["\u200b", "", "\u0301", "\x07", "\x00", "\ufeff", " ", "\u00ad"]
    pieces = tokenizer.tokenize_words(tf.constant(odd)).to_list()
    assert pieces == [[tokenizer.unk_id]] * len(odd)


def test_zero_piece_words_do_not_shift_later_words(tokenizer):
    clean = "The naïve owner -LRB- Mr. Smith -RRB- sold 3\\/4 of it .".split()
    noisy = []
    for i, word in enumerate(clean):
        noisy.append(word)
        if i % 3 == 1:
            noisy += ["\u200b", "", "\u0301", "\x07"][i % 4:i % 4 + 1]
    is_clean = []
    j = 0
    for word in noisy:
        matched = j < len(clean) and word == clean[j]
        is_clean.append(matched)
        j += matched
    assert sum(is_clean) == len(clean) < len(noisy)

    clean_pieces = tokenizer.tokenize_words(_ragged([clean])).to_list()[0]
    noisy_pieces = tokenizer.tokenize_words(_ragged([noisy]))
    assert [p for p, c in zip(noisy_pieces.to_list()[0], is_clean) if c] == clean_pieces

    packed = pack_windows(noisy_pieces, 64, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
    ids = packed["input_word_ids"].numpy()[0].reshape(-1)
    positions = packed["word_end_positions"].numpy()[0]
    assert len(set(positions.tolist())) == len(noisy)  # every word has its own position
    for word_pieces, position in zip(noisy_pieces.to_list()[0], positions):
        assert ids[position] == word_pieces[-1]
    clean_positions = positions[np.array(is_clean)]
    assert [ids[p] for p in clean_positions] == [p[-1] for p in clean_pieces]


def test_dense_single_sentence(tokenizer):
    words = ["Hello", "world", "-LRB-"]
    ragged = tokenizer.tokenize_words(_ragged([words])).to_list()[0]
    assert tokenizer.tokenize_words(tf.constant(words)).to_list() == ragged


def test_cased_tokenizer_keeps_case_and_accents(vocab_path, hf_tokenizer):
    cased = SubwordTokenizer(vocab_path, lower_case=False)
    # The vocabulary is uncased, so capitals and accented letters become [UNK] or pieces
    # of other characters, unlike the lowercasing tokenizer.
    lower = SubwordTokenizer(vocab_path, lower_case=True)
    words = _ragged([["Hello", "café"]])
    assert cased.tokenize_words(words).to_list() != lower.tokenize_words(words).to_list()
    assert cased.tokenize_words(_ragged([["hello"]])).to_list() == [[
        hf_tokenizer.encode("hello", add_special_tokens=False).ids]]


# ------------------------------------------------------------------------------------------
# Windows


def _pieces(lengths_per_sentence, seed=0):
    """Random word pieces (ids ≥ 1000) with the given per-word piece counts."""
    rng = np.random.default_rng(seed)
    return tf.ragged.constant(
        [[rng.integers(1000, 30000, n).tolist() for n in lengths]
         for lengths in lengths_per_sentence], dtype=tf.int32, ragged_rank=2)


def _check_packing(packed, word_pieces, seq_length, cls_id=101, sep_id=102, pad_id=0):
    """Checks every output of pack_windows against the definition, sentence by sentence."""
    content = seq_length - 2
    stride = content // 2
    ids = packed["input_word_ids"].numpy()
    mask = packed["input_mask"].numpy()
    positions = packed["word_end_positions"].numpy()
    batch, windows, length = ids.shape
    assert length == seq_length and mask.shape == ids.shape
    assert not packed["input_type_ids"].numpy().any()
    for b, sentence in enumerate(word_pieces.to_list()):
        flat = sum(sentence, [])
        assert packed["num_words"].numpy()[b] == len(sentence)
        for k in range(windows):
            window = flat[k * stride:k * stride + content]
            if window:
                expected = [cls_id] + window + [sep_id]
            else:
                expected = []
            expected_ids = expected + [pad_id] * (seq_length - len(expected))
            assert ids[b, k].tolist() == expected_ids, (b, k)
            assert mask[b, k].tolist() == [1] * len(expected) + [0] * (
                seq_length - len(expected))
        last_piece = np.cumsum([len(p) for p in sentence]) - 1
        for w, p in enumerate(last_piece):
            position = positions[b, w]
            k, offset = divmod(int(position), seq_length)
            offset -= 1  # [CLS]
            assert 0 <= offset < content
            assert k * stride + offset == p  # the word's own last piece
            assert ids[b].reshape(-1)[position] == sentence[w][-1]
            # The most central of the windows holding the piece.
            if k > 0:
                assert offset >= content // 4
            if k < windows - 1:
                assert offset < content // 4 + stride
        assert not positions[b, len(sentence):].any()


def test_pack_short_sentences():
    pieces = _pieces([[1, 2, 1, 3], [1], [2, 2, 2, 1, 1]])
    packed = pack_windows(pieces, 32)
    assert packed["input_word_ids"].shape == (3, 1, 32)
    assert packed["word_end_positions"].numpy().tolist() == [
        [1, 3, 4, 7, 0], [1, 0, 0, 0, 0], [2, 4, 6, 7, 8]]
    assert packed["num_words"].numpy().tolist() == [4, 1, 5]
    _check_packing(packed, pieces, 32)


def test_pack_long_sentence_in_mixed_batch(tokenizer):
    base = " ".join(SENTENCES).split()
    long_words = (base * (1000 // len(base) + 1))[:1000]
    batch = _ragged([long_words, SENTENCES[0].split(), [], SENTENCES[3].split()])
    pieces = tokenizer.tokenize_words(batch)
    packed = pack_windows(pieces, 512, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                          pad_id=tokenizer.pad_id)
    num_pieces = len(sum(pieces.to_list()[0], []))
    assert num_pieces > 1000
    windows = 1 + math.ceil((num_pieces - 510) / 255)
    assert windows == tokenization.num_windows_for(num_pieces, 512) > 1
    assert packed["input_word_ids"].shape == (4, windows, 512)
    assert packed["word_end_positions"].shape == (4, 1000)
    _check_packing(packed, pieces, 512, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
    # Short and empty sentences: only their first window (if any) is real.
    mask = packed["input_mask"].numpy()
    assert not mask[1:, 1:].any() and not mask[2].any()


@pytest.mark.parametrize("seq_length", [6, 7, 16])
def test_pack_window_boundaries(seq_length):
    content, stride = seq_length - 2, (seq_length - 2) // 2
    sizes = sorted({1, content - 1, content, content + 1, content + stride,
                    content + stride + 1, 3 * content + 1})
    for num_pieces in sizes:
        # Words of 1-3 pieces, summing to num_pieces.
        lengths, left = [], num_pieces
        while left:
            lengths.append(min(left, 1 + len(lengths) % 3))
            left -= lengths[-1]
        pieces = _pieces([lengths], seed=num_pieces)
        packed = pack_windows(pieces, seq_length)
        windows = 1 + max(0, math.ceil((num_pieces - content) / stride))
        assert packed["input_word_ids"].shape[1] == windows, num_pieces
        _check_packing(packed, pieces, seq_length)


def test_static_shapes_and_capacity_checks(tokenizer):
    spec = tf.RaggedTensorSpec([None, None], tf.string, ragged_rank=1)

    @tf.function(input_signature=[spec])
    def pack(words):
        return tokenizer.tokenize_and_pack(words, 16, num_windows=2, max_words=10)

    shapes = {k: v.shape.as_list() for k, v in pack.get_concrete_function().structured_outputs
              .items()}
    assert shapes == {"input_word_ids": [None, 2, 16], "input_mask": [None, 2, 16],
                      "input_type_ids": [None, 2, 16], "word_end_positions": [None, 10],
                      "num_words": [None]}
    words = _ragged([["a", "b", "c"], "the cat sat on the mat .".split()])
    packed = pack(words)
    eager = tokenizer.tokenize_and_pack(words, 16)
    assert eager["input_word_ids"].shape == (2, 1, 16)
    np.testing.assert_array_equal(packed["input_word_ids"][:, :1], eager["input_word_ids"])
    assert not packed["input_mask"].numpy()[:, 1].any()
    np.testing.assert_array_equal(packed["word_end_positions"][:, :7],
                                  eager["word_end_positions"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="window"):
        pack(_ragged([["word"] * 22]))  # 22 pieces > 14 + 7
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_words"):
        pack(_ragged([["a"] * 11]))


def test_in_tf_data_map(tokenizer):
    sentences = [s.split() for s in SENTENCES]
    dataset = tf.data.Dataset.from_tensor_slices(_ragged(sentences)).batch(3)
    dataset = dataset.map(lambda words: tokenizer.tokenize_and_pack(
        words, 48, num_windows=1, max_words=24))
    assert dataset.element_spec["input_word_ids"].shape.as_list() == [None, 1, 48]
    batches = list(dataset.as_numpy_iterator())
    assert len(batches) == 2
    for i, batch in enumerate(batches):
        eager = tokenizer.tokenize_and_pack(_ragged(sentences[3 * i:3 * i + 3]), 48)
        np.testing.assert_array_equal(batch["input_word_ids"], eager["input_word_ids"])
        width = eager["word_end_positions"].shape[1]
        np.testing.assert_array_equal(batch["word_end_positions"][:, :width],
                                      eager["word_end_positions"])
        assert not batch["word_end_positions"][:, width:].any()


def test_saved_model_carries_the_vocabulary(tmp_path, vocab_path):
    shutil.copy(vocab_path, tmp_path / "vocab.txt")
    tokenizer = SubwordTokenizer(str(tmp_path / "vocab.txt"), lower_case=True)

    class Module(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.string, 1)])
        def pack(self, words):
            return self.tokenizer.tokenize_and_pack(words, 32)

    module = Module()
    words = _ragged([SENTENCES[1].split(), ["Hello", "\u200b", "world"]])
    expected = module.pack(words)
    tf.saved_model.save(module, str(tmp_path / "saved"))
    os.remove(tmp_path / "vocab.txt")
    assert os.path.exists(tmp_path / "saved" / "assets" / "vocab.txt")
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    got = restored.pack(words)
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value)


def test_invalid_arguments(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="seq_length"):
        pack_windows(_pieces([[1]]), 3)
    with pytest.raises(ValueError, match="RaggedTensor"):
        pack_windows(tf.ragged.constant([[1, 2]]), 16)
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\nthe\n")
    with pytest.raises(ValueError, match=r"\[CLS\], \[SEP\]"):
        SubwordTokenizer(str(bad_vocab), lower_case=True)


def test_pieces_per_word_are_capped_keeping_the_last_piece(vocab_path):
    capped = SubwordTokenizer(vocab_path, lower_case=True)
    uncapped = SubwordTokenizer(vocab_path, lower_case=True, max_pieces_per_word=None)
    cap = tokenization.MAX_PIECES_PER_WORD
    words = ["!" * 40_000, "\u6771" * 13_000, "x" * 40_000 + "!end", "a.b.c.d.e.f.g.h.i",
             "Über" * 3000 + ",ok", "unbelievably", "Pierre"]
    full = uncapped.tokenize_flat_words(tf.constant(words)).to_list()
    got = capped.tokenize_flat_words(tf.constant(words)).to_list()
    assert [len(p) for p in full][:2] == [40_000, 13_000]
    for pieces, kept in zip(full, got):
        assert kept == (pieces if len(pieces) <= cap else pieces[:cap - 1] + pieces[-1:])
    # Training tokenizes through the same function: the cap holds in tf.data too.
    dataset = tf.data.Dataset.from_tensors(tf.constant(words)).map(
        lambda w: capped.tokenize_words(tf.RaggedTensor.from_tensor(w[None]))[0].row_lengths())
    assert next(iter(dataset)).numpy().max() == cap

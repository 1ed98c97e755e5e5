"""The sentence contract (tetra_tf/contract/sentences.py): whitespace, escapes, reasons, reading."""

import bz2
import gzip
import io
import lzma
import pickle
import sys
import unicodedata

import pytest

from tetra_tf.contract import sentences
from tetra_tf.contract.sentences import SentenceError, SentenceLimits

# Unicode's White_Space property (PropList.txt), listed here as the oracle.
UNICODE_WHITE_SPACE = {chr(c) for c in [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680,
                                        *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F,
                                        0x205F, 0x3000]}
PYTHON_WHITESPACE = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}


def test_whitespace_is_python_split_set_and_covers_unicode_white_space():
    assert sentences.WHITESPACE == PYTHON_WHITESPACE
    assert UNICODE_WHITE_SPACE <= sentences.WHITESPACE
    assert sentences.WHITESPACE - UNICODE_WHITE_SPACE == {"\x1c", "\x1d", "\x1e", "\x1f"}
    for char in sentences.WHITESPACE:
        assert sentences.split_words(f"a{char}b") == ["a", "b"], hex(ord(char))


@pytest.mark.parametrize("char", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff",
                                  "\u00ad", "\u180e", "\u0301"])
def test_format_characters_and_marks_stay_inside_words(char):
    assert sentences.split_words(f"a{char}b c") == [f"a{char}b", "c"]
    assert unicodedata.category(char) in ("Cf", "Mn")


def test_escape_leaf_escapes_all_six_brackets_and_unescape_reads_them_back():
    assert sentences.escape_leaf(":-)") == ":--RRB-"
    assert sentences.escape_leaf("a[b]{c}(d)") == "a-LSB-b-RSB--LCB-c-RCB--LRB-d-RRB-"
    assert sentences.escape_leaf("-LRB-") == "-LRB-"
    for bracket, escape in sentences.PTB_BRACKET_ESCAPES.items():
        assert sentences.unescape_token(escape) == bracket
    assert sentences.unescape_token("1\\/2") == "1/2"
    assert sentences.unescape_token("``") == '"'


def test_sentence_error_carries_its_reason_in_text_and_survives_pickling():
    error = SentenceError(sentences.TOO_MANY_WORDS, "5 words, more than max_words=4\nmore")
    assert str(error) == "too_many_words: 5 words, more than max_words=4"
    assert sentences.reason_in(f"sentence 3: {error}") == sentences.TOO_MANY_WORDS
    assert sentences.reason_in("nothing here") is None
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.reason, copy.detail, str(copy)) == (error.reason, error.detail, str(error))
    with pytest.raises(ValueError):
        SentenceError("no_such_reason", "x")


@pytest.mark.parametrize("words,reason", [
    ("a b", sentences.BAD_WORDS), (b"a", sentences.BAD_WORDS), (None, sentences.BAD_WORDS),
    ([], sentences.EMPTY), (["a", 3], sentences.BAD_WORDS), (["a", ""], sentences.BAD_WORDS),
    (["a\u00a0b"], sentences.BAD_WORDS), (["a\u2028"], sentences.BAD_WORDS),
    (["a"] * 5, sentences.TOO_MANY_WORDS)])
def test_check_words_refuses_with_reason(words, reason):
    with pytest.raises(SentenceError) as raised:
        sentences.check_words(words, SentenceLimits(max_words=4))
    assert raised.value.reason == reason


def test_limits_from_export_are_only_lowered():
    limits = SentenceLimits.from_export({"max_pieces_per_call": 100, "max_pieces_per_word": 8})
    assert limits.max_pieces == 100 and limits.max_words == 0
    assert limits.lowered(max_words=50).max_words == 50
    assert limits.lowered(max_words=50).lowered(max_words=80).max_words == 50
    assert limits.lowered(max_line_bytes=10).max_line_bytes == 10
    with pytest.raises(SentenceError) as raised:  # more words than pieces allowed
        sentences.check_words(["a"] * 101, limits)
    assert raised.value.reason == sentences.TOO_MANY_PIECES
    with pytest.raises(SentenceError) as raised:
        sentences.check_pieces(101, limits)
    assert raised.value.reason == sentences.TOO_MANY_PIECES


def _read(data: bytes, **limits):
    return [(line.number, line.words, line.error and line.error.reason)
            for line in sentences.read_lines(io.BytesIO(data), SentenceLimits(**limits))]


def test_read_lines_only_newline_ends_a_line():
    data = "\ufeffa\u2028b\r\nc\u2029d\x85e\rf\n\n  \t\nx\x0by".encode("utf-8")
    assert _read(data) == [(1, ["a", "b"], None), (2, ["c", "d", "e", "f"], None),
                           (3, None, "empty"), (4, None, "empty"), (5, ["x", "y"], None)]


def test_read_lines_bad_bytes_and_long_lines():
    data = b"ok\n\xff\xfe\n" + b"w " * 20 + b"\nfine\n"
    assert _read(data, max_line_bytes=10) == [
        (1, ["ok"], None), (2, None, "not_utf8"), (3, None, "too_long"), (4, ["fine"], None)]
    assert _read(b"a b c\n", max_words=2) == [(1, None, "too_many_words")]


def _zstd_compress(data: bytes) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize("suffix,compress", [(".gz", gzip.compress), (".bz2", bz2.compress),
                                             (".xz", lzma.compress), (".zst", _zstd_compress)])
def test_damaged_compressed_input_keeps_readable_lines_then_says_where(suffix, compress):
    # More than one bzip2 block (900 kB of input): a cut block loses all of its lines.
    count = 60000
    text = b"".join(b"line %d of a compressed file %d\n" % (i, i * 7919 % 10007)
                    for i in range(count))
    whole = compress(text)
    cut = whole[:len(whole) * 2 // 3]
    lines = list(sentences.read_lines(sentences.decompressed(io.BytesIO(cut), "f" + suffix)))
    assert lines[-1].error.reason == sentences.DAMAGED
    good = lines[:-1]
    assert 0 < len(good) < count and all(line.words for line in good[:-1])
    assert lines[-1].number == len(good) + 1
    assert f"{len(good)} lines were read before it" in str(lines[-1].error)
    intact = list(sentences.read_lines(sentences.decompressed(io.BytesIO(whole), "f" + suffix)))
    assert len(intact) == count and all(line.error is None for line in intact)


def test_read_errors_that_are_not_damage_raise():
    class Failing(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, buffer):
            raise OSError(5, "Input/output error")

    with pytest.raises(sentences.ReadError, match="Input/output error"):
        list(sentences.read_lines(io.BufferedReader(Failing())))


def test_zstd_frames_follow_one_another():
    first, second = _zstd_compress(b"a b\nc\n"), _zstd_compress(b"d e\n")
    lines = sentences.read_lines(sentences.decompressed(io.BytesIO(first + second), "x.zst"))
    assert [line.words for line in lines] == [["a", "b"], ["c"], ["d", "e"]]

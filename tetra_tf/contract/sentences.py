r"""What a sentence is, for every way into the parser: the one owner of reading, splitting,
escaping, checking and refusing sentences. No TensorFlow here.

Every way in (`Parser`, the parse CLI, the servers, Beam, spaCy, Spark) turns its input into
words with these functions and refuses a sentence with a `SentenceError` whose `reason` is
one of `REASONS`, so that the same line gets the same tree, or the same reason, wherever it
goes in.

Lines: only "\n" ends a line (U+2028, U+2029, U+0085, "\r", form feeds ... are whitespace
inside a line); a "\r" just before the "\n" (CRLF) is dropped; a UTF-8 byte order mark at
the very start is dropped; a line over `max_line_bytes` is skipped over in bounded pieces.

Words: a line is split on `WHITESPACE`, the characters Python's ``str.split()`` splits on:
Unicode's White_Space property plus U+001C-U+001F (the ASCII information separators,
which Python also treats as whitespace). The exported graph splits ``sentences`` on exactly
this set (`WHITESPACE_PATTERN`, tests/test_sentences.py checks every code point), so a
line sent to TF Serving gets the words it gets here. Zero-width and other format characters
(U+200B, U+200D, U+FEFF inside a line ...) are not whitespace: they stay inside words.

Escaping: words reach the model as given (the tokenizer undoes whole-token PTB escapes
such as -LRB- for the encoder); only the tree's leaves are escaped, by one table
(`PTB_BRACKET_ESCAPES`: the six brackets), so that every tree reads back with one leaf per
word.

Refusals: a `SentenceError` carries one of these reason codes (`REASONS`), shown everywhere
as "REASON: detail":

| reason | the sentence |
|---|---|
| `empty` (`EMPTY`) | has no words |
| `not_utf8` (`NOT_UTF8`) | is not valid UTF-8, or holds a lone surrogate |
| `too_long` (`TOO_LONG`) | is a line of more than `max_line_bytes` |
| `damaged` (`DAMAGED`) | is where a compressed file turns out cut short or corrupt |
| `bad_words` (`BAD_WORDS`) | API input that is not a list of non-empty strings without whitespace |
| `too_many_words` (`TOO_MANY_WORDS`) | has more words than a front end's `max_words` |
| `too_many_pieces` (`TOO_MANY_PIECES`) | has more subword pieces than the export takes in one call |
| `rejected` (`REJECTED`) | was refused by the model for another reason |

Example:
    ```python
    from tetra_tf.contract import sentences

    sentences.text_to_words("The  cat\u00a0sat .")     # ['The', 'cat', 'sat', '.']
    sentences.escape_leaf("a(b)")                       # 'a-LRB-b-RRB-'
    try:
        sentences.text_to_words("   ")
    except sentences.SentenceError as e:
        e.reason, str(e)     # ('empty', 'empty: no words (give one sentence per line)')
    ```
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import lzma
import re
import zlib
from typing import IO, Any, BinaryIO, Callable, Iterator, Sequence

from tetra_tf.contract import export_format

# --------------------------------------------------------------------------------------
# Whitespace

# Inclusive code point ranges: Unicode White_Space ∪ U+001C-U+001F (= Python's isspace()).
WHITESPACE_RANGES: tuple[tuple[int, int], ...] = (
    (0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
    (0x3000, 0x3000))
WHITESPACE: frozenset[str] = frozenset(
    chr(c) for low, high in WHITESPACE_RANGES for c in range(low, high + 1))
# The same set as an RE2 character class (for tf.strings.regex_replace in the graph).
WHITESPACE_PATTERN = "[" + "".join(
    f"\\x{{{low:x}}}" if low == high else f"\\x{{{low:x}}}-\\x{{{high:x}}}"
    for low, high in WHITESPACE_RANGES) + "]"


def split_words(text: str) -> list[str]:
    """Splits a sentence into words on `WHITESPACE` (runs of it are one separator).

    Args:
      text: one sentence.

    Returns:
      Its words (none for an empty or blank text); ``"a\\u3000b"`` → ``["a", "b"]``.
    """
    return text.split()


def has_whitespace(word: str) -> bool:
    """Whether a word holds a `WHITESPACE` character (so it would not come back as one word).

    Args:
      word: one word.

    Returns:
      True if splitting the word would not give it back whole.
    """
    return any(c in WHITESPACE for c in word)


# --------------------------------------------------------------------------------------
# PTB escapes

# Brackets inside a tree's leaves, escaped so that the tree reads back (whole or in words).
PTB_BRACKET_ESCAPES = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-",
                       "{": "-LCB-", "}": "-RCB-"}
# Whole-token PTB escapes and the text they stand for (the encoder reads the text).
PTB_TOKEN_ESCAPES = {escape: bracket for bracket, escape in PTB_BRACKET_ESCAPES.items()}
PTB_TOKEN_ESCAPES.update({"``": '"', "''": '"', "`": "'"})
# Backslash escapes inside tokens (WSJ: "1\/2", "\*").
PTB_BACKSLASH_ESCAPES = {"\\/": "/", "\\*": "*"}
_BRACKETS = re.compile("[" + re.escape("".join(PTB_BRACKET_ESCAPES)) + "]")


def escape_leaf(word: str) -> str:
    """A word as a tree leaf: each bracket replaced by its PTB escape ("(" → "-LRB-").

    Args:
      word: one word, as given.

    Returns:
      The word with each of the six brackets escaped: ``"a(b"`` → ``"a-LRB-b"``.
    """
    if _BRACKETS.search(word) is None:
        return word
    return _BRACKETS.sub(lambda match: PTB_BRACKET_ESCAPES[match.group()], word)


def unescape_token(token: str) -> str:
    """The text a PTB token stands for ("-LRB-" → "(", "1\\/2" → "1/2"): what the encoder reads.

    Args:
      token: one PTB token.

    Returns:
      The text it stands for: whole-token escapes (`PTB_TOKEN_ESCAPES`) replaced, and
      backslash escapes (`PTB_BACKSLASH_ESCAPES`) undone inside it.
    """
    if token in PTB_TOKEN_ESCAPES:
        return PTB_TOKEN_ESCAPES[token]
    for escape, text in PTB_BACKSLASH_ESCAPES.items():
        token = token.replace(escape, text)
    return token


# --------------------------------------------------------------------------------------
# Refusals

# Why a sentence is refused: one code for each way in.
EMPTY = "empty"                      # no words
"""No words: an empty or whitespace-only line, an empty list."""
NOT_UTF8 = "not_utf8"                # bytes that are not UTF-8
"""Bytes that are not UTF-8 (the detail names the byte), or a word holding a lone surrogate."""
TOO_LONG = "too_long"                # a line of more than max_line_bytes
"""A line of more than `SentenceLimits.max_line_bytes` bytes (skipped, never held whole)."""
DAMAGED = "damaged"                  # a compressed file is cut short or corrupt from here on
"""Where a compressed file turns out cut short or corrupt; nothing after it is read."""
BAD_WORDS = "bad_words"              # API input: not a list of non-empty strings without spaces
"""API input that is not a list of non-empty strings without whitespace."""
TOO_MANY_WORDS = "too_many_words"    # more words than a front end's max_words
"""More words than a front end's `max_words`."""
TOO_MANY_PIECES = "too_many_pieces"  # more subword pieces than the export takes in one call
"""More subword pieces than the export takes in one call (its `max_pieces_per_call`)."""
BAD_CONSTRAINTS = "bad_constraints"  # constraints on a parse that do not fit its sentence
"""Constraints on a parse (`tetra_tf.decode.constraints`): malformed or contradictory."""
UNSATISFIABLE = "unsatisfiable"      # well-formed constraints that no tree satisfies
"""Constraints on a parse that no tree the model can build satisfies."""
REJECTED = "rejected"                # the model refused it for another reason
"""The model's graph refused the sentence for another reason."""
REASONS = (EMPTY, NOT_UTF8, TOO_LONG, DAMAGED, BAD_WORDS, TOO_MANY_WORDS, TOO_MANY_PIECES,
           BAD_CONSTRAINTS, UNSATISFIABLE, REJECTED)
"""Every reason code, in this order."""
_REASON_IN_MESSAGE = re.compile(r"\b(" + "|".join(REASONS) + r"): ")
MAX_DETAIL_CHARS = 300


class SentenceError(ValueError):
    """A sentence refused by the contract or the model: `reason` (one of REASONS) and a
    one-line `detail`; str() is "REASON: DETAIL" wherever it is shown.

    It is picklable (Beam, Spark and process pools pass it between processes), and a
    `ValueError`, so ``except ValueError`` catches it too.

    Args:
      reason: one of `REASONS`.
      detail: what is wrong; only its first line is kept, cut to 300 characters.

    Attributes:
      reason: the reason code.
      detail: the one-line detail.

    Raises:
      ValueError: for a reason that is not one of `REASONS`.

    Example:
        ```python
        error = SentenceError(TOO_MANY_WORDS, "450 words, more than max_words=400")
        str(error)       # 'too_many_words: 450 words, more than max_words=400'
        error.reason     # 'too_many_words'
        ```
    """

    def __init__(self, reason: str, detail: str):
        if reason not in REASONS:
            raise ValueError(f"unknown refusal reason {reason!r}")
        detail = (detail.strip().splitlines() or [""])[0][:MAX_DETAIL_CHARS]
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail

    def __reduce__(self):  # picklable (Beam, Spark and process pools pass it around)
        return SentenceError, (self.reason, self.detail)


def reason_in(message: str) -> str | None:
    """The refusal reason a message carries ("sentence 3: empty: no words" → "empty").

    Args:
      message: any message, e.g. a server's 400 answer.

    Returns:
      The first reason code followed by ": " in it, or None.

    Example:
        ```python
        reason_in("sentence 1: empty: no words (give one sentence per line)")   # 'empty'
        reason_in("HTTP 404: model not found")                                  # None
        ```
    """
    match = _REASON_IN_MESSAGE.search(message)
    return match.group(1) if match else None


# --------------------------------------------------------------------------------------
# Limits

DEFAULT_MAX_LINE_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class SentenceLimits:
    """Bounds on one sentence. The export sets max_pieces (its max_pieces_per_call); a front
    end may only lower what the export allows (`lowered`).

    Attributes:
      max_words: most words per sentence; 0: none beyond the pieces.
      max_pieces: most subword pieces per sentence (the export's max_pieces_per_call);
        0: unknown (an export without limits).
      max_pieces_per_word: a word's pieces past this are dropped by the graph, so a word
        counts at most this many; 0: unknown.
      max_line_bytes: most bytes per input line (without its line end).
    """

    max_words: int = 0
    max_pieces: int = 0
    max_pieces_per_word: int = 0
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES

    @classmethod
    def from_export(cls, export_limits: dict[str, int]) -> "SentenceLimits":
        """The limits an export publishes (assets.extra/limits.json, or its variables).

        Args:
          export_limits: the export's limits by `export_format.LIMIT_KEYS` name ({} if none).

        Returns:
          Limits with `max_pieces` and `max_pieces_per_word` from the export.
        """
        return cls(max_pieces=int(export_limits.get(export_format.MAX_PIECES_PER_CALL_KEY, 0)),
                   max_pieces_per_word=int(export_limits.get(
                       export_format.MAX_PIECES_PER_WORD_KEY, 0)))

    def lowered(self, max_words: int = 0, max_line_bytes: int = 0) -> "SentenceLimits":
        """These limits with a front end's own, which only lower them (0: keep).

        Args:
          max_words: the front end's most words per sentence; 0 keeps the current.
          max_line_bytes: the front end's most bytes per line; 0 keeps the current.

        Returns:
          New limits, each the lower of the current one and the requested one.

        Raises:
          ValueError: for a negative limit.

        Example:
            ```python
            limits = parser.sentence_limits.lowered(max_words=400)
            parser.parse_each(word_lists, limits=limits)
            ```
        """
        return dataclasses.replace(
            self, max_words=_lowest(self.max_words, max_words),
            max_line_bytes=_lowest(self.max_line_bytes, max_line_bytes))


def _lowest(current: int, requested: int) -> int:
    if requested < 0:
        raise ValueError(f"a limit must be 0 (none) or positive, got {requested}")
    if not requested:
        return current
    return requested if not current else min(current, requested)


# --------------------------------------------------------------------------------------
# Checking words


def check_words(words: Any, limits: SentenceLimits = SentenceLimits()) -> list[str]:
    """Checks one sentence given as words (the Python API's input); returns them as a list.

    Args:
      words: the sentence's words (a sequence of strings, not one string).
      limits: the bounds to check against.

    Returns:
      The words, as a list.

    Example:
        ```python
        check_words(["Hello", "!"])     # ['Hello', '!']
        check_words(["a b"])            # SentenceError: bad_words: word 0 ('a b') contains whitespace
        ```

    Raises:
      SentenceError: BAD_WORDS for anything but a sequence of non-empty strings without
        whitespace, NOT_UTF8 for a word that UTF-8 cannot encode (a lone surrogate such as
        "\\udce9", which a file read with errors="surrogateescape" leaves), EMPTY for no
        words, TOO_MANY_WORDS over limits.max_words.
    """
    if isinstance(words, (str, bytes)) or not isinstance(words, Sequence):
        raise SentenceError(BAD_WORDS, f"expected a list of words, got {_describe(words)}")
    if not words:
        raise SentenceError(EMPTY, "no words")
    for position, word in enumerate(words):
        if not isinstance(word, str):
            raise SentenceError(BAD_WORDS, f"word {position} is {_describe(word)}, not a string")
        if not word:
            raise SentenceError(BAD_WORDS, f"word {position} is empty")
        if has_whitespace(word):
            raise SentenceError(BAD_WORDS, f"word {position} ({word[:40]!r}) contains "
                                "whitespace")
        if not word.isascii():
            try:
                word.encode("utf-8")
            except UnicodeEncodeError as e:
                raise SentenceError(NOT_UTF8, f"word {position} is not valid UTF-8 (unpaired "
                                    f"surrogate U+{ord(word[e.start]):04X} at character "
                                    f"{e.start + 1})") from None
    _check_count(len(words), limits)
    return list(words)


def text_to_words(text: str, limits: SentenceLimits = SentenceLimits(),
                  split: Callable[[str], list[str]] = split_words) -> list[str]:
    """One sentence given as text (a line, a request's string) → its words, checked.

    Args:
      text: the sentence.
      limits: the bounds to check against.
      split: how the text becomes words: on whitespace (`split_words`: PTB tokens already
        split), or as raw text (`tetra_tf.contract.text.ptb_tokenize`);
        `tetra_tf.contract.text.word_splitter` picks one for a --tokenize option.

    Returns:
      Its words.

    Raises:
      SentenceError: EMPTY for no words, TOO_MANY_WORDS over limits.max_words,
        TOO_MANY_PIECES when it has more words than limits.max_pieces.

    Example:
        ```python
        from tetra_tf.contract import text as text_lib

        text_to_words("It works .")                              # ['It', 'works', '.']
        text_to_words("(It) works.", split=text_lib.ptb_tokenize)
        # ['-LRB-', 'It', '-RRB-', 'works', '.']
        ```
    """
    words = split(text)
    if not words:
        raise SentenceError(EMPTY, "no words (give one sentence per line)")
    _check_count(len(words), limits)
    return words


def bytes_to_words(data: bytes, limits: SentenceLimits = SentenceLimits(),
                   split: Callable[[str], list[str]] = split_words) -> list[str]:
    """`text_to_words` on UTF-8 bytes (a server's decoded request string).

    Args:
      data: the sentence as UTF-8 bytes.
      limits: the bounds to check against.
      split: as for `text_to_words`.

    Returns:
      Its words.

    Raises:
      SentenceError: NOT_UTF8, or as `text_to_words`.
    """
    return text_to_words(decode_utf8(data), limits, split)


def decode_utf8(data: bytes) -> str:
    """UTF-8 bytes → text.

    Args:
      data: the bytes.

    Returns:
      The text.

    Raises:
      SentenceError: NOT_UTF8, naming the first bad byte ("not UTF-8 (byte 0xE9 at byte 4)").
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SentenceError(NOT_UTF8, f"not UTF-8 (byte 0x{data[e.start]:02X} at byte "
                            f"{e.start + 1})") from None


def check_pieces(num_pieces: int, limits: SentenceLimits) -> None:
    """Checks a sentence's count of subword pieces against the export's.

    Args:
      num_pieces: the sentence's subword pieces (each word counted at most
        `max_pieces_per_word`).
      limits: the bounds; a `max_pieces` of 0 checks nothing.

    Raises:
      SentenceError: TOO_MANY_PIECES for a sentence over `limits.max_pieces`.
    """
    if limits.max_pieces and num_pieces > limits.max_pieces:
        raise SentenceError(TOO_MANY_PIECES, too_many_pieces_detail(num_pieces, limits.max_pieces))


def too_many_pieces_detail(num_pieces: int, max_pieces: int) -> str:
    """The detail of a TOO_MANY_PIECES refusal, the same in every way in."""
    return (f"{num_pieces} subword pieces, more than the model takes in one call "
            f"({max_pieces}, its max_pieces_per_call)")


def _check_count(count: int, limits: SentenceLimits) -> None:
    if limits.max_words and count > limits.max_words:
        raise SentenceError(TOO_MANY_WORDS, f"{count} words, more than max_words="
                            f"{limits.max_words}")
    # Every word is at least one piece: a sentence of more words than pieces allowed is
    # refused without tokenizing it.
    if limits.max_pieces and count > limits.max_pieces:
        raise SentenceError(TOO_MANY_PIECES, f"{count} words, so at least {count} subword "
                            f"pieces; the model takes {limits.max_pieces} in one call "
                            "(its max_pieces_per_call)")


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


# --------------------------------------------------------------------------------------
# Reading lines

_BOM = b"\xef\xbb\xbf"


@dataclasses.dataclass
class Line:
    """One input line: its words (or, read as a document, its text), or the SentenceError
    that refuses it."""
    number: int  # 1-based
    words: list[str] | None
    error: SentenceError | None = None
    text: str | None = None  # a document's raw text (read_lines(documents=True))


class ReadError(OSError):
    """The input could not be read (an I/O failure, not bad content)."""


# What a decompressor raises on data that is cut short or corrupt (an OSError without an
# errno, such as bz2's "Invalid data stream" or gzip.BadGzipFile, counts too).
_DAMAGE_ERRORS: tuple[type[BaseException], ...] = (EOFError, zlib.error, lzma.LZMAError,
                                                     gzip.BadGzipFile)
try:  # Beam and Python 3.14 read .zst with zstandard
    import zstandard as _zstandard  # type: ignore

    _DAMAGE_ERRORS += (_zstandard.ZstdError,)
except ImportError:  # pragma: no cover
    pass


def _is_damage(error: BaseException) -> bool:
    return isinstance(error, _DAMAGE_ERRORS) or (
        isinstance(error, OSError) and error.errno is None)


def read_lines(input_file: IO, limits: SentenceLimits = SentenceLimits(),
               split: Callable[[str], list[str]] = split_words,
               documents: bool = False) -> Iterator[Line]:
    """Yields the input's lines one at a time, each with its words or its SentenceError.

    input_file is a binary stream (UTF-8 bytes; decoded line by line, so that a bad byte
    names its line) or a text stream (already decoded). A line longer than
    limits.max_line_bytes is consumed in pieces and never held whole. If the stream turns
    out damaged (a truncated or corrupt compressed file), the lines read before the damage
    come first, then one Line with a DAMAGED error, numbered as the line where the damage
    starts; nothing is read after it.

    Args:
      input_file: the input, binary or text.
      limits: the bounds each line is checked against (max_line_bytes, max_words, ...).
      split: how a line becomes words, as for `text_to_words` (on whitespace by default).
      documents: each line is a document of raw text: its Line holds the decoded `text`
        (words None) for the caller to split into sentences; a blank line is a document
        without sentences, not an error.

    Yields:
      A `Line` per input line, numbered from 1: its words (or text), or its
      `SentenceError`.

    Raises:
      ReadError: the stream failed to read (not damaged content).

    Example:
        ```python
        import io

        for line in read_lines(io.BytesIO(b"It works .\\r\\n\\ncaf\\xe9\\n")):
            print(line.number, line.words, line.error)
        # 1 ['It', 'works', '.'] None
        # 2 None empty: no words (give one sentence per line)
        # 3 None not_utf8: not UTF-8 (byte 0xE9 at byte 4)
        ```
    """
    max_line_bytes = limits.max_line_bytes
    binary = not isinstance(input_file, io.TextIOBase)
    newline, carriage_return = (b"\n", b"\r") if binary else ("\n", "\r")
    number = 0

    def readline(size: int):
        try:
            return input_file.readline(size)
        except Exception as e:  # noqa: BLE001 - sorted into damage and I/O failures
            if _is_damage(e):
                raise _Damaged(e) from None
            if isinstance(e, OSError):
                raise ReadError(f"cannot read the input ({e.strerror or e})") from None
            raise

    try:
        while True:
            raw = readline(max_line_bytes + 2)  # room for \r\n
            if not raw:
                return
            number += 1
            if number == 1:
                raw = raw[len(_BOM):] if binary and raw.startswith(_BOM) else raw
                raw = raw[1:] if not binary and raw.startswith("\ufeff") else raw
            ended = raw.endswith(newline)
            if not ended and len(raw) == max_line_bytes + 2:
                while raw and not raw.endswith(newline):  # skip the rest of the long line
                    raw = readline(65536)
                yield Line(number, None, SentenceError(
                    TOO_LONG, f"longer than max_line_bytes={max_line_bytes}"))
                continue
            raw = raw[:-1] if ended else raw
            raw = raw[:-1] if raw.endswith(carriage_return) else raw
            size = len(raw) if binary else len(raw.encode("utf-8", "surrogatepass"))
            if size > max_line_bytes:
                yield Line(number, None, SentenceError(
                    TOO_LONG, f"{size} bytes, more than max_line_bytes={max_line_bytes}"))
                continue
            try:
                text = decode_utf8(raw) if binary else raw
                if documents:
                    yield Line(number, None, text=text)
                else:
                    yield Line(number, text_to_words(text, limits, split))
            except SentenceError as e:
                yield Line(number, None, e)
    except _Damaged as damaged:
        cause = damaged.cause
        yield Line(number + 1, None, SentenceError(
            DAMAGED, f"the file is damaged from here on ({type(cause).__name__}: "
            f"{str(cause) or 'cut short'}); {number} lines were read before it"))


class _Damaged(Exception):
    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause


class _ZstdStream(io.RawIOBase):
    """A .zst file's decompressed bytes, fed 1 KiB of compressed input at a time (so a read
    inflates at most ~44 MiB), raising EOFError where the input ends inside a frame:
    zstandard's own stream_reader reports a cut-short file as a clean end."""

    _CHUNK = 1024

    def __init__(self, raw: BinaryIO):
        super().__init__()
        import zstandard  # pylint: disable=import-outside-toplevel

        self._raw, self._new = raw, zstandard.ZstdDecompressor().decompressobj
        self._frame, self._in_frame, self._pending = self._new(), False, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            data = self._raw.read(self._CHUNK)
            if not data:
                if self._in_frame:
                    raise EOFError("compressed file ended before the end-of-stream marker "
                                   "was reached")
                return 0
            while data:
                self._in_frame = True
                self._pending += self._frame.decompress(data)
                data = b""
                if self._frame.eof:  # the next frame (if any) starts in unused_data
                    data, self._frame, self._in_frame = (self._frame.unused_data,
                                                         self._new(), False)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


# Compressions decompressed as a stream whose reads return at most what was asked for (or,
# for zstd, a bounded amount), so that a line over max_line_bytes is skipped in pieces.
DECOMPRESSORS: dict[str, Callable[[BinaryIO], BinaryIO]] = {
    ".gz": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    ".bz2": lambda raw: bz2.BZ2File(raw, mode="rb"),
    ".xz": lambda raw: lzma.LZMAFile(raw, mode="rb"),
    ".lzma": lambda raw: lzma.LZMAFile(raw, mode="rb"),
    ".zst": lambda raw: io.BufferedReader(_ZstdStream(raw)),
    ".zstd": lambda raw: io.BufferedReader(_ZstdStream(raw)),
}


def decompressed(raw: BinaryIO, path: str) -> BinaryIO:
    """The decompressed stream of a file by its extension (.gz, .bz2, .xz, .lzma, .zst,
    .zstd; zstd needs the zstandard package, which Beam brings); else raw.

    Args:
      raw: the file's bytes, as a binary stream.
      path: the file's name (only its extension is read, case-insensitively).

    Returns:
      A binary stream of the decompressed bytes, for `read_lines`.
    """
    for suffix, decompressor in DECOMPRESSORS.items():
        if path.lower().endswith(suffix):
            return decompressor(raw)
    return raw

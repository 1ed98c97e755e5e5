"""Raw text → sentences → Penn Treebank tokens, each with its character offsets.

One rule table, run two ways with the same meaning: by Python's `re` on the host and by
RE2 (`tf.strings.regex_replace`) inside the SavedModel, so that a paragraph gets the same
sentences and tokens from every way in.

The rules are NLTK's `TreebankWordTokenizer`'s, rewritten so that each one only *inserts*
a private-use marker (U+E000) where NLTK inserts a space; no rule changes or drops a
character of the text. Splitting on the markers and on whitespace then gives the tokens,
and a token's offset in the text is its offset in the marked text minus the markers before
it. Two sentinels stand for the text's start and end (Python's `$` also matches before a
final newline, RE2 has no `\\Z`). Patterns use only what both engines read alike: no
lookaround, no backreference, no `(?i)`, no `\\d \\s \\w` (Unicode in Python, ASCII in
RE2); where NLTK looks ahead, a later rule removes a marker again ("S&P", "AT&T").

After the split, each token is written as the treebank writes it: brackets as -LRB- …,
straight and curly double quotes as ``` `` ``` or '' by their side, curly single quotes as
` and ', Unicode dashes and the ellipsis character as -- and ...; the offsets still point
at the characters of the text.

Sentences are split by rules of the same kind: a candidate end after `.`, `?` or `!`, then
closing quotes or brackets, whitespace, and a capital or digit; not after a known
abbreviation, a single initial ("J. Smith") or a dotted abbreviation ("U.S.").
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from tetra_tf import sentences

# Inserted where a token ends (MARK) or a sentence starts (SENTENCE); BEGIN and END stand
# for the text's ends. Input characters in U+E000..U+E003 become U+FFFD first.
MARK, BEGIN, END, SENTENCE = "\ue000", "\ue001", "\ue002", "\ue003"
_MARKS = MARK + BEGIN + END
_RESERVED = f"[{MARK}{BEGIN}{END}{SENTENCE}]"
# Exactly the characters of `sentences.WHITESPACE`, as a character-class body.
_WS = "".join(chr(low) if low == high else f"{chr(low)}-{chr(high)}"
              for low, high in sentences.WHITESPACE_RANGES)

# Whole tokens rewritten as the treebank writes them (quotes by side: see `ptb_words`).
TOKEN_REWRITES = {**sentences.PTB_BRACKET_ESCAPES,
                  "\u201c": "``", "\u201e": "``", "\u00ab": "``",
                  "\u201d": "''", "\u00bb": "''", "\u2018": "`", "\u2019": "'",
                  "\u2012": "--", "\u2013": "--", "\u2014": "--", "\u2015": "--",
                  "\u2026": "..."}
# A straight double quote touching one of these (as written) opens a quotation.
OPENING_SURFACES = ("(", "[", "{", "<", "``", "\u201c", "\u201e", "\u00ab")


def _letters(word: str) -> str:
    """A case-insensitive literal without `(?i)` (the engines fold K, ſ … differently)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _token_rules() -> list[tuple[str, str]]:
    """(pattern, replacement) pairs, in NLTK's order; replacements use only \\1..\\9."""
    space = f"[{_WS}{MARK}]"                 # NLTK's " " or \s before its ENDING stage
    boundary = f"[{_WS}{_MARKS}]"            # ... and after NLTK pads the text with spaces
    apostrophe = "['\u2019]"
    not_space = f"[^'\u2019{_WS}{_MARKS}]"  # NLTK's [^' ] in the ENDING stage
    closers = "\\])}>\"'\u201d\u2019\u00bb"
    rules = [
        # STARTING_QUOTES (which way a quote faces is decided per token)
        ("(``)", MARK + r"\1" + MARK),
        (f"([ (\\[{{<{_WS}])(\"|'')", r"\1" + MARK + r"\2" + MARK),
        ("([\u201c\u201e\u00ab\u2018\u2012-\u2015\u2026])", MARK + r"\1" + MARK),
        # PUNCTUATION
        ("([:,])([^0-9])", MARK + r"\1" + MARK + r"\2"),
        (f"([:,]){END}", MARK + r"\1" + MARK + END),
        (r"(\.\.\.)", MARK + r"\1" + MARK),
        ("([;@#$%&])", MARK + r"\1" + MARK),
        # the final period: NLTK's ([^\.])(\.)([\]\)}>"\']*)\s*$
        (f"([^.])(\\.)([{closers}]*)({space}*){END}", r"\1" + MARK + r"\2\3\4" + END),
        ("([?!])", MARK + r"\1" + MARK),
        (f"([^'\u2019])({apostrophe})({space})", r"\1" + MARK + r"\2\3"),
        # PARENS_BRACKETS, DOUBLE_DASHES
        (r"([\]\[(){}<>])", MARK + r"\1" + MARK),
        ("(--)", MARK + r"\1" + MARK),
        # ENDING_QUOTES
        ("('')", MARK + r"\1" + MARK),
        ('(")', MARK + r"\1" + MARK),
        ("([\u201d\u00bb])", MARK + r"\1" + MARK),
        (f"({not_space})({apostrophe}[sSmMdD]|{apostrophe})({boundary})",
         r"\1" + MARK + r"\2\3"),
        (f"({not_space})({apostrophe}ll|{apostrophe}LL|{apostrophe}re|{apostrophe}RE|"
         f"{apostrophe}ve|{apostrophe}VE|n{apostrophe}t|N{apostrophe}T)({boundary})",
         r"\1" + MARK + r"\2\3"),
        # The treebank keeps "S&P", "AT&T": no split at & between capitals.
        (f"([A-Z]){MARK}(&){MARK}([A-Z])", r"\1\2\3"),
    ]
    # CONTRACTIONS2 and CONTRACTIONS3 ("cannot", "gonna", "'tis" ...); \b is ASCII in both.
    for first, second in (("can", "not"), ("d", "'ye"), ("gim", "me"), ("gon", "na"),
                          ("got", "ta"), ("lem", "me"), ("more", "'n")):
        rules.append((rf"\b({_letters(first)})({_letters(second)})\b",
                      MARK + r"\1" + MARK + r"\2" + MARK))
    rules.append((rf"\b({_letters('wan')})({_letters('na')})({boundary})",
                  MARK + r"\1" + MARK + r"\2" + MARK + r"\3"))
    for first, second in (("'t", "is"), ("'t", "was")):
        rules.append((rf"({boundary})({_letters(first)})({_letters(second)})\b",
                      r"\1" + MARK + r"\2" + MARK + r"\3" + MARK))
    return rules


# Abbreviations after which a period ends no sentence (the WSJ's most common).
ABBREVIATIONS = (
    "Mr Mrs Ms Messrs Dr Prof Sen Rep Reps Gov Gen Col Lt Maj Sgt Capt Adm Cmdr Rev Hon St "
    "Ste Mt Ft Jr Sr Bros Co Cos Corp Inc Ltd Plc Cie Dept Univ Assn No Nos Vol Fig Ch Sec "
    "Art Op Ed Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec Mon Tue Tues Wed Thu Thur "
    "Thurs Fri Sat Sun Ala Ariz Ark Calif Colo Conn Del Fla Ga Ill Ind Kan Kans Ky La Md "
    "Mass Mich Minn Miss Mo Mont Neb Nev Okla Ore Pa Penn Tenn Tex Va Vt Wash Wis Wyo vs "
    "etc approx esp ca cf Ave Blvd Rd a.m p.m e.g i.e").split()


def _sentence_rules() -> list[tuple[str, str]]:
    """(pattern, replacement) pairs that mark each sentence start with SENTENCE."""
    closing = "\"')\\]}\u201d\u2019\u00bb"
    opening = "\"'`(\\[{\u201c\u2018\u00ab"
    known = "|".join(re.escape(a) for a in sorted(ABBREVIATIONS, key=len, reverse=True))
    start = (f"([.?!]+[{closing}]*[{_WS}]+)([{opening}]*[A-Z0-9])", r"\1" + SENTENCE + r"\2")
    # Undo the start after an abbreviation, an initial or a dotted abbreviation. Each match
    # takes the character before the abbreviation, so "J. K. Rowling" needs two passes.
    undo = [(rf"(^|[^A-Za-z0-9_.])((?:{known}|[A-Z])\.[{_WS}]+){SENTENCE}", r"\1\2"),
            (rf"(^|[^A-Za-z0-9_.])((?:[A-Za-z]\.){{2,}}[{_WS}]+){SENTENCE}", r"\1\2")]
    return [start] + undo + undo


TOKEN_RULES = _token_rules()
SENTENCE_RULES = _sentence_rules()


@dataclasses.dataclass(frozen=True)
class Token:
    """A token as the treebank writes it, and where it stands in the text.

    Attributes:
      word: the PTB token (brackets escaped, quotes by side: what the model reads).
      start: the offset of its first character in the text.
      end: the offset after its last character (text[start:end] is what was written).
    """
    word: str
    start: int
    end: int


_COMPILED_TOKEN_RULES = [(re.compile(p, re.ASCII), r) for p, r in TOKEN_RULES]
_COMPILED_SENTENCE_RULES = [(re.compile(p, re.ASCII), r) for p, r in SENTENCE_RULES]
_PIECES = re.compile(f"[{_MARKS}]|[^{_WS}{_MARKS}]+")


def ptb_words(surfaces: Sequence[str], starts: Sequence[int],
              ends: Sequence[int]) -> list[str]:
    """Tokens as written → the words the model reads, as the treebank writes them.

    Brackets become -LRB- ..., curly quotes `` '' ` ', Unicode dashes and the ellipsis
    character -- and ..., and a straight double quote (" or '') opens a quotation (``)
    when it starts the sentence, follows whitespace, or touches an opening bracket or
    quote; otherwise it closes one (''). `tokenize` writes its tokens so, and so does the
    spaCy component with spaCy's own tokens.

    Args:
      surfaces: the sentence's tokens as written.
      starts: their start offsets, counted from the sentence's start.
      ends: their end offsets, likewise.

    Returns:
      One word per token.

    Example:
        ```python
        ptb_words(['"', "Hi", '"', "\u2014", "(", "ok", ")"], [0, 1, 3, 5, 7, 8, 10],
                  [1, 3, 4, 6, 8, 10, 11])
        # ['``', 'Hi', "''", '--', '-LRB-', 'ok', '-RRB-']
        ```
    """
    words = []
    previous_surface, previous_end = "", 0
    for surface, start, end in zip(surfaces, starts, ends):
        if surface in ('"', "''"):
            opening = (start == 0 or start > previous_end
                       or previous_surface in OPENING_SURFACES)
            words.append("``" if opening else "''")
        else:
            words.append(TOKEN_REWRITES.get(surface, surface.replace("\u2019", "'")))
        previous_surface, previous_end = surface, end
    return words


def tokenize(text: str) -> list[Token]:
    """Splits one sentence of raw text into PTB tokens with their character offsets.

    Args:
      text: raw text (one sentence; `split_sentences` cuts a paragraph into them).

    Returns:
      Its tokens, in order (none for blank text). For each, ``text[start:end]`` is the
      token's surface: the text it was written as, before PTB escaping (`ptb_words`).

    Example:
        ```python
        [t.word for t in tokenize('He said "hi" (twice).')]
        # ['He', 'said', '``', 'hi', "''", '-LRB-', 'twice', '-RRB-', '.']
        ```
    """
    marked = BEGIN + re.sub(_RESERVED, "\ufffd", text) + END
    for pattern, replacement in _COMPILED_TOKEN_RULES:
        marked = pattern.sub(replacement, marked)
    surfaces, starts, ends = [], [], []
    markers = 0
    for piece in _PIECES.finditer(marked):
        if piece.group() in _MARKS:
            markers += 1
            continue
        surfaces.append(piece.group())
        starts.append(piece.start() - markers)
        ends.append(piece.end() - markers)
    return [Token(word, start, end)
            for word, start, end in zip(ptb_words(surfaces, starts, ends), starts, ends)]


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Cuts a paragraph into sentences by rule.

    Args:
      text: raw text.

    Returns:
      (start, end) character offsets of each sentence that has a non-whitespace character,
      in order; whitespace between sentences belongs to the sentence before.
    """
    marked = text.replace(SENTENCE, "\ufffd")
    for pattern, replacement in _COMPILED_SENTENCE_RULES:
        marked = pattern.sub(replacement, marked)
    starts = [match.start() - index for index, match in enumerate(re.finditer(SENTENCE, marked))]
    bounds = [0, *starts, len(text)]
    return [(start, end) for start, end in zip(bounds, bounds[1:])
            if not all(c in sentences.WHITESPACE for c in text[start:end])]


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence of a text: where it stands and its tokens.

    Attributes:
      start, end: its character offsets in the text (whitespace after it is its own).
      tokens: its PTB tokens, with offsets in the whole text.
    """
    start: int
    end: int
    tokens: tuple[Token, ...]

    @property
    def words(self) -> list[str]:
        """The tokens' words: what the model reads."""
        return [token.word for token in self.tokens]


def tokenize_document(text: str, split: bool = True) -> list[Sentence]:
    """Splits a text into sentences (`split_sentences`) and each into tokens (`tokenize`).

    Args:
      text: raw text.
      split: False: the text is one sentence (it comes back as one, even when blank).

    Returns:
      Its sentences, in order; token offsets are in the whole text.

    Example:
        ```python
        [s.words for s in tokenize_document("It rained. We left.")]
        # [['It', 'rained', '.'], ['We', 'left', '.']]
        ```
    """
    bounds = split_sentences(text) if split else [(0, len(text))]
    return [Sentence(start, end, tuple(Token(token.word, token.start + start, token.end + start)
                                       for token in tokenize(text[start:end])))
            for start, end in bounds]


def checked_document(text: str, limits: sentences.SentenceLimits
                     ) -> list[tuple[Sentence, sentences.SentenceError | None]]:
    """`tokenize_document`, each sentence checked as a sentence given as words is
    (`sentences.check_words`): what the bulk readers and the servers refuse before the
    model runs.

    Args:
      text: raw text.
      limits: the bounds each sentence is checked against.

    Returns:
      Its sentences in order, each with None or the SentenceError that refuses it.
    """
    checked = []
    for sentence in tokenize_document(text):
        try:
            sentences.check_words(sentence.words, limits)
            checked.append((sentence, None))
        except sentences.SentenceError as e:
            checked.append((sentence, e))
    return checked


# --------------------------------------------------------------------------------------
# The same rules as TensorFlow ops (RE2), for the SavedModel


def _character_offsets(texts, byte_offsets):
    """Byte offsets into each text (ragged [batch, (n)]) as character offsets."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    _, char_starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8",
                                                            errors="replace")
    dense_chars = char_starts.to_tensor(default_value=tf.int64.max)
    dense_bytes = byte_offsets.to_tensor(default_value=0)
    # A character starts before byte b for each character before the one at b.
    positions = tf.searchsorted(dense_chars, dense_bytes, side="left", out_type=tf.int64)
    return tf.RaggedTensor.from_tensor(positions, lengths=byte_offsets.row_lengths())


_MARK_BYTES = len(MARK.encode("utf-8"))  # every marker is 3 bytes of UTF-8


def _graph_tokens_in_bytes(texts):
    """`graph_tokenize`, with byte offsets: (words, byte_starts, byte_ends), ragged."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tensorflow_text as tf_text  # pylint: disable=import-outside-toplevel

    marked = tf.strings.regex_replace(texts, _RESERVED, "\ufffd")
    marked = tf.strings.join([BEGIN, marked, END])
    for pattern, replacement in TOKEN_RULES:
        marked = tf.strings.regex_replace(marked, pattern, replacement)
    pieces, byte_starts, byte_ends = tf_text.regex_split_with_offsets(
        marked, f"[{_MARKS}]|[{_WS}]+", f"[{_MARKS}]")
    is_mark = tf.strings.regex_full_match(pieces.flat_values, f"[{_MARKS}]")
    marks = pieces.with_flat_values(tf.cast(is_mark, tf.int64))
    before = tf.cumsum(marks, axis=1, exclusive=True) * _MARK_BYTES
    keep = pieces.with_flat_values(tf.logical_not(is_mark))
    surfaces = tf.ragged.boolean_mask(pieces, keep)
    starts = tf.ragged.boolean_mask(byte_starts - before, keep)
    ends = tf.ragged.boolean_mask(byte_ends - before, keep)

    flat = surfaces.flat_values
    # Whole-token rewrites as comparisons (a lookup table would be a resource that the
    # SavedModel must track; the table is small).
    words = tf.strings.regex_replace(flat, "\u2019", "'")
    for surface, word in TOKEN_REWRITES.items():
        words = tf.where(tf.equal(flat, surface), word, words)
    # Quotes by side, from the token before in the same sentence (byte offsets order as
    # character offsets do, and "touching" is the same in both).
    first = tf.equal(tf.range(tf.size(flat, out_type=tf.int64)),
                     tf.gather(surfaces.row_starts(), surfaces.value_rowids()))
    flat_starts, flat_ends = starts.flat_values, ends.flat_values
    previous = tf.where(first, "", tf.roll(flat, 1, axis=0))
    previous_end = tf.where(first, tf.zeros_like(flat_ends), tf.roll(flat_ends, 1, axis=0))
    opening = (tf.equal(flat_starts, 0) | (flat_starts > previous_end)
               | tf.reduce_any(tf.equal(previous[:, None], list(OPENING_SURFACES)), axis=1))
    is_quote = tf.equal(flat, '"') | tf.equal(flat, "''")
    words = tf.where(is_quote, tf.where(opening, "``", "''"), words)
    return surfaces.with_flat_values(words), starts, ends


def graph_tokenize(texts):
    """`tokenize` as TensorFlow ops, for a batch of sentences (valid UTF-8).

    Args:
      texts: a 1-D tf.string tensor, one sentence each.

    Returns:
      (words, starts, ends): ragged [batch, (tokens)] tensors of the PTB tokens and their
      character offsets, equal to `tokenize`'s for each text.
    """
    words, byte_starts, byte_ends = _graph_tokens_in_bytes(texts)
    return (words, _character_offsets(texts, byte_starts),
            _character_offsets(texts, byte_ends))


@dataclasses.dataclass
class GraphDocuments:
    """`tokenize_document` of a batch of texts, as ragged tensors (character offsets).

    Attributes:
      sentence_starts, sentence_ends: int64 [batch, (sentences)].
      words: tf.string [batch, (sentences), (tokens)], the PTB tokens.
      word_starts, word_ends: int64 [batch, (sentences), (tokens)], in the whole text.
    """
    sentence_starts: Any
    sentence_ends: Any
    words: Any
    word_starts: Any
    word_ends: Any


def graph_tokenize_document(texts) -> GraphDocuments:
    """`tokenize_document` as TensorFlow ops, for a batch of texts (valid UTF-8).

    Args:
      texts: a 1-D tf.string tensor, one document (or one sentence) each.

    Returns:
      Its sentences and their tokens, equal to `split_sentences`' and `tokenize_document`'s
      for each text.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tensorflow_text as tf_text  # pylint: disable=import-outside-toplevel

    marked = tf.strings.regex_replace(texts, SENTENCE, "\ufffd")  # 3 bytes for 3 bytes
    for pattern, replacement in SENTENCE_RULES:
        marked = tf.strings.regex_replace(marked, pattern, replacement)
    # No rule puts a sentence start at a text's start or end, or two together, so piece i
    # of a row has i markers before it.
    pieces, marked_starts, marked_ends = tf_text.regex_split_with_offsets(marked, SENTENCE)
    before = tf.ragged.range(pieces.row_lengths()) * _MARK_BYTES
    keep = pieces.with_flat_values(tf.logical_not(
        tf.strings.regex_full_match(pieces.flat_values, f"[{_WS}]*")))
    sentence_texts = tf.ragged.boolean_mask(pieces, keep)
    byte_starts = tf.ragged.boolean_mask(marked_starts - before, keep)
    byte_ends = tf.ragged.boolean_mask(marked_ends - before, keep)

    words, token_starts, token_ends = _graph_tokens_in_bytes(sentence_texts.flat_values)
    rows = sentence_texts.row_lengths()
    # Each token's byte offsets in its whole text, then as characters of that text.
    sentence_start = tf.gather(byte_starts.flat_values, words.value_rowids())
    tokens_per_text = tf.math.unsorted_segment_sum(
        words.row_lengths(), sentence_texts.value_rowids(), tf.shape(texts, tf.int64)[0])

    def in_text(token_offsets):
        per_text = tf.RaggedTensor.from_row_lengths(token_offsets.flat_values + sentence_start,
                                                    tokens_per_text)
        chars = _character_offsets(texts, per_text).flat_values
        return tf.RaggedTensor.from_row_lengths(token_offsets.with_flat_values(chars), rows)

    return GraphDocuments(
        sentence_starts=_character_offsets(texts, byte_starts),
        sentence_ends=_character_offsets(texts, byte_ends),
        words=tf.RaggedTensor.from_row_lengths(words, rows),
        word_starts=in_text(token_starts), word_ends=in_text(token_ends))

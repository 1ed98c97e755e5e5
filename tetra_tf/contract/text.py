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
a straight double quote as ``` `` ``` or '' by its neighbours, curly quotes as ``` `` ```
'' ` ', Unicode dashes and the ellipsis character as -- and ...; ``` `` ``` and '' keep the
side they are written with (NLTK's tokenizer turns a '' after a space into ``` `` ```). The
offsets still point at the characters of the text.

Sentences are split by rules of the same kind: a candidate end after `.`, `?` or `!`, then
closing quotes or brackets, whitespace, and a capital or digit; not after a known
abbreviation, a single initial ("J. Smith") or a dotted abbreviation ("U.S.").
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Sequence

from tetra_tf.contract import sentences

# Inserted where a token ends (MARK) or a sentence starts (SENTENCE); BEGIN and END stand
# for the text's ends. Input characters in U+E000..U+E003 become U+FFFD first.
MARK, BEGIN, END, SENTENCE = "\ue000", "\ue001", "\ue002", "\ue003"
_MARKS = MARK + BEGIN + END
_RESERVED = f"[{MARK}{BEGIN}{END}{SENTENCE}]"
# Exactly the characters of `sentences.WHITESPACE`, as a character-class body.
_WS = "".join(chr(low) if low == high else f"{chr(low)}-{chr(high)}"
              for low, high in sentences.WHITESPACE_RANGES)

# Whole tokens rewritten as the treebank writes them (a straight quote: see `ptb_words`).
TOKEN_REWRITES = {**sentences.PTB_BRACKET_ESCAPES,
                  "\u201c": "``", "\u201e": "``", "\u00ab": "``",
                  "\u201d": "''", "\u00bb": "''", "\u2018": "`", "\u2019": "'",
                  "\u2012": "--", "\u2013": "--", "\u2014": "--", "\u2015": "--",
                  "\u2026": "..."}
# A straight double quote touching one of these (as written) opens a quotation.
OPENING_SURFACES = ("(", "[", "{", "<", "``", "\u201c", "\u201e", "\u00ab", "\u2018")
# What the clitic and contraction rules read as an apostrophe.
APOSTROPHE = "['\u2019]"


def _letters(word: str) -> str:
    """A case-insensitive literal without `(?i)` (the engines fold K, ſ … differently)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else APOSTROPHE if c == "'"
                   else re.escape(c) for c in word)


def _token_rules() -> list[tuple[str, str]]:
    """(pattern, replacement) pairs, in NLTK's order; replacements use only \\1..\\9."""
    space = f"[{_WS}{MARK}]"                 # NLTK's " " or \s before its ENDING stage
    boundary = f"[{_WS}{_MARKS}]"            # ... and after NLTK pads the text with spaces
    apostrophe = APOSTROPHE
    not_space = f"[^'\u2019{_WS}{_MARKS}]"  # NLTK's [^' ] in the ENDING stage
    closers = "\\])}>\"'\u201d\u2019\u00bb"
    rules = [
        # STARTING_QUOTES (which way a quote faces is decided per token)
        ("(``)", MARK + r"\1" + MARK),
        (f"([ (\\[{{<{_WS}])(\"|'')", r"\1" + MARK + r"\2" + MARK),
        ("([\u201c\u201e\u00ab\u2018])", MARK + r"\1" + MARK),
        # PUNCTUATION
        ("([:,])([^0-9])", MARK + r"\1" + MARK + r"\2"),
        (f"([:,]){END}", MARK + r"\1" + MARK + END),
        ("(\\.\\.\\.|\u2026)", MARK + r"\1" + MARK),  # and \u2026 where NLTK splits ...
        ("([;@#$%&])", MARK + r"\1" + MARK),
        # the final period: NLTK's ([^\.])(\.)([\]\)}>"\']*)\s*$
        (f"([^.])(\\.)([{closers}]*)({space}*){END}", r"\1" + MARK + r"\2\3\4" + END),
        ("([?!])", MARK + r"\1" + MARK),
        (f"([^'\u2019])({apostrophe})({space})", r"\1" + MARK + r"\2\3"),
        # PARENS_BRACKETS, DOUBLE_DASHES
        (r"([\]\[(){}<>])", MARK + r"\1" + MARK),
        ("(--|[\u2012-\u2015])", MARK + r"\1" + MARK),  # and Unicode dashes where -- splits
        # ENDING_QUOTES
        ("('')", MARK + r"\1" + MARK),
        ('(")', MARK + r"\1" + MARK),
        ("([\u201d\u00bb])", MARK + r"\1" + MARK),
        (f"({not_space})({apostrophe}[sSmMdD]|{apostrophe})({boundary})",
         r"\1" + MARK + r"\2\3"),
        (f"({not_space})({apostrophe}ll|{apostrophe}LL|{apostrophe}re|{apostrophe}RE|"
         f"{apostrophe}ve|{apostrophe}VE|n{apostrophe}t|N{apostrophe}T)({boundary})",
         r"\1" + MARK + r"\2\3"),
    ]
    # The treebank keeps "S&P", "AT&T": no split at & between capitals. Each match takes
    # the capital after the &, so "AT&T&S" needs two passes.
    rules += [(f"([A-Z]){MARK}(&){MARK}([A-Z])", r"\1\2\3")] * 2
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
    character -- and ..., and a straight double quote " opens a quotation (``) when it
    starts the sentence, follows whitespace, or touches an opening bracket or quote;
    otherwise it closes one (''). `` and '' keep the side they are written with, so PTB
    words come back as they are. `tokenize` writes its tokens so, and so does the spaCy
    component with spaCy's own tokens.

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
        if surface == '"':
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


def ptb_tokenize(text: str) -> list[str]:
    """One sentence of raw text → its PTB tokens (`tokenize`'s words, without offsets).

    Args:
      text: raw text, one sentence.

    Returns:
      Its PTB tokens (none for blank text).

    Example:
        ```python
        ptb_tokenize('He said "hi" (twice).')
        # ['He', 'said', '``', 'hi', "''", '-LRB-', 'twice', '-RRB-', '.']
        ```
    """
    return [token.word for token in tokenize(text)]


def word_splitter(tokenize_text: bool) -> Callable[[str], list[str]]:
    """How a line becomes words, for `sentences.read_lines` and `sentences.text_to_words`:
    raw text split into PTB tokens (`ptb_tokenize`, the bulk programs' --tokenize), or PTB
    tokens already separated by whitespace (`sentences.split_words`)."""
    return ptb_tokenize if tokenize_text else sentences.split_words


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


def _row_ids(lengths):
    """The row of each value of rows with these lengths (int64)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf.repeat(tf.range(tf.size(lengths, out_type=tf.int64)), lengths)


def _character_offsets(texts, byte_offsets, rows):
    """Byte offsets into texts[rows] (flat int64) as character offsets.

    One binary search over all the texts' characters laid end to end: the offset of byte b
    is the number of characters that start before it.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    _, char_starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8",
                                                            errors="replace")
    chars_per_text = char_starts.row_lengths()
    byte_base = tf.cumsum(tf.cast(tf.strings.length(texts), tf.int64), exclusive=True)
    char_base = tf.cumsum(chars_per_text, exclusive=True)
    all_starts = char_starts.flat_values + tf.gather(byte_base, _row_ids(chars_per_text))
    queries = byte_offsets + tf.gather(byte_base, rows)
    before = tf.searchsorted(all_starts[None, :], queries[None, :], side="left",
                             out_type=tf.int64)[0]
    return before - tf.gather(char_base, rows)


_MARK_BYTES = len(MARK.encode("utf-8"))  # every marker is 3 bytes of UTF-8


@dataclasses.dataclass
class _FlatTokens:
    """Tokens of a batch of texts, flat: words, byte offsets in their text, and how many
    each text has. Flat tensors keep the graph small (ragged ops add dozens of nodes each,
    and every node costs tracing and graph optimisation at export and at warm-up)."""
    words: Any
    byte_starts: Any
    byte_ends: Any
    tokens_per_text: Any


def _split_pieces(marked, delimiters: str, kept_delimiters: str = ""):
    """regex_split_with_offsets, flat: (pieces, starts, ends, row of each, row_starts)."""
    import tensorflow_text as tf_text  # pylint: disable=import-outside-toplevel

    pieces, starts, ends = tf_text.regex_split_with_offsets(marked, delimiters,
                                                            kept_delimiters)
    return (pieces.flat_values, starts.flat_values, ends.flat_values,
            _row_ids(pieces.row_lengths()), pieces.row_splits[:-1])


def _graph_tokens(texts) -> _FlatTokens:
    """`tokenize` of each text as TF ops, with byte offsets."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    marked = tf.strings.regex_replace(texts, _RESERVED, "\ufffd")
    marked = tf.strings.join([BEGIN, marked, END])
    for pattern, replacement in TOKEN_RULES:
        marked = tf.strings.regex_replace(marked, pattern, replacement)
    pieces, starts, ends, rows, row_starts = _split_pieces(
        marked, f"[{_MARKS}]|[{_WS}]+", f"[{_MARKS}]")
    is_mark = tf.strings.regex_full_match(pieces, f"[{_MARKS}]")
    marks_before = tf.cumsum(tf.cast(is_mark, tf.int64), exclusive=True)
    # Markers before each piece in its own text: all before it, less those before its text.
    before = (marks_before - tf.gather(marks_before, tf.gather(row_starts, rows))) * _MARK_BYTES
    keep = tf.logical_not(is_mark)
    surfaces = tf.boolean_mask(pieces, keep)
    starts = tf.boolean_mask(starts - before, keep)
    ends = tf.boolean_mask(ends - before, keep)
    tokens_per_text = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), rows,
                                                   tf.size(texts, out_type=tf.int64))

    # Whole-token rewrites as comparisons (a lookup table would be a resource that the
    # SavedModel must track; the table is small).
    words = tf.strings.regex_replace(surfaces, "\u2019", "'")
    for surface, word in TOKEN_REWRITES.items():
        words = tf.where(tf.equal(surfaces, surface), word, words)
    # Quotes by side, from the token before in the same text (byte offsets order as
    # character offsets do, and "touching" is the same in both).
    token_starts = tf.cumsum(tokens_per_text, exclusive=True)
    first = tf.equal(tf.range(tf.size(surfaces, out_type=tf.int64)),
                     tf.gather(token_starts, _row_ids(tokens_per_text)))
    previous = tf.where(first, "", tf.roll(surfaces, 1, axis=0))
    previous_end = tf.where(first, tf.zeros_like(ends), tf.roll(ends, 1, axis=0))
    opening = (tf.equal(starts, 0) | (starts > previous_end)
               | tf.reduce_any(tf.equal(previous[:, None], list(OPENING_SURFACES)), axis=1))
    words = tf.where(tf.equal(surfaces, '"'), tf.where(opening, "``", "''"), words)
    return _FlatTokens(words, starts, ends, tokens_per_text)


def graph_tokenize(texts):
    """`tokenize` as TensorFlow ops, for a batch of sentences (valid UTF-8).

    Args:
      texts: a 1-D tf.string tensor, one sentence each.

    Returns:
      (words, starts, ends): ragged [batch, (tokens)] tensors of the PTB tokens and their
      character offsets, equal to `tokenize`'s for each text.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    tokens = _graph_tokens(texts)
    rows = _row_ids(tokens.tokens_per_text)

    def ragged(values):
        return tf.RaggedTensor.from_row_lengths(values, tokens.tokens_per_text,
                                                validate=False)

    return (ragged(tokens.words),
            ragged(_character_offsets(texts, tokens.byte_starts, rows)),
            ragged(_character_offsets(texts, tokens.byte_ends, rows)))


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

    marked = tf.strings.regex_replace(texts, SENTENCE, "\ufffd")  # 3 bytes for 3 bytes
    for pattern, replacement in SENTENCE_RULES:
        marked = tf.strings.regex_replace(marked, pattern, replacement)
    # No rule puts a sentence start at a text's start or end, or two together, so piece i
    # of a row has i markers before it.
    pieces, starts, ends, rows, row_starts = _split_pieces(marked, SENTENCE)
    before = (tf.range(tf.size(pieces, out_type=tf.int64))
              - tf.gather(row_starts, rows)) * _MARK_BYTES
    keep = tf.logical_not(tf.strings.regex_full_match(pieces, f"[{_WS}]*"))
    sentence_texts = tf.boolean_mask(pieces, keep)
    sentence_starts = tf.boolean_mask(starts - before, keep)
    sentence_ends = tf.boolean_mask(ends - before, keep)
    sentence_rows = tf.boolean_mask(rows, keep)
    sentences_per_text = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), rows,
                                                      tf.size(texts, out_type=tf.int64))

    tokens = _graph_tokens(sentence_texts)
    token_sentence = _row_ids(tokens.tokens_per_text)
    token_rows = tf.gather(sentence_rows, token_sentence)
    sentence_start = tf.gather(sentence_starts, token_sentence)
    # All offsets in one search: sentence starts and ends, then token starts and ends.
    num_sentences, num_tokens = tf.size(sentence_rows), tf.size(token_rows)
    offsets = _character_offsets(
        texts,
        tf.concat([sentence_starts, sentence_ends, tokens.byte_starts + sentence_start,
                   tokens.byte_ends + sentence_start], axis=0),
        tf.concat([sentence_rows, sentence_rows, token_rows, token_rows], axis=0))
    word_starts = offsets[2 * num_sentences:2 * num_sentences + num_tokens]

    def by_sentence(values):
        return tf.RaggedTensor.from_row_lengths(values, sentences_per_text, validate=False)

    def by_token(values):
        return by_sentence(tf.RaggedTensor.from_row_lengths(values, tokens.tokens_per_text,
                                                            validate=False))

    return GraphDocuments(
        sentence_starts=by_sentence(offsets[:num_sentences]),
        sentence_ends=by_sentence(offsets[num_sentences:2 * num_sentences]),
        words=by_token(tokens.words),
        word_starts=by_token(word_starts),
        word_ends=by_token(offsets[2 * num_sentences + num_tokens:]))

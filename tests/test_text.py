"""Tests for tetra_tf/contract/text.py: raw text to sentences and PTB tokens with offsets."""

import collections
import io
import random
import re

import pytest

from conftest import requires_nltk_sample
from tetra_tf.contract import sentences, text

# Text a user could send: Unicode quotes and dashes, URLs, emoji, CJK, numbers, ellipses,
# abbreviations, brackets, clitics, empty and whitespace-only lines.
HOSTILE = [
    "", " ", "\t\u3000\n", "He said \u201chi\u201d \u2014 then left\u2026",
    "It\u2019s Sarah\u2019s car, isn\u2019t it?", "See https://example.com/a?b=c&d=e now.",
    "Price: $1,000.50 or 3/4 of it (roughly).", "Smile \U0001F600 \U0001F44D\U0001F3FD !",
    "\u6771\u4eac\u306f\u5927\u304d\u3044\u3002", "Wait... what?! No -- never.",
    "Mr. Smith of the U.S. met Dr. J. K. Rowling.", "'Tis the season; gonna wanna go.",
    "\"Quoted\" and ''double'' and `single'.", "a\u00a0b\u2009c \ufeffd",
    "S&P 500 rose; AT&T fell & Co. didn't.", "x\ue000y\ue003z", "(a [b {c} d] e) <f>",
    "AT&T&S&P\u2019s \u2019Tis it\u2019s\u2019\u2014 \u2018\"so\" x.\u2026",
    "He said ``fine,'' then ''odd'' (``x'').",
]


def _gold_and_raw(split: str):
    """(gold leaves, raw text) of each tree of a sample split: the text is NLTK's
    detokenization of the leaves, as a user would have written it."""
    from nltk.tokenize.treebank import TreebankWordDetokenizer

    from tetra_tf.trees import treebank

    detokenizer = TreebankWordDetokenizer()
    for entry in treebank.read_nltk_sample(split):
        if entry.tree is None:
            continue
        leaves = treebank.clean_tree(entry.tree).leaves()
        raw = [sentences.PTB_TOKEN_ESCAPES.get(leaf, leaf) if leaf.startswith("-") else leaf
               for leaf in leaves]
        yield leaves, detokenizer.detokenize(raw, convert_parentheses=False)


def _is_written_as(word: str, surface: str) -> bool:
    """Whether a token's word is its surface as the treebank writes it (a straight double
    quote's side depends on its neighbours; the markers' private-use characters U+E000 to
    U+E003 are read as U+FFFD)."""
    surface = "".join("\ufffd" if "\ue000" <= c <= "\ue003" else c for c in surface)
    if surface == '"':
        return word in ("``", "''")
    return word == text.TOKEN_REWRITES.get(surface, surface.replace("\u2019", "'"))


def test_offsets_give_each_tokens_surface_on_hostile_text():
    for line in HOSTILE:
        tokens = text.tokenize(line)
        assert [t.start for t in tokens] == sorted(t.start for t in tokens), line
        for token in tokens:
            surface = line[token.start:token.end]
            assert surface and not any(c in sentences.WHITESPACE for c in surface), (line, token)
            assert _is_written_as(token.word, surface), (line, token)
        # Nothing dropped: the tokens' surfaces and the whitespace between make the text
        # (the reserved private-use characters are read as U+FFFD).
        rebuilt = list(line)
        for token in tokens:
            rebuilt[token.start:token.end] = ["\0"] * (token.end - token.start)
        assert all(c == "\0" or c in sentences.WHITESPACE for c in rebuilt), line


def test_ptb_conventions():
    words = [t.word for t in text.tokenize('He said "don\'t" (twice) \u2014 S&P\u2019s.')]
    assert words == ["He", "said", "``", "do", "n't", "''", "-LRB-", "twice", "-RRB-", "--",
                     "S&P", "'s", "."]
    assert [t.word for t in text.tokenize("I cannot, Mr. Smith.")] == [
        "I", "can", "not", ",", "Mr.", "Smith", "."]
    # A straight quote opens at a sentence's start; `` and '' keep the side they are
    # written with, wherever they stand (text tokenized once, TeX-style quotes).
    assert [t.word for t in text.tokenize('"Hi," he said.')] == [
        "``", "Hi", ",", "''", "he", "said", "."]
    assert [t.word for t in text.tokenize("He said `` fine '' .")] == [
        "He", "said", "``", "fine", "''", "."]
    assert [t.word for t in text.tokenize("He said ``fine,'' then ''odd'' (``x'').")] == [
        "He", "said", "``", "fine", ",", "''", "then", "''", "odd", "''", "-LRB-", "``", "x",
        "''", "-RRB-", "."]
    assert text.tokenize("") == text.tokenize(" \t") == []


def test_lines_of_raw_text_become_ptb_tokens_with_the_tokenize_option():
    """`word_splitter(True)` reads lines as raw text (the bulk programs' --tokenize); the
    sentence contract still checks the tokens it gives."""
    assert text.ptb_tokenize('He said "hi" (twice).') == [
        "He", "said", "``", "hi", "''", "-LRB-", "twice", "-RRB-", "."]
    assert text.ptb_tokenize(" \t") == []
    assert text.word_splitter(False) is sentences.split_words
    data = io.BytesIO("(It) works.\n(It) works .\nOne, two, three.\n".encode())
    lines = list(sentences.read_lines(data, sentences.SentenceLimits(max_words=5),
                                      text.word_splitter(True)))
    assert [line.words for line in lines[:2]] == [["-LRB-", "It", "-RRB-", "works", "."]] * 2
    assert lines[2].words is None and lines[2].error.reason == sentences.TOO_MANY_WORDS
    assert sentences.text_to_words("(It) works.") == ["(It)", "works."]


def test_ptb_words_keep_the_words_of_text_tokenized_once():
    assert text.ptb_words(["was", "``", "fine", "''", "."], [0, 4, 7, 12, 15],
                          [3, 6, 11, 14, 16]) == ["was", "``", "fine", "''", "."]


@requires_nltk_sample
def test_ptb_words_of_the_sample_leaves_are_the_leaves():
    """Gold PTB tokens written out with a space between come back as themselves (brackets
    escaped as the treebank escapes them), whatever their quotes."""
    from tetra_tf.trees import treebank

    quotes = 0
    for entry in treebank.read_nltk_sample("test"):
        if entry.tree is None:
            continue
        leaves = treebank.clean_tree(entry.tree).leaves()
        starts = [sum(len(leaf) + 1 for leaf in leaves[:i]) for i in range(len(leaves))]
        ends = [start + len(leaf) for start, leaf in zip(starts, leaves)]
        assert text.ptb_words(leaves, starts, ends) == leaves
        quotes += leaves.count("''")
    assert quotes > 0


# --------------------------------------------------------------------------------------
# Against NLTK's TreebankWordTokenizer

# How NLTK reads the Unicode punctuation it has no rules for: as its ASCII spelling.
ASCII_SPELLINGS = {"\u201c": "``", "\u201e": "``", "\u00ab": "``", "\u201d": "''",
                   "\u00bb": "''", "\u2018": "`", "\u2019": "'", "\u2012": "--",
                   "\u2013": "--", "\u2014": "--", "\u2015": "--", "\u2026": "..."}
# \u2019 beside another apostrophe: spelled in ASCII, the two would be a '' that they are
# not, so NLTK has no answer to compare with.
_NO_NLTK_COUNTERPART = re.compile("\u2019['\u2019]|'\u2019")


def _spelled_in_ascii(line: str) -> str:
    """Deliberate difference 2: each Unicode quote, dash and ellipsis spelled in ASCII, and
    spaced from an ASCII mark before it that its spelling would take in (".\u2026" is
    ". ...", not "...." that NLTK reads as "..." "."); \u2018 always spaced (NLTK splits
    off no lone `), and a closing double quote after an apostrophe spelled " (which closes
    there) rather than ''."""
    pieces = []
    for i, c in enumerate(line):
        spelling = ASCII_SPELLINGS.get(c, c)
        before = ASCII_SPELLINGS.get(line[i - 1], line[i - 1]) if i else " "
        if spelling == "''" and before == "'":
            spelling = '"'
        elif c == "\u2018":
            spelling = " ` "
        elif c in ASCII_SPELLINGS and before[-1] == spelling[0] and before != spelling:
            spelling = " " + spelling
        pieces.append(spelling)
    return "".join(pieces)


def nltk_words(line: str) -> list[str] | None:
    """NLTK's TreebankWordTokenizer's words for a line (brackets converted), with
    tetra-tf's deliberate differences from it (docs/reference/sentences.md):

    1. every whitespace character is a space (NLTK's quote and apostrophe rules see " ");
    2. Unicode quotes, dashes and the ellipsis are tokens by themselves, read as their
       ASCII spelling (`_spelled_in_ascii`);
    3. '' keeps the side it is written with (NLTK makes it `` after a space or an
       opening bracket);
    4. '""' at the text's very start is `` '' as anywhere else (NLTK makes the first quote
       `` before its other rules run, so both open);
    5. & between capitals stays in the word (S&P, AT&T), as the treebank has it;
    6. the reserved characters U+E000 to U+E003 are read as U+FFFD.

    Returns:
      The words; None where \u2019 touches another apostrophe.
    """
    from nltk.tokenize import TreebankWordTokenizer

    if _NO_NLTK_COUNTERPART.search(line):
        return None
    line = "".join(" " if c in sentences.WHITESPACE
                   else "\ufffd" if "\ue000" <= c <= "\ue003" else c for c in line)
    line = _spelled_in_ascii(line)
    tokenizer = TreebankWordTokenizer()
    words = tokenizer.tokenize(line, convert_parentheses=True)
    spans = list(tokenizer.span_tokenize(line))
    tokens = [["''" if line[start:end] == "''" else word, start, end]  # 3
              for word, (start, end) in zip(words, spans)]
    if line.startswith('""'):  # 4
        tokens[1][0] = "''"
    joined = []  # 5
    index = 0
    while index < len(tokens):
        word, start, end = tokens[index]
        if (word == "&" and joined and index + 1 < len(tokens) and joined[-1][2] == start
                and tokens[index + 1][1] == end and "A" <= line[start - 1] <= "Z"
                and "A" <= line[end] <= "Z"):
            after = tokens[index + 1]
            joined[-1] = [joined[-1][0] + "&" + after[0], joined[-1][1], after[2]]
            index += 2
            continue
        joined.append(tokens[index])
        index += 1
    return [word for word, _, _ in joined]


def test_matches_nltk_treebank_tokenizer_on_hostile_text_but_for_deliberate_differences():
    for line in HOSTILE:
        assert [t.word for t in text.tokenize(line)] == nltk_words(line), line


@requires_nltk_sample
def test_test_split_detokenized_comes_back_as_its_gold_tokens():
    matched, total = 0, 0
    for leaves, raw in _gold_and_raw("test"):
        tokens = text.tokenize(raw)
        total += 1
        matched += [t.word for t in tokens] == leaves
        for token in tokens:  # the offsets hold what each token was written as
            assert _is_written_as(token.word, raw[token.start:token.end]), (raw, token)
    assert total == 245
    assert matched / total >= 0.97, f"{matched} of {total} sentences match their gold tokens"


@requires_nltk_sample
def test_sentences_of_a_paragraph_come_back():
    """The test split's sentences joined into paragraphs of five: the boundaries found are
    the sentences' own (boundary F1 over the split)."""
    items = list(_gold_and_raw("test"))
    found = correct = expected = 0
    for first in range(0, len(items), 5):
        group = [raw for _, raw in items[first:first + 5]]
        paragraph = " ".join(group)
        ends, position = set(), 0
        for raw in group:
            position += len(raw)
            ends.add(position)
            position += 1
        spans = text.split_sentences(paragraph)
        got = {paragraph[:end].rstrip().__len__() for _, end in spans}
        found += len(got)
        expected += len(ends)
        correct += len(got & ends)
    precision, recall = correct / found, correct / expected
    f1 = 2 * precision * recall / (precision + recall)
    assert f1 >= 0.97, (precision, recall)


def test_a_document_keeps_offsets_in_the_whole_text():
    document = "Mr. Smith left.  He said \u201cno.\u201d\n\nThen (later) he came back!"
    sentences_found = text.tokenize_document(document)
    assert [s.words for s in sentences_found] == [
        ["Mr.", "Smith", "left", "."], ["He", "said", "``", "no", ".", "''"],
        ["Then", "-LRB-", "later", "-RRB-", "he", "came", "back", "!"]]
    for sentence in sentences_found:
        for token in sentence.tokens:
            assert document[token.start:token.end] in (token.word, "\u201c", "\u201d", "(",
                                                       ")"), token
    counts = collections.Counter(t.word for s in sentences_found for t in s.tokens)
    assert counts["."] == 2


def _graph_tokens(lines):
    import tensorflow as tf

    words, starts, ends = text.graph_tokenize(tf.constant(lines))
    return [[text.Token(w.decode("utf-8"), s, e) for w, s, e in zip(*row)]
            for row in zip(words.to_list(), starts.to_list(), ends.to_list())]


def test_the_graph_tokenizes_as_the_host_on_hostile_text():
    assert _graph_tokens(HOSTILE) == [text.tokenize(line) for line in HOSTILE]


@requires_nltk_sample
def test_the_graph_tokenizes_as_the_host_on_the_test_split():
    raws = [raw for _, raw in _gold_and_raw("test")]
    assert _graph_tokens(raws) == [text.tokenize(raw) for raw in raws]


# Generated text: words that the contraction and clitic rules split (or must not), and the
# characters the rules touch, run together or apart by every kind of space.
GENERATED_TEXTS = 1500
_GENERATED_WORDS = ("the", "He", "said", "fine", "x", "9", "3.5", "1,000", "U.S.", "Mr.",
                    "a.m.", "don't", "can't", "it's", "I'm", "they'll", "we've", "dogs'",
                    "O'Neil", "rock'n'roll", "cannot", "gonna", "wanna", "'tis", "Tis",
                    "S&P", "AT&T", "it\u2019s", "don\u2019t")
_GENERATED_PUNCTUATION = ('"', "''", "``", "'", "`", "\u201c", "\u201d", "\u201e",
                          "\u2018", "\u2019", "\u00ab", "\u00bb", "(", ")", "[", "]", "{",
                          "}", "<", ">", "--", "-", "\u2012", "\u2013", "\u2014", "\u2015",
                          "\u2026", ".", "...", "?", "!", ",", ";", ":", "&", "%", "$", "@",
                          "#")
_GENERATED_SEPARATORS = ("", "", " ", " ", " ", "  ", "\t", "\n", "\u00a0")


def generated_texts(count: int, seed: int = 69) -> list[str]:
    """count texts of 1 to 12 pieces (a word or a punctuation mark, then a separator)."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        pieces = []
        for _ in range(rng.randint(1, 12)):
            pieces.append(rng.choice(_GENERATED_WORDS if rng.random() < 0.5
                                     else _GENERATED_PUNCTUATION))
            pieces.append(rng.choice(_GENERATED_SEPARATORS))
        texts.append("".join(pieces))
    return texts


def test_tokenizes_generated_text_as_nltk_but_for_deliberate_differences_host_and_graph():
    """Every difference from NLTK's TreebankWordTokenizer is one of `nltk_words`'
    deliberate ones, and the graph gives the host's tokens and offsets."""
    from nltk.tokenize import TreebankWordTokenizer

    texts = generated_texts(GENERATED_TEXTS)
    host = [text.tokenize(line) for line in texts]
    compared = differ_from_nltk = 0
    for line, tokens in zip(texts, host):
        expected = nltk_words(line)
        if expected is None:
            continue
        compared += 1
        got = [token.word for token in tokens]
        assert got == expected, line
        differ_from_nltk += got != TreebankWordTokenizer().tokenize(line,
                                                                   convert_parentheses=True)
    assert compared >= 0.98 * len(texts)
    assert differ_from_nltk >= 0.2 * compared  # the deliberate differences are exercised
    assert _graph_tokens(texts) == host


def _graph_documents(texts):
    import tensorflow as tf

    documents = text.graph_tokenize_document(tf.constant(texts))
    found = []
    for row in range(len(texts)):
        sentences_found = []
        for s, (start, end) in enumerate(zip(documents.sentence_starts[row].numpy(),
                                             documents.sentence_ends[row].numpy())):
            tokens = tuple(text.Token(w.decode("utf-8"), int(a), int(b)) for w, a, b in zip(
                documents.words[row][s].numpy(), documents.word_starts[row][s].numpy(),
                documents.word_ends[row][s].numpy()))
            sentences_found.append(text.Sentence(int(start), int(end), tokens))
        found.append(sentences_found)
    return found


PARAGRAPHS = [
    "Mr. Smith left.  He said \u201cno.\u201d\n\nThen (later) he came back!",
    "It cost $1,000.50. Really? Yes!! \U0001F600 \u6771\u4eac. Dr. J. K. Rowling wrote it.",
    "U.S. officials met. The end.", "\u201cGo.\u201d She went. 3 of them left.",
]


def test_the_graph_splits_and_tokenizes_hostile_documents_as_the_host():
    texts = HOSTILE + PARAGRAPHS + [" ".join(PARAGRAPHS), "Ok. ''Hi,'' he said."]
    assert _graph_documents(texts) == [text.tokenize_document(t) for t in texts]
    assert _graph_documents(["", " \t"]) == [[], []]  # a batch without any sentence


@requires_nltk_sample
def test_the_graph_splits_and_tokenizes_documents_as_the_host():
    items = list(_gold_and_raw("test"))
    paragraphs = [" ".join(raw for _, raw in items[i:i + 7]) for i in range(0, len(items), 7)]
    assert _graph_documents(paragraphs) == [text.tokenize_document(t) for t in paragraphs]


def test_sentences_cover_the_text_and_tokens_lie_inside_their_sentence():
    for paragraph in PARAGRAPHS + HOSTILE:
        found = text.tokenize_document(paragraph)
        for before, after in zip(found, found[1:]):
            assert before.end == after.start  # whitespace after a sentence is its own
        for sentence in found:
            assert sentence.tokens and all(
                sentence.start <= t.start < t.end <= sentence.end for t in sentence.tokens)
        # Nothing but whitespace outside the sentences.
        covered = set().union(*(range(s.start, s.end) for s in found)) if found else set()
        assert all(c in sentences.WHITESPACE for i, c in enumerate(paragraph)
                   if i not in covered), paragraph
    assert text.tokenize_document(PARAGRAPHS[2])[0].words == ["U.S.", "officials", "met", "."]
    # Not split: one sentence, even blank.
    assert [s.words for s in text.tokenize_document("A. B. C.", split=False)] == [
        ["A.", "B.", "C", "."]]
    assert text.tokenize_document(" ", split=False) == [text.Sentence(0, 1, ())]


def test_ptb_words_write_tokens_as_the_treebank_does():
    surfaces = ['"', "Hi", '"', "\u2014", "(", '"', "ok", '"', ")", "\u2019s", "\u2026"]
    starts = [0, 1, 3, 5, 7, 8, 9, 11, 12, 13, 16]
    ends = [start + len(surface) for start, surface in zip(starts, surfaces)]
    assert text.ptb_words(surfaces, starts, ends) == [
        "``", "Hi", "''", "--", "-LRB-", "``", "ok", "''", "-RRB-", "'s", "..."]

"""EVALB-equivalent bracket scorer (Sekine & Collins), in Python.

The library of `python -m tetra_tf.evalb` (tetra_tf/evalb.py, whose docstring is the
program's --help).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import warnings
from typing import Any, Iterable, Sequence

# C's isspace() in the "C" locale, which is what EVALB splits on.
_C_SPACE = " \t\n\v\f\r"
_TOKEN_RE = re.compile(r"\([^ \t\n\v\f\r()]*|\)|[^ \t\n\v\f\r()]+")
_ATOI_RE = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
# Words of quote terminals that EVALB may re-insert (fix_quote).
_QUOTE_WORDS = frozenset(("'", '"', "/"))

STATUS_OK = 0
STATUS_ERROR = 1
STATUS_SKIP = 2

_TABLE_HEAD = (
    "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
    " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
    "============================================================================\n")
_RULE = "============================================================================\n"


class EvalbParamsWarning(UserWarning):
    """A parameter-file line EVALB would warn about (and otherwise ignore)."""


class TooManyErrors(Exception):
    """More than MAX_ERROR errors: EVALB stops here without a summary.

    Attributes:
      result: the partial result, up to (not including) the sentence that hit the limit.
    """

    def __init__(self, message: str, result: "EvalbResult"):
        super().__init__(message)
        self.result = result


@dataclasses.dataclass(frozen=True)
class EvalbParams:
    """EVALB's parameter-file settings (bare defaults are EVALB's built-in ones).

    Attributes:
      debug: DEBUG; 1 or more adds EVALB's per-sentence terminal/bracket dump to the table.
      max_error: MAX_ERROR; EVALB stops once more than this many errors occurred.
      cutoff_len: CUTOFF_LEN, the length bound of the second summary block.
      labeled: LABELED; False scores unlabeled brackets.
      delete_labels: DELETE_LABEL; preterminals with these labels are removed with their
        words, other brackets with these labels (after function tags are cut off) are
        ignored, their children kept.
      delete_labels_for_length: DELETE_LABEL_FOR_LENGTH; preterminals not counted in the
        sentence length (the length only decides the CUTOFF_LEN block).
      quote_labels: QUOTE_LABEL; preterminals over ' " or / that may be re-inserted when
        gold and test lengths differ because only one side deleted them.
      eq_labels: EQ_LABEL pairs, labels considered equal (both directions).
      eq_words: EQ_WORD pairs, words considered equal (both directions).
    """

    debug: int = 0
    max_error: int = 10
    cutoff_len: int = 40
    labeled: bool = True
    delete_labels: tuple[str, ...] = ()
    delete_labels_for_length: tuple[str, ...] = ()
    quote_labels: tuple[str, ...] = ()
    eq_labels: tuple[tuple[str, str], ...] = ()
    eq_words: tuple[tuple[str, str], ...] = ()


# The standard COLLINS.prm (Collins 1997 scoring).
COLLINS = EvalbParams(
    debug=0,
    max_error=10,
    cutoff_len=40,
    labeled=True,
    delete_labels=("TOP", "-NONE-", ",", ":", "``", "''", "."),
    delete_labels_for_length=("-NONE-",),
    eq_labels=(("ADVP", "PRT"),),
)


def _atoi(text: str) -> int:
    match = _ATOI_RE.match(text)
    return int(match.group(1)) if match else 0


def parse_params(text: str, source: str = "<params>") -> EvalbParams:
    """Parses the text of an EVALB parameter file, the way EVALB's set_param does.

    Settings start from EVALB's built-in defaults; DELETE_LABEL-like keys accumulate.
    Unknown keywords, empty values and EQ_* lines without two values raise an
    EvalbParamsWarning and are otherwise ignored, as EVALB does.
    """
    values: dict[str, Any] = dataclasses.asdict(EvalbParams())
    lists: dict[str, list] = {key: [] for key in (
        "delete_labels", "delete_labels_for_length", "quote_labels", "eq_labels", "eq_words")}
    for line_number, raw in enumerate(text.split("\n"), start=1):
        # EVALB trims trailing space (never the first character) and skips comments and
        # lines shorter than three characters.
        line = raw[:1] + raw[1:].rstrip(_C_SPACE)
        if line.startswith("#") or len(line) < 3:
            continue
        parts = re.split(r"[ \t\n\v\f\r]+", line, maxsplit=1)
        keyword, value = parts[0], parts[1] if len(parts) == 2 else ""
        if not value:
            warnings.warn(f"{source}:{line_number}: empty value for {keyword!r}",
                          EvalbParamsWarning, stacklevel=2)
        if keyword == "DEBUG":
            values["debug"] = _atoi(value)
        elif keyword == "MAX_ERROR":
            values["max_error"] = _atoi(value)
        elif keyword == "CUTOFF_LEN":
            values["cutoff_len"] = _atoi(value)
        elif keyword == "LABELED":
            values["labeled"] = _atoi(value) != 0
        elif keyword == "DELETE_LABEL":
            lists["delete_labels"].append(value)
        elif keyword == "DELETE_LABEL_FOR_LENGTH":
            lists["delete_labels_for_length"].append(value)
        elif keyword == "QUOTE_LABEL":
            lists["quote_labels"].append(value)
        elif keyword in ("EQ_LABEL", "EQ_WORD"):
            pair = value.split()
            if len(pair) != 2:
                warnings.warn(f"{source}:{line_number}: {keyword} requires two values",
                              EvalbParamsWarning, stacklevel=2)
                continue
            lists["eq_labels" if keyword == "EQ_LABEL" else "eq_words"].append(tuple(pair))
        else:
            warnings.warn(f"{source}:{line_number}: unknown keyword {keyword!r}",
                          EvalbParamsWarning, stacklevel=2)
    values.update({key: tuple(items) for key, items in lists.items()})
    return EvalbParams(**values)


def load_params(path: str) -> EvalbParams:
    """Reads an EVALB parameter (.prm) file; see parse_params. Raises OSError."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="surrogateescape")
    return parse_params(text, source=path)


@dataclasses.dataclass
class EvalbCounts:
    """EVALB's running totals for one summary block; figures are percentages as printed."""

    sentences: int = 0
    error_sentences: int = 0
    skip_sentences: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    matched_brackets: int = 0
    complete_matches: int = 0
    words: int = 0
    correct_tags: int = 0
    crossing: int = 0
    no_crossing_sentences: int = 0
    two_or_less_crossing_sentences: int = 0

    @property
    def valid_sentences(self) -> int:
        return self.sentences - self.error_sentences - self.skip_sentences

    @property
    def recall(self) -> float:
        return _percent(self.matched_brackets, self.gold_brackets)

    @property
    def precision(self) -> float:
        return _percent(self.matched_brackets, self.test_brackets)

    @property
    def fscore(self) -> float:
        recall, precision = self.recall, self.precision
        # EVALB prints nan when both are 0; 0 is the useful value here.
        return 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    @property
    def complete_match(self) -> float:
        return _percent(self.complete_matches, self.valid_sentences)

    @property
    def average_crossing(self) -> float:
        valid = self.valid_sentences
        return self.crossing / valid if valid > 0 else 0.0

    @property
    def no_crossing(self) -> float:
        return _percent(self.no_crossing_sentences, self.valid_sentences)

    @property
    def two_or_less_crossing(self) -> float:
        return _percent(self.two_or_less_crossing_sentences, self.valid_sentences)

    @property
    def tagging_accuracy(self) -> float:
        return _percent(self.correct_tags, self.words)

    def add(self, sentence: "SentenceResult") -> None:
        self.sentences += 1
        if sentence.status == STATUS_ERROR:
            self.error_sentences += 1
        elif sentence.status == STATUS_SKIP:
            self.skip_sentences += 1
        else:
            self.gold_brackets += sentence.gold_brackets
            self.test_brackets += sentence.test_brackets
            self.matched_brackets += sentence.matched_brackets
            if sentence.gold_brackets == sentence.test_brackets == sentence.matched_brackets:
                self.complete_matches += 1
            self.words += sentence.words
            self.crossing += sentence.crossing
            self.no_crossing_sentences += sentence.crossing == 0
            self.two_or_less_crossing_sentences += sentence.crossing <= 2
            self.correct_tags += sentence.correct_tags

    def block(self, title: str) -> str:
        """EVALB's summary block, e.g. title '-- All --'."""
        return (
            f"{title}\n"
            f"Number of sentence        = {self.sentences:6d}\n"
            f"Number of Error sentence  = {self.error_sentences:6d}\n"
            f"Number of Skip  sentence  = {self.skip_sentences:6d}\n"
            f"Number of Valid sentence  = {self.valid_sentences:6d}\n"
            f"Bracketing Recall         = {self.recall:6.2f}\n"
            f"Bracketing Precision      = {self.precision:6.2f}\n"
            f"Bracketing FMeasure       = {self.fscore:6.2f}\n"
            f"Complete match            = {self.complete_match:6.2f}\n"
            f"Average crossing          = {self.average_crossing:6.2f}\n"
            f"No crossing               = {self.no_crossing:6.2f}\n"
            f"2 or less crossing        = {self.two_or_less_crossing:6.2f}\n"
            f"Tagging accuracy          = {self.tagging_accuracy:6.2f}\n")


def _percent(numerator: int, denominator: int) -> float:
    return 100.0 * numerator / denominator if denominator > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class SentenceResult:
    """One row of EVALB's per-sentence table.

    Attributes:
      line: the line number (1-based) in both files.
      length: the gold length for the CUTOFF_LEN test (DELETE_LABEL_FOR_LENGTH excluded).
      status: 0 scored, 1 error, 2 skipped.
      matched_brackets, gold_brackets, test_brackets, crossing: bracket counts.
      words: scored gold words (after DELETE_LABEL); the gold word count on error/skip rows.
      correct_tags: words whose tag matches.
      debug_info: EVALB's DEBUG dump for this sentence, when params.debug >= 1.
    """

    line: int
    length: int
    status: int
    matched_brackets: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    debug_info: str | None = None

    @property
    def recall(self) -> float:
        return _percent(self.matched_brackets, self.gold_brackets)

    @property
    def precision(self) -> float:
        return _percent(self.matched_brackets, self.test_brackets)

    @property
    def tagging_accuracy(self) -> float:
        # Error and skip rows tag nothing.
        return _percent(self.correct_tags, self.words) if self.status == STATUS_OK else 0.0

    def row(self) -> str:
        """The table row, in EVALB's format."""
        return ("%4d  %3d    %d  %6.2f %6.2f   %3d    %3d  %3d    %3d   %4d  %4d   %6.2f\n" % (
            self.line, self.length, self.status, self.recall, self.precision,
            self.matched_brackets, self.gold_brackets, self.test_brackets, self.crossing,
            self.words, self.correct_tags, self.tagging_accuracy))


@dataclasses.dataclass
class EvalbResult:
    """The outcome of a scoring run.

    Attributes:
      counts: totals over all sentences (EVALB's "-- All --" block).
      cutoff_counts: totals over sentences of length <= cutoff_len ("-- len<=40 --").
      cutoff_len: the CUTOFF_LEN used.
      sentences: the per-sentence rows.
      messages: one-line descriptions of every error and skip, with line numbers.
      line_count_mismatch: True when the two inputs had different numbers of lines.
    """

    counts: EvalbCounts
    cutoff_counts: EvalbCounts
    cutoff_len: int
    sentences: list[SentenceResult]
    messages: list[str]
    line_count_mismatch: bool = False

    @property
    def recall(self) -> float:
        return self.counts.recall

    @property
    def precision(self) -> float:
        return self.counts.precision

    @property
    def fscore(self) -> float:
        return self.counts.fscore

    @property
    def complete_match(self) -> float:
        return self.counts.complete_match

    @property
    def average_crossing(self) -> float:
        return self.counts.average_crossing

    @property
    def tagging_accuracy(self) -> float:
        return self.counts.tagging_accuracy

    def summary(self) -> str:
        """EVALB's "=== Summary ===" section with both blocks."""
        return ("=== Summary ===\n\n" + self.counts.block("-- All --") + "\n"
                + self.cutoff_counts.block(f"-- len<={self.cutoff_len} --"))

    def table(self) -> str:
        """EVALB's per-sentence table: header, rows (with DEBUG dumps), totals line."""
        parts = [_TABLE_HEAD]
        for sentence in self.sentences:
            parts.append(sentence.row())
            if sentence.debug_info:
                parts.append(sentence.debug_info)
        parts.append(_RULE)
        c = self.counts
        if c.gold_brackets > 0 and c.test_brackets > 0:
            parts.append("                %6.2f %6.2f %6d %5d %5d  %5d" % (
                c.recall, c.precision, c.matched_brackets, c.gold_brackets, c.test_brackets,
                c.crossing))
        parts.append("  %5d %5d   %6.2f\n" % (c.words, c.correct_tags, c.tagging_accuracy))
        return "".join(parts)


class _Sentence:
    """One line as EVALB's read_line sees it (after DELETE_LABEL preterminal removal)."""

    __slots__ = ("words", "tags", "brackets", "length", "quotes", "error", "blank")

    def __init__(self):
        self.words: list[str] = []
        self.tags: list[str] = []
        self.brackets: list[list] = []  # [start, end, label]; end is -1 while open
        self.length = 0
        self.quotes: list[list] = []  # [index, word, label, brackets_before, open_brackets]
        self.error: str | None = None
        self.blank = False


class _Scorer:
    """EVALB's calc_result / individual_result loop over sentence pairs."""

    def __init__(self, params: EvalbParams):
        self.params = params
        self.delete_labels = frozenset(params.delete_labels)
        self.length_delete_labels = frozenset(params.delete_labels_for_length)
        self.quote_labels = frozenset(params.quote_labels)
        self.eq_labels = _symmetric(params.eq_labels)
        self.eq_words = _symmetric(params.eq_words)
        # Non-terminals are deleted when their label equals (EQ_LABEL included) a
        # DELETE_LABEL entry.
        self.deleted_nonterminals = self.delete_labels | {
            a for a, b in self.eq_labels if b in self.delete_labels}
        self.short_labels: dict[str, str] = {}
        self.result = EvalbResult(EvalbCounts(), EvalbCounts(), params.cutoff_len, [], [])
        self.error_count = 0

    # -- reading ------------------------------------------------------------------------

    def read(self, text: str) -> _Sentence:
        """Reads one tree line: terminals, brackets, length and quote terminals."""
        sentence = _Sentence()
        tokens = _TOKEN_RE.findall(text)
        sentence.blank = not tokens
        words, tags, brackets, quotes = (sentence.words, sentence.tags, sentence.brackets,
                                         sentence.quotes)
        stack: list[int] = []
        length = 0
        error = None
        i, n = 0, len(tokens)
        while i < n:
            token = tokens[i]
            if token[0] == "(":
                label = token[1:]
                if i + 1 < n and tokens[i + 1][0] not in "()":
                    word = tokens[i + 1]
                    if i + 2 < n and tokens[i + 2] == ")":
                        if label not in self.length_delete_labels:
                            length += 1
                        if label in self.quote_labels and word in _QUOTE_WORDS:
                            quotes.append([len(words), word, label, len(brackets), stack[:]])
                        if label not in self.delete_labels:
                            words.append(word)
                            tags.append(label)
                        i += 3
                        continue
                    if error is None:
                        error = f"more than two elements in the bracket ({label} {word} ..."
                stack.append(len(brackets))
                brackets.append([len(words), -1, label])
            elif token == ")":
                if stack:
                    brackets[stack.pop()][1] = len(words)
                elif error is None:
                    error = "unbalanced brackets (too many close brackets)"
            elif error is None:
                error = f"word {token!r} outside a bracket"
            i += 1
        if stack and error is None:
            error = f"unbalanced brackets ({len(stack)} not closed)"
        sentence.length = length
        sentence.error = error
        return sentence

    # -- scoring ------------------------------------------------------------------------

    def _error(self, line: int, message: str) -> None:
        self.result.messages.append(f"line {line}: {message}")
        # EVALB: `if(Error_count++>Max_error) exit(1);`
        stop = self.error_count > self.params.max_error
        self.error_count += 1
        if stop:
            raise TooManyErrors(
                f"stopped at line {line}: more than MAX_ERROR={self.params.max_error} errors "
                "(EVALB gives up here; a parameter file with a larger MAX_ERROR, e.g. nk.prm, "
                "scores everything)", self.result)

    def _record(self, sentence: SentenceResult) -> None:
        result = self.result
        result.sentences.append(sentence)
        result.counts.add(sentence)
        if sentence.length <= self.params.cutoff_len:
            result.cutoff_counts.add(sentence)

    def _short_label(self, label: str) -> str:
        # EVALB's modify_label: cut the label at its first '-' or '='.
        short = self.short_labels.get(label)
        if short is None:
            short = re.split("[-=]", label, maxsplit=1)[0]
            self.short_labels[label] = short
        return short

    def _label_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_labels

    def score(self, line: int, gold_text: str, test_text: str) -> None:
        """Scores one line pair and adds it to the totals (EVALB's calc_result)."""
        gold = self.read(gold_text)
        test = self.read(test_text)
        status = STATUS_OK
        if gold.error:
            self._error(line, f"cannot read the gold tree: {gold.error}")
            status = STATUS_ERROR
        if test.error:
            self._error(line, f"cannot read the test tree: {test.error}")
            status = STATUS_ERROR

        def failed(status: int) -> None:
            debug = self._debug_info(gold, test, None, None) if self.params.debug >= 1 else None
            self._record(SentenceResult(line, gold.length, status, words=len(gold.words),
                                        debug_info=debug))

        if not test.words:
            if status == STATUS_OK:
                what = "blank" if test.blank else "without words (after DELETE_LABEL)"
                self.result.messages.append(f"line {line}: test tree is {what}; skipped")
            failed(STATUS_SKIP)
            return
        if status != STATUS_OK:
            failed(status)
            return
        if len(gold.words) != len(test.words):
            if self.quote_labels:
                self._fix_quote(gold, test)
            if len(gold.words) != len(test.words):
                blank = " (blank line)" if gold.blank else ""
                self._error(line, f"length mismatch: gold has {len(gold.words)} words{blank}, "
                                  f"test has {len(test.words)}")
                failed(STATUS_ERROR)
                return
        eq_words = self.eq_words
        for index, (gold_word, test_word) in enumerate(zip(gold.words, test.words)):
            if gold_word != test_word and (gold_word, test_word) not in eq_words:
                self._error(line, f"words differ at word {index + 1}: gold {gold_word!r}, "
                                  f"test {test_word!r}")
                failed(STATUS_ERROR)
                return

        gold_results, gold_labels = self._massage(gold.brackets)
        test_results, test_labels = self._massage(test.brackets)
        gold_kept = [i for i, r in enumerate(gold_results) if r == 0]
        test_kept = [j for j, r in enumerate(test_results) if r == 0]

        # Matching: each gold bracket takes the first unmatched test bracket with the same
        # span (and an equal label), so duplicates are matched as a multiset. Test brackets
        # are queued per (span, label) in order; the ones taken are always a queue's
        # first, so a pointer per queue finds the next one: linear, however many brackets
        # share a span (a 100,000-deep unary chain has 100,000 on one span).
        labeled = self.params.labeled
        queues: dict[tuple, list] = {}
        for j in test_kept:
            start, end, _ = test.brackets[j]
            key = (start, end, test_labels[j]) if labeled else (start, end)
            queue = queues.get(key)
            if queue is None:
                queues[key] = [0, j]  # [index of the next unmatched entry − 1, indices...]
            else:
                queue.append(j)
        equal_labels: dict[str, tuple[str, ...]] = {}
        matched = 0
        for i in gold_kept:
            start, end, _ = gold.brackets[i]
            if labeled:
                label = gold_labels[i]
                candidates = equal_labels.get(label)
                if candidates is None:
                    candidates = (label,) + tuple(b for a, b in self.eq_labels if a == label)
                    equal_labels[label] = candidates
                keys = [(start, end, candidate) for candidate in candidates]
            else:
                keys = [(start, end)]
            best = None  # the queue whose next unmatched bracket comes first
            for key in keys:
                queue = queues.get(key)
                if queue is None or queue[0] + 1 >= len(queue):
                    continue
                if best is None or queue[queue[0] + 1] < best[best[0] + 1]:
                    best = queue
            if best is not None:
                best[0] += 1
                test_results[best[best[0]]] = gold_results[i] = 1
                matched += 1

        crossing = _count_crossing(
            [(gold.brackets[i][0], gold.brackets[i][1]) for i in gold_kept],
            [(test.brackets[j][0], test.brackets[j][1]) for j in test_kept],
            len(gold.words))

        tag_results = [a == b or (a, b) in self.eq_labels for a, b in zip(gold.tags, test.tags)]
        debug = None
        if self.params.debug >= 1:
            debug = self._debug_info(gold, test, (gold_results, gold_labels, test_results,
                                                  test_labels), tag_results)
        self._record(SentenceResult(
            line, gold.length, STATUS_OK, matched_brackets=matched,
            gold_brackets=len(gold_kept), test_brackets=len(test_kept), crossing=crossing,
            words=len(gold.words), correct_tags=sum(tag_results), debug_info=debug))

    def _massage(self, brackets: list[list]) -> tuple[list[int], list[str]]:
        """EVALB's massage_data: result 5 (deleted) or 0 per bracket, and the cut labels."""
        results, labels = [], []
        for start, end, label in brackets:
            if start == end:  # dominates no (kept) word
                results.append(5)
                labels.append(label)
                continue
            short = self._short_label(label)
            results.append(5 if short in self.deleted_nonterminals else 0)
            labels.append(short)
        return results, labels

    def _fix_quote(self, gold: _Sentence, test: _Sentence) -> None:
        """EVALB's fix_quote: re-inserts a quote terminal deleted on one side only."""
        deleted = self.delete_labels
        for i in range(len(test.quotes)):
            index = test.quotes[i][0]
            for j in range(len(gold.quotes)):
                gold_quote, test_quote = gold.quotes[j], test.quotes[i]
                if gold_quote[0] != index or gold_quote[2] == test_quote[2]:
                    continue
                if gold_quote[2] in deleted and test_quote[2] not in deleted:
                    _reinsert(gold_quote, gold)
                    for quote in gold.quotes[j:]:
                        quote[0] += 1
                elif test_quote[2] in deleted and gold_quote[2] not in deleted:
                    _reinsert(test_quote, test)
                    for quote in test.quotes[i:]:
                        quote[0] += 1

    def _debug_info(self, gold: _Sentence, test: _Sentence, brackets, tag_results) -> str:
        """EVALB's dsp_info dump (DEBUG >= 1); result 9 marks what was never compared."""
        lines = ["-<1>---(wn1=%3d, bn1=%3d)-           -<2>---(wn2=%3d, bn2=%3d)-\n" % (
            len(gold.words), len(gold.brackets), len(test.words), len(test.brackets))]
        for i in range(max(len(gold.words), len(test.words))):
            tag_result = 9 if tag_results is None or i >= len(tag_results) else int(
                tag_results[i])
            left = right = ""
            if i < len(gold.words):
                left = "%3d : %d : %-6s  %-16s      " % (i, tag_result, gold.tags[i],
                                                       gold.words[i])
            else:
                left = " " * 40
            if i < len(test.words):
                right = "%3d : %d : %-6s  %-16s" % (i, tag_result, test.tags[i], test.words[i])
            lines.append(left + right + "\n")
        lines.append("\n")
        if brackets is None:
            gold_results, gold_labels = [9] * len(gold.brackets), [b[2] for b in gold.brackets]
            test_results, test_labels = [9] * len(test.brackets), [b[2] for b in test.brackets]
        else:
            gold_results, gold_labels, test_results, test_labels = brackets
        for i in range(max(len(gold.brackets), len(test.brackets))):
            if i < len(gold.brackets):
                b = gold.brackets[i]
                left = "%3d : %d : %3d  %3d  %-6s      " % (i, gold_results[i], b[0], b[1],
                                                         gold_labels[i])
            else:
                left = " " * 32
            right = ""
            if i < len(test.brackets):
                b = test.brackets[i]
                right = "%3d : %d : %3d  %3d  %-6s" % (i, test_results[i], b[0], b[1],
                                                      test_labels[i])
            lines.append(left + right + "\n")
        lines.append("\n========\n")
        return "".join(lines)


def _count_crossing(gold_spans: list[tuple[int, int]], test_spans: list[tuple[int, int]],
                    num_words: int) -> int:
    """Test brackets (s, e) that cross a gold one: a < s < b < e or s < a < e < b.

    EVALB compares every pair; here each test bracket asks a range-maximum table: is there a
    gold bracket starting strictly inside (s, e) that ends after e? The first case is the
    same question with positions mirrored (p → num_words − p). O((G + T) log N) in all.
    """
    def crossing_from_inside(golds, tests, size) -> list[bool]:
        # furthest[p]: the largest end of a gold bracket starting at p (−1: none).
        furthest = [-1] * (size + 1)
        for a, b in golds:
            if b > furthest[a]:
                furthest[a] = b
        table = [furthest]  # table[k][p] = max of furthest[p : p + 2**k]
        while 2 ** len(table) <= size + 1:
            previous, half = table[-1], 2 ** (len(table) - 1)
            table.append([max(previous[p], previous[p + half])
                          for p in range(len(previous) - half)])
        result = []
        for s, e in tests:
            lo, hi = s + 1, e - 1  # starts strictly inside
            if lo > hi:
                result.append(False)
                continue
            k = (hi - lo + 1).bit_length() - 1
            result.append(max(table[k][lo], table[k][hi - 2 ** k + 1]) > e)
        return result

    if len(gold_spans) * len(test_spans) <= 4096:  # ordinary sentences: EVALB's loop
        crossing = 0
        for s, e in test_spans:
            if e - s < 2:
                continue
            for a, b in gold_spans:
                if a < s < b < e or s < a < e < b:
                    crossing += 1
                    break
        return crossing
    size = max([num_words] + [e for _, e in gold_spans] + [e for _, e in test_spans])
    inside = crossing_from_inside(gold_spans, test_spans, size)
    mirrored = crossing_from_inside([(size - b, size - a) for a, b in gold_spans],
                                    [(size - e, size - s) for s, e in test_spans], size)
    return sum(1 for s, e, x, y in zip((s for s, _ in test_spans), (e for _, e in test_spans),
                                       inside, mirrored) if e - s >= 2 and (x or y))


def _reinsert(quote: list, sentence: _Sentence) -> None:
    index, word, label, brackets_before, open_brackets = quote
    sentence.words.insert(index, word)
    sentence.tags.insert(index, label)
    for bracket in sentence.brackets[brackets_before:]:
        bracket[0] += 1
        bracket[1] += 1
    for k in open_brackets:
        sentence.brackets[k][1] += 1


def _symmetric(pairs: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    return frozenset([(a, b) for a, b in pairs] + [(b, a) for a, b in pairs])


def evaluate_lines(gold_lines: Sequence[str], pred_lines: Sequence[str],
                   params: EvalbParams = COLLINS) -> EvalbResult:
    """Scores tree lines exactly as EVALB scores two files.

    Lines are paired by position. If PRED has fewer lines, scoring stops at its end (the
    remaining gold lines are not counted); extra PRED lines are ignored. Both cases add a
    message and set result.line_count_mismatch.

    Raises:
      TooManyErrors: more than params.max_error errors (EVALB exits there).
    """
    scorer = _Scorer(params)
    for index, gold_line in enumerate(gold_lines):
        line = index + 1
        if index >= len(pred_lines):
            scorer.result.line_count_mismatch = True
            scorer._error(line, f"PRED has fewer lines than GOLD ({len(pred_lines)} < "
                                f"{len(gold_lines)}); lines from {line} on are not scored")
            break
        scorer.score(line, gold_line, pred_lines[index])
    else:
        if len(pred_lines) > len(gold_lines):
            scorer.result.line_count_mismatch = True
            scorer._error(len(gold_lines) + 1,
                          f"PRED has more lines than GOLD ({len(pred_lines)} > "
                          f"{len(gold_lines)}); the extra lines are ignored")
    return scorer.result


def tree_to_line(tree: Any) -> str:
    """An nltk.Tree (or a tree string, or None for no parse) as a one-line bracketing."""
    if tree is None:
        return ""
    if isinstance(tree, str):
        return tree
    from tetra_tf.trees.treebank import tree_to_line as one_line  # noqa: PLC0415

    return one_line(tree)


def evaluate_trees(gold: Sequence[Any], pred: Sequence[Any],
                   params: EvalbParams = COLLINS) -> EvalbResult:
    """Scores predicted trees against gold trees, as EVALB would score them as files.

    Args:
      gold: nltk.Tree objects or tree strings.
      pred: the same, one per gold tree; None (no parse) counts as a skipped sentence.
      params: EVALB settings; COLLINS.prm by default.

    Returns:
      An EvalbResult; result.fscore etc. are percentages, as EVALB prints them.

    Raises:
      ValueError: gold and pred differ in length.
      TooManyErrors: more than params.max_error error sentences.
    """
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold trees but {len(pred)} predicted trees")
    return evaluate_lines([tree_to_line(t) for t in gold], [tree_to_line(t) for t in pred],
                          params)


def read_lines(path: str) -> list[str]:
    """Reads a tree file as EVALB does: split on '\\n' only (other space is in-line)."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.decode("utf-8", errors="surrogateescape").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def evaluate_files(gold_path: str, pred_path: str,
                   params: EvalbParams = COLLINS) -> EvalbResult:
    """Scores two tree files; see evaluate_lines. Raises OSError for unreadable files."""
    return evaluate_lines(read_lines(gold_path), read_lines(pred_path), params)


# -- command line ---------------------------------------------------------------------

# EVALB's own outcomes, besides the 0/1/2 of every tetra-tf program (tetra_tf/cli.py).
EXIT_TOO_MANY_ERRORS = 3
EXIT_LINE_COUNT_MISMATCH = 4


def _main(argv: list[str]) -> int:
    from absl import flags

    from tetra_tf.cli import UsageError

    flag_values = flags.FLAGS
    args = argv[1:]
    if len(args) != 2:
        raise UsageError(f"expected GOLD and PRED files, got {len(args)} argument(s) "
                         "(see --help)")
    gold_path, pred_path = args
    params = COLLINS
    if flag_values.params:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", EvalbParamsWarning)
                params = load_params(flag_values.params)
        except OSError as e:
            raise UsageError(f"cannot read parameter file {flag_values.params}: "
                             f"{e.strerror or e}") from None
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
    lines = []
    for what, path in (("gold", gold_path), ("pred", pred_path)):
        try:
            lines.append(read_lines(path))
        except OSError as e:
            raise UsageError(f"cannot read {what} file {path}: {e.strerror or e}") from None
    try:
        result = evaluate_lines(lines[0], lines[1], params)
    except TooManyErrors as e:
        for message in e.result.messages:
            print(message, file=sys.stderr)
        if flag_values.per_sentence or params.debug >= 1:
            sys.stdout.write(_TABLE_HEAD + "".join(
                s.row() + (s.debug_info or "") for s in e.result.sentences))
        print(f"error: {e}", file=sys.stderr)
        return EXIT_TOO_MANY_ERRORS
    for message in result.messages:
        print(message, file=sys.stderr)
    if flag_values.per_sentence or params.debug >= 1:
        sys.stdout.write(result.table())
    sys.stdout.write(result.summary())
    sys.stdout.flush()
    return EXIT_LINE_COUNT_MISMATCH if result.line_count_mismatch else 0


def _run_cli() -> None:
    from absl import flags

    from tetra_tf import cli

    flags.DEFINE_string("params", None, "EVALB parameter file (.prm); default: the settings "
                        "of the standard COLLINS.prm.")
    flags.DEFINE_bool("per_sentence", False, "Also print EVALB's per-sentence table.")
    cli.adopt_program_flags(__name__)

    cli.run(_main, takes_arguments=True)



def run_program() -> None:
    """Runs `python -m tetra_tf.evalb` (tetra_tf/evalb.py)."""
    _run_cli()

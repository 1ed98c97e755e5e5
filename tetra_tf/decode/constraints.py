"""What a parse must respect: forced spans, forbidden spans and given parts of speech.

A user who already knows part of a sentence's structure gives it as `Constraints`:

* **forced** spans must be constituents of the tree: (first word, last word), or
  (first word, last word, label) when the constituent must carry that label (one of a
  unary chain's labels is enough: ``VP`` is on the span of ``(S (VP ...))``);
* **forbidden** spans must not be constituents (an unlabelled binarization node over
  them is no constituent, and is allowed);
* **pos_tags** replace the predicted parts of speech of the words that have one. The
  model predicts parts of speech apart from the tree, so they change the leaves' tags in
  the tree, not its brackets.

Words are numbered from 0 and spans include both ends, as in `parse_record.Constituent`; a
one-word span is a phrase over that word (``(NP (PRP It))``), not its part of speech. The
root (``TOP``) is not a constituent: forcing (0, n − 1) asks for a labelled node over the
whole sentence under it, and forbidding that span forbids such a node.

The decoder takes forced and forbidden spans as span rules of the chart decoder
(`tetra_tf.decode.chart_decoding`): exact, O(n³) per sentence, on request only. `Constraints.check`
refuses a malformed set (``bad_constraints``) before the model runs; a well-formed set that
no tree satisfies (a forced label the model never puts where the span must go, say) is
refused by the decoder (``unsatisfiable``), never answered with a tree that breaks it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from tetra_tf.contract import export_format, sentences
from tetra_tf.contract.sentences import SentenceError


@dataclasses.dataclass(frozen=True)
class Span:
    """A span of words (0-based, both ends included), and for a forced span the label it
    must carry (None: any)."""

    start: int
    end: int
    label: str | None = None


@dataclasses.dataclass(frozen=True)
class Constraints:
    """Constraints on one sentence's parse.

    Attributes:
      forced: spans that must be constituents: `Span`s, or (start, end) / (start, end,
        label) tuples.
      forbidden: spans that must not be constituents: `Span`s or (start, end) tuples.
      pos_tags: None, or one entry per word: its part of speech, or None to keep the
        predicted one.

    Example:
        ```python
        Constraints(forced=[(0, 1, "NP"), (2, 4)], forbidden=[(3, 4)])
        ```
    """

    forced: Sequence[Any] = ()
    forbidden: Sequence[Any] = ()
    pos_tags: Sequence[str | None] | None = None

    def __post_init__(self):
        object.__setattr__(self, "forced", tuple(_span(s, "forced", True) for s in self.forced))
        object.__setattr__(self, "forbidden",
                           tuple(_span(s, "forbidden", False) for s in self.forbidden))
        if self.pos_tags is not None:
            object.__setattr__(self, "pos_tags", tuple(self.pos_tags))

    def check(self, num_words: int, labels: Sequence[str], pos_tags: Sequence[str]) -> None:
        """Checks the constraints against a sentence and a model.

        Args:
          num_words: the sentence's words.
          labels: the model's phrase labels (a forced label must be one of them).
          pos_tags: the model's parts of speech (a given one must be one of them).

        Raises:
          SentenceError: ``bad_constraints``, with what is wrong: a span outside the
            sentence or backwards, an unknown label or part of speech, two forced spans
            that cross, a span both forced and forbidden, pos_tags of the wrong length.
        """
        for kind, spans in (("forced", self.forced), ("forbidden", self.forbidden)):
            for span in spans:
                if not 0 <= span.start <= span.end < num_words:
                    _refuse(f"{kind} span ({span.start}, {span.end}) is not within words "
                            f"0..{num_words - 1}")
        known = set(labels)
        for span in self.forced:
            if span.label is not None and span.label not in known:
                _refuse(f"forced span ({span.start}, {span.end}) has label {span.label!r}, "
                        f"which the model does not know")
        # Outermost first: each span must nest in the innermost open one it starts in.
        open_spans: list[tuple[int, int]] = []
        for start, end in sorted({(s.start, s.end) for s in self.forced},
                                 key=lambda span: (span[0], -span[1])):
            while open_spans and open_spans[-1][1] < start:
                open_spans.pop()
            if open_spans and end > open_spans[-1][1]:
                outer = open_spans[-1]
                _refuse(f"forced spans ({outer[0]}, {outer[1]}) and ({start}, {end}) cross: "
                        f"no tree holds both")
            open_spans.append((start, end))
        both = {(s.start, s.end) for s in self.forced} & {(s.start, s.end)
                                                         for s in self.forbidden}
        if both:
            start, end = min(both)
            _refuse(f"span ({start}, {end}) is both forced and forbidden")
        if self.pos_tags is not None:
            if len(self.pos_tags) != num_words:
                _refuse(f"pos_tags has {len(self.pos_tags)} entries for {num_words} words")
            known_tags = set(pos_tags)
            for index, tag in enumerate(self.pos_tags):
                if tag is not None and tag not in known_tags:
                    _refuse(f"word {index}: part of speech {tag!r} is not one the model "
                            f"knows")

    def is_empty(self) -> bool:
        """Whether the constraints restrict nothing."""
        return (not self.forced and not self.forbidden
                and (self.pos_tags is None or all(t is None for t in self.pos_tags)))


def _span(value: Any, kind: str, labelled: bool) -> Span:
    """A Span from a Span or a tuple; SentenceError (bad_constraints) for anything else."""
    if isinstance(value, Span):
        span = value
    elif isinstance(value, (tuple, list)) and len(value) in ((2, 3) if labelled else (2,)):
        span = Span(*value)
    else:
        shapes = "(start, end) or (start, end, label)" if labelled else "(start, end)"
        _refuse(f"a {kind} span must be {shapes}, got {value!r}")
    if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
               for x in (span.start, span.end)):
        _refuse(f"a {kind} span's start and end must be integers, got {span!r}")
    if span.label is not None and (not labelled or not isinstance(span.label, str)
                                   or not span.label):
        _refuse(f"a {kind} span's label must be a non-empty string"
                if labelled else "a forbidden span has no label")
    return Span(int(span.start), int(span.end), span.label)


def _refuse(detail: str):
    raise SentenceError(sentences.BAD_CONSTRAINTS, detail)


# --------------------------------------------------------------------------------------
# The graph's side: constraint tensors → the chart decoder's span rules


def as_inputs(constraints: Sequence[Constraints | None]) -> dict[str, np.ndarray]:
    """The constrained signature's constraint inputs for a batch, padded (None: none).

    Every row gets at least one entry per input (padding), so that no input is empty.
    """
    rows = [c or Constraints() for c in constraints]
    forced = max([len(c.forced) for c in rows] + [1])
    forbidden = max([len(c.forbidden) for c in rows] + [1])
    words = max([len(c.pos_tags or ()) for c in rows] + [1])
    forced_spans = -np.ones((len(rows), forced, 2), np.int32)
    forced_labels = np.full((len(rows), forced), b"", object)
    forbidden_spans = -np.ones((len(rows), forbidden, 2), np.int32)
    given_pos_tags = np.full((len(rows), words), b"", object)
    for row, c in enumerate(rows):
        for i, span in enumerate(c.forced):
            forced_spans[row, i] = span.start, span.end
            forced_labels[row, i] = (span.label or "").encode("utf-8")
        for i, span in enumerate(c.forbidden):
            forbidden_spans[row, i] = span.start, span.end
        for i, tag in enumerate(c.pos_tags or ()):
            given_pos_tags[row, i] = (tag or "").encode("utf-8")
    return dict(zip(export_format.CONSTRAINT_INPUTS,
                    (forced_spans, forced_labels, forbidden_spans, given_pos_tags)))


class GraphRules:
    """Turns constraint tensors into `chart_decoding.SpanRules`, in-graph.

    Args:
      leaf_chains, internal_chains: per tag id, the labels its chain holds (top first;
        [] for an unlabelled tag).
    """

    def __init__(self, leaf_chains: Sequence[Sequence[str]],
                 internal_chains: Sequence[Sequence[str]]):
        self.labels = sorted({label for chain in list(leaf_chains) + list(internal_chains)
                              for label in chain})
        index = {label: i for i, label in enumerate(self.labels)}

        def holds(chains):
            table = np.zeros((len(chains), len(self.labels) + 1), bool)
            for tag, chain in enumerate(chains):
                table[tag, [index[label] for label in chain]] = True
                table[tag, -1] = bool(chain)  # the last column: "any label"
            return table

        self._leaf_holds = holds(leaf_chains)
        self._internal_holds = holds(internal_chains)

    @staticmethod
    def shape_checks(batch_size, forced_spans, forced_labels, forbidden_spans,
                     given_pos_tags) -> list:
        """Assertions that every constraint input has a row per sentence and the forced
        labels one entry per forced span: InvalidArgumentError "bad_constraints: ..."
        otherwise (a row broadcast to every sentence would constrain them all)."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        checks = [tf.debugging.Assert(tf.equal(tf.shape(x)[0], batch_size), [
            f"{sentences.BAD_CONSTRAINTS}: {name} must have a row per sentence"])
            for name, x in zip(export_format.CONSTRAINT_INPUTS, (
                forced_spans, forced_labels, forbidden_spans, given_pos_tags))]
        checks.append(tf.debugging.Assert(
            tf.reduce_all(tf.equal(tf.shape(forced_labels), tf.shape(forced_spans)[:2])),
            [f"{sentences.BAD_CONSTRAINTS}: {export_format.FORCED_LABELS_INPUT} must have an "
             f"entry per span of {export_format.FORCED_SPANS_INPUT}"]))
        return checks

    def checks(self, forced_spans, forced_labels, forbidden_spans, lengths) -> list:
        """Assertions that every span lies in its sentence (or is padding) and every forced
        label is known: InvalidArgumentError "bad_constraints: ..." otherwise."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        checks = []
        for name, spans in ((export_format.FORCED_SPANS_INPUT, forced_spans),
                            (export_format.FORBIDDEN_SPANS_INPUT, forbidden_spans)):
            first, last = spans[..., 0], spans[..., 1]
            padding = tf.equal(first, -1) & tf.equal(last, -1)
            inside = (first >= 0) & (first <= last) & (last < lengths[:, None])
            checks.append(tf.debugging.Assert(
                tf.reduce_all(padding | inside),
                [f"{sentences.BAD_CONSTRAINTS}: a span of {name} is not within the words "
                 f"of its sentence (first, last; -1, -1 pads)"]))
        known = tf.reduce_any(tf.equal(forced_labels[..., None],
                                       tf.constant(self.labels + [""], tf.string)), axis=-1)
        checks.append(tf.debugging.Assert(
            tf.reduce_all(known), [f"{sentences.BAD_CONSTRAINTS}: a forced label is not one "
                                   f"the model knows"]))
        return checks

    def __call__(self, forced_spans, forced_labels, forbidden_spans):
        """SpanRules: forced spans as bracket rules allowing the tags that hold their label
        (any label for ""), forbidden spans as rules allowing the unlabelled tags."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        from tetra_tf.decode import chart_decoding  # pylint: disable=import-outside-toplevel

        label_ids = tf.argmax(tf.cast(tf.equal(
            forced_labels[..., None], tf.constant(self.labels, tf.string)), tf.int32),
            axis=-1, output_type=tf.int32)
        any_label = tf.equal(forced_labels, "")
        column = tf.where(any_label, len(self.labels), label_ids)  # [B, F]

        def allowed(holds):
            holds = tf.constant(holds)
            forced = tf.transpose(tf.gather(holds, column, axis=1), [1, 2, 0])  # [B, F, V]
            labelled = holds[:, -1]
            forbidden = tf.broadcast_to(~labelled, tf.concat(
                [tf.shape(forbidden_spans)[:2], tf.shape(labelled)], 0))
            return tf.concat([forced, forbidden], axis=1)

        starts = tf.concat([forced_spans[..., 0], forbidden_spans[..., 0]], axis=1)
        ends = tf.concat([forced_spans[..., 1], forbidden_spans[..., 1]], axis=1)
        brackets = tf.concat([tf.ones_like(forced_spans[..., 0], tf.bool),
                              tf.zeros_like(forbidden_spans[..., 0], tf.bool)], axis=1)
        return chart_decoding.SpanRules(starts, ends, allowed(self._leaf_holds),
                                        allowed(self._internal_holds), brackets)

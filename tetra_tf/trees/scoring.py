"""How the project scores a parser against gold trees: what `train` reports on dev,
`train --evaluate` and tools/eval_export.py print, and the model card carries.

F1 is EVALB's with COLLINS.prm, on trees whose preterminals carry the gold POS tags (the
standard for WSJ parsing results), and also with the parser's own POS tags; each sentence
is scored (COLLINS.prm's MAX_ERROR would stop after 10 length errors, which predicted POS
on punctuation causes).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import nltk

from tetra_tf.trees import evalb, treebank



def scoring_params(num_sentences: int) -> evalb.EvalbParams:
    """COLLINS.prm, but scoring every one of num_sentences sentences."""
    return dataclasses.replace(evalb.COLLINS, max_error=num_sentences + 1)


@dataclasses.dataclass
class ParseScores:
    """Scores of predicted trees against gold trees (percentages)."""

    sentences: int
    f1: float
    recall: float
    precision: float
    exact_match: float
    f1_predicted_pos: float
    error_sentences_predicted_pos: int
    pos_accuracy: float
    # The predicted trees with the gold POS tags, one line each, as scored for `f1`.
    with_gold_pos: list[str] = dataclasses.field(repr=False, default_factory=list)
    # The predicted trees as they are, one line each, as scored for `f1_predicted_pos`.
    predicted_lines: list[str] = dataclasses.field(repr=False, default_factory=list)
    # EVALB's full results behind `f1` and `f1_predicted_pos`.
    evalb_gold_pos: evalb.EvalbResult | None = dataclasses.field(repr=False, default=None)
    evalb_predicted_pos: evalb.EvalbResult | None = dataclasses.field(repr=False, default=None)

    def to_dict(self) -> dict:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.repr}


def _tree(tree: nltk.Tree | str) -> nltk.Tree:
    return treebank.parse_tree(tree) if isinstance(tree, str) else tree


def score_parses(gold: Sequence[nltk.Tree | str],
                 predicted: Sequence[nltk.Tree | str]) -> ParseScores:
    """Scores predicted trees (with the parser's POS tags) against the gold trees.

    Args:
      gold: gold trees (nltk.Tree or one-line bracketings), one per sentence.
      predicted: the parser's trees for the same sentences, in the same order.

    Raises:
      ValueError: if the two differ in length, or a predicted tree has other words.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold trees but {len(predicted)} predicted trees")
    gold_lines, predicted_lines, with_gold_pos = [], [], []
    correct = total = 0
    for gold_tree, predicted_tree in zip(gold, predicted):
        gold_tree, predicted_tree = _tree(gold_tree), _tree(predicted_tree)
        gold_tags = [pos for _, pos in gold_tree.pos()]
        correct += sum(p == g for (_, p), g in zip(predicted_tree.pos(), gold_tags))
        total += len(gold_tags)
        gold_lines.append(evalb.tree_to_line(gold_tree))
        predicted_lines.append(evalb.tree_to_line(predicted_tree))
        with_gold_pos.append(evalb.tree_to_line(treebank.with_pos_tags(predicted_tree, gold_tags)))
    params = scoring_params(len(gold_lines))
    standard = evalb.evaluate_lines(gold_lines, with_gold_pos, params)
    own_pos = evalb.evaluate_lines(gold_lines, predicted_lines, params)
    return ParseScores(
        sentences=len(gold_lines), f1=standard.fscore, recall=standard.recall,
        precision=standard.precision, exact_match=standard.complete_match,
        f1_predicted_pos=own_pos.fscore,
        error_sentences_predicted_pos=own_pos.counts.error_sentences,
        pos_accuracy=100.0 * correct / max(total, 1), with_gold_pos=with_gold_pos,
        predicted_lines=predicted_lines, evalb_gold_pos=standard, evalb_predicted_pos=own_pos)

"""Tests for tetra_tf/contract/parse_record.py: the result types of a parse, their JSON object, and
the names Beam's records and Spark's columns share with it."""

import json

import pytest

from conftest import run_python
from tetra_tf.contract import parse_record, sentences
from tetra_tf.contract.parse_record import Constituent, ParseResult

TREE = "(TOP (S (NP (DT a)) (VP (VB b))))"


def _result(**fields) -> ParseResult:
    return ParseResult(TREE, -0.5, ["DT", "VB"], ["l", "r"], ["i"], words=("a", "b"),
                       **fields)


def test_a_plain_parse():
    assert json.loads(_result().to_json()) == {
        "words": ["a", "b"], "pos_tags": ["DT", "VB"], "tree": TREE, "score": -0.5}


def test_marginals_spans_and_k_best_are_spelled_out():
    result = _result(tree_probability=0.25, constituent_marginals=(0.5, 0.75, 0.125),
                     span_marginals=(Constituent("NP", 0, 0, 0.75),),
                     k_best=((TREE, -0.5), ("(TOP (X (DT a) (VB b)))", -2.0)))
    record = json.loads(result.to_json())
    assert record["tree_probability"] == 0.25
    assert record["constituent_marginals"] == [0.5, 0.75, 0.125]
    assert record["constituents"] == [
        {"label": "S", "start": 0, "end": 1, "probability": 0.5},
        {"label": "NP", "start": 0, "end": 0, "probability": 0.75},
        {"label": "VP", "start": 1, "end": 1, "probability": 0.125}]
    assert record["span_marginals"] == [{"label": "NP", "start": 0, "end": 0,
                                         "probability": 0.75}]
    assert record["k_best"] == [{"tree": TREE, "score": -0.5},
                                {"tree": "(TOP (X (DT a) (VB b)))", "score": -2.0}]


def test_a_refusal():
    error = sentences.SentenceError(sentences.TOO_MANY_WORDS, "9 words, more than 7")
    assert parse_record.outcome_fields(error) == {
        "reason": "too_many_words", "error": "too_many_words: 9 words, more than 7"}


@pytest.mark.parametrize("fields", [{}, {"tree_probability": 0.25,
                                         "constituent_marginals": (0.5, 0.75, 0.125)},
                                    {"tree_probability": 0.25,
                                     "constituent_marginals": (0.5, 0.75, 0.125),
                                     "span_marginals": (Constituent("NP", 0, 0, 0.75),)}])
def test_beam_records_and_spark_columns_use_the_same_names_and_values(fields):
    """What Beam writes and Spark fills for a parse is the JSON object's fields of the same
    names, with the same values, in Spark's column order."""
    beam = pytest.importorskip("tetra_tf.integrations.beam")
    from tetra_tf.integrations import spark

    result = _result(**fields)
    record = result.to_dict()
    beam_fields = beam.parse_fields(result, marginals=bool(fields),
                                    span_marginals=0.5 if "span_marginals" in fields
                                    else None)
    assert beam_fields == {name: record[name] for name in beam_fields}
    assert set(beam_fields) == set(parse_record.BULK_FIELDS) & set(record)
    columns = spark.parse_columns(bool(fields),
                                  0.5 if "span_marginals" in fields else None)
    assert [name for name in columns if name not in ("reason", "error")] == list(beam_fields)
    dead = beam.dead_letter("f.txt", 3, sentences.SentenceError(sentences.EMPTY, "no words"))
    assert dead == {"file": "f.txt", "line": 3,
                    **parse_record.outcome_fields(sentences.SentenceError(sentences.EMPTY,
                                                                          "no words"))}


def test_the_results_load_without_tensorflow_and_keep_their_parser_path():
    """Beam, Spark and the programs read results without the parser's TensorFlow; code
    that imports them from tetra_tf.parser gets the same classes."""
    assert run_python("import sys\nimport tetra_tf.contract.parse_record\n"
                      "print('tensorflow' in sys.modules)") == "False"
    from tetra_tf import parser

    assert (parser.ParseResult, parser.Constituent, parser.TextSentence) == (
        ParseResult, Constituent, parse_record.TextSentence)

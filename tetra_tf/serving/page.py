"""The parse page: a small web page on the REST port (--parse_page) to try the parser.

``GET /`` answers a page with a text box and a Parse button. The page's script (served
here, as is everything it uses: no network fetch) posts the text to the REST API exactly as
any client does, ``/v1/models/NAME:predict`` with ``signature_name: "parse_text"``, then
each sentence's words to ``parse_marginals`` (and, on request, ``parse_k_best``), so it
shows what a TF Serving client gets; a refused request shows the server's error. It draws
each tree by posting it to ``POST /page/draw`` (`draw_json`), which answers the SVG that
`tetra_tf.trees.drawing` makes (svgling's layout, the same drawing as the parse command's), with
the words as written and each constituent's probability.

What a user typed is never markup: the drawings are SVG whose text is escaped, the page's
script writes every string as text (textContent, never innerHTML), and the page forbids any
script but its own (Content-Security-Policy ``script-src 'self'``), so that even an
inserted handler would not run.

The page is off by default: it adds work (drawing) any visitor can ask for, which a
production deployment may not want next to its API.
"""

from __future__ import annotations

import html
import importlib.resources
import json
from typing import Any, Callable

from tetra_tf.serving.errors import RequestError

INDEX_PATH = "/"
DRAW_PATH = "/page/draw"
# The page's own files (tetra_tf/serving/page/): URL path → (file, content type).
ASSETS = {"/page/parse.js": ("parse.js", "text/javascript; charset=utf-8"),
          "/page/parse.css": ("parse.css", "text/css; charset=utf-8")}
HTML_CONTENT_TYPE = "text/html; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"
# Only the page's own script, styles and connections; nothing from elsewhere, no plugin,
# no framing (the drawings' inline styles are svgling's font settings).
HEADERS = [("Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"),
           ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
           ("Cache-Control", "no-store")]
# Bounds on one drawing request: trees, and leaves per tree (its layout grows with them).
MAX_DRAW_TREES = 64
MAX_DRAW_LEAVES = 512

Answer = tuple[int, bytes, str, list[tuple[str, str]]]


def _asset(name: str) -> bytes:
    return importlib.resources.files("tetra_tf.serving").joinpath("page", name).read_bytes()


class ParsePage:
    """The page's routes: `answer` gives the page, its assets and drawings, or None for a
    path that is not the page's."""

    def __init__(self, model_names: Callable[[], list[str]]) -> None:
        """Args:
          model_names: the names of the models served now (the page offers each).
        """
        self._model_names = model_names

    def answer(self, method: str, path: str, read_body: Callable[[], bytes]
               ) -> Answer | None:
        """(status, body, content type, headers) for a request to one of the page's paths,
        None for any other path.

        Raises:
          RequestError: a bad drawing request (400), or a wrong method (405).
        """
        if path == INDEX_PATH:
            self._check_method(method, ("GET", "HEAD"))
            return 200, self.index(), HTML_CONTENT_TYPE, list(HEADERS)
        if path in ASSETS:
            self._check_method(method, ("GET", "HEAD"))
            name, content_type = ASSETS[path]
            return 200, _asset(name), content_type, list(HEADERS)
        if path == DRAW_PATH:
            self._check_method(method, ("POST",))
            body = json.dumps(draw_json(read_body()), ensure_ascii=False).encode("utf-8")
            return 200, body, JSON_CONTENT_TYPE, list(HEADERS)
        return None

    def index(self) -> bytes:
        """The page, the served models' names in its body's data-models (escaped JSON)."""
        names = json.dumps(sorted(self._model_names()))
        page = _asset("index.html").decode("utf-8")
        return page.replace("{{models}}", html.escape(names, quote=True)).encode("utf-8")

    @staticmethod
    def _check_method(method: str, allowed: tuple[str, ...]) -> None:
        if method not in allowed:
            raise RequestError(f"{method} is not allowed here (use {' or '.join(allowed)})",
                               405)


def draw_json(body: bytes) -> dict[str, Any]:
    """Draws the trees of a drawing request (`tetra_tf.trees.drawing.tree_svg`).

    Args:
      body: JSON ``{"trees": [str, ...], "words": [[str, ...] | null, ...],
        "probabilities": [[float, ...] | null, ...]}``: the trees (bracketed), and per tree
        optionally its words as written and its constituents' probabilities
        (``words`` and ``probabilities`` may be left out).

    Returns:
      ``{"svgs": [str, ...]}``, one SVG per tree, in order.

    Raises:
      RequestError: a body that is not such an object, more than MAX_DRAW_TREES trees, a
        tree of more than MAX_DRAW_LEAVES leaves, or words or probabilities that do not fit
        their tree (400, naming the tree).
    """
    from tetra_tf.trees import drawing  # pylint: disable=import-outside-toplevel

    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise RequestError("the drawing request is not JSON") from None
    trees = request.get("trees") if isinstance(request, dict) else None
    if not isinstance(trees, list) or not all(isinstance(tree, str) for tree in trees):
        raise RequestError("'trees' must be a list of bracketed trees")
    if len(trees) > MAX_DRAW_TREES:
        raise RequestError(f"{len(trees)} trees; at most {MAX_DRAW_TREES} a request")
    words = _per_tree(request, "words", len(trees), str)
    probabilities = _per_tree(request, "probabilities", len(trees), (int, float))
    svgs = []
    for index, (tree, tree_words, tree_probabilities) in enumerate(
            zip(trees, words, probabilities)):
        # (a tree's leaves are at most its closing brackets: most trees need no reading)
        if tree.count(")") > MAX_DRAW_LEAVES and _leaves(tree) > MAX_DRAW_LEAVES:
            raise RequestError(f"tree {index}: more than {MAX_DRAW_LEAVES} words to draw")
        try:
            svgs.append(drawing.tree_svg(tree, tree_words, tree_probabilities))
        except (ValueError, RecursionError) as e:
            raise RequestError(f"tree {index}: {str(e).splitlines()[0][:200]}") from None
    return {"svgs": svgs}


def _leaves(tree: str) -> int:
    from tetra_tf.trees import treebank  # pylint: disable=import-outside-toplevel

    try:
        return len(treebank.parse_tree(tree).leaves())
    except ValueError:
        return 0  # (refused when drawn)


def _per_tree(request: dict[str, Any], name: str, count: int, kind) -> list[Any]:
    """The request's list `name` (one entry, a list of `kind` or null, per tree), or
    nulls if it has none."""
    values = request.get(name)
    if values is None:
        return [None] * count
    if not isinstance(values, list) or len(values) != count or not all(
            value is None or (isinstance(value, list) and all(
                isinstance(item, kind) and not isinstance(item, bool) for item in value))
            for value in values):
        raise RequestError(f"'{name}' must be a list with one entry per tree: a list, or "
                           "null")
    return values

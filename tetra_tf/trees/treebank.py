"""Reading and cleaning Penn Treebank trees, and the NLTK sample's fixed splits.

Reads raw ``.mrg`` files (multi-line trees under an outer bracket with an empty label,
``( (S ...) )``) and one-tree-per-line files alike: one bracket reader tracks balanced
parentheses across lines and reports where each tree starts. A malformed tree is returned
as an entry with an error (file, line, reason) instead of a tree, and reading goes on with
the next one, so that callers can count everything they read.

Cleaning turns raw trees into standard parsing data: no empty elements, no function tags
or co-indices, and a ``TOP`` root. Words are kept verbatim (PTB escapes such as ``-LRB-``
are undone by the tokenizer, not here).
"""

from __future__ import annotations

import bisect
import dataclasses
import glob
import os
import re
import zipfile
from typing import Iterable, Iterator, Sequence

import nltk

ROOT_LABEL = "TOP"
# Root labels that stand for the tree's root and are replaced by TOP ('' is the PTB's).
ROOT_LIKE_LABELS = ("", "ROOT", "TOP")
EMPTY_ELEMENT_TAG = "-NONE-"

# The NLTK sample (10% of the WSJ part of the PTB): fixed splits by file number, inclusive.
NLTK_SAMPLE_SPLITS = {"train": (1, 159), "dev": (160, 179), "test": (180, 199)}
# Its licence, from its README; a model trained on it carries this on its card.
NLTK_SAMPLE_LICENCE = ("NLTK's Penn Treebank sample, (C) LDC 1995, made available for "
                       "non-commercial use only")
NLTK_SAMPLE_NOT_FOUND = (
    "the NLTK Penn Treebank sample (corpora/treebank) was not found on NLTK's data path: "
    "set NLTK_DATA to the directory that holds corpora/treebank.zip, or run "
    "`python -m nltk.downloader treebank`")

_PAREN = re.compile(r"[()]")
_NON_SPACE = re.compile(r"\S")
# A label's function tags and co-indices start at its first '-' or '='.
_FUNCTION_TAG_START = re.compile(r"[-=]")


@dataclasses.dataclass(frozen=True)
class TreebankEntry:
    """One tree read from a treebank file, or the reason it could not be read.

    Attributes:
      source: the file it came from (or a name given by the caller).
      line: the 1-based line where the tree (or the unreadable text) starts.
      tree: the raw tree, or None if malformed.
      error: why the tree is malformed, or None.
      text: the raw text of the tree.
    """

    source: str
    line: int
    tree: nltk.Tree | None
    error: str | None
    text: str = ""


class NltkSampleNotFoundError(LookupError):
    """Raised when the NLTK treebank sample is not on NLTK's data path."""


def read_trees(text: str, source: str = "<string>") -> Iterator[TreebankEntry]:
    """Yields every tree in `text`, in order, malformed ones as entries with an error.

    A tree is the text from a '(' to its matching ')', over any number of lines. Problems
    reported: unbalanced brackets (a tree left open at the end of the file is taken to end
    before the next line that starts with '(' in column 0, and reading resumes there), text
    outside brackets, text that NLTK cannot read as a tree, trees without words, words
    not under a part-of-speech tag, and empty labels inside a tree.

    Args:
      text: the contents of a treebank file.
      source: the name reported in the entries.
    """
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(offset: int) -> int:
        return bisect.bisect_right(line_starts, offset)

    pos = 0
    while True:
        match = _NON_SPACE.search(text, pos)
        if not match:
            return
        start = match.start()
        line = line_of(start)
        if text[start] != "(":
            end = _next_line_starting_with_paren(text, line_starts, line)
            junk = text[start:end].strip()
            yield TreebankEntry(source, line, None,
                                f"text outside brackets: {_abbreviate(junk)}", junk)
            pos = end
            continue

        end = _matching_paren(text, start)
        if end is None:
            end = _next_line_starting_with_paren(text, line_starts, line, column_zero=True)
            tree_text = text[start:end].rstrip()
            missing = tree_text.count("(") - tree_text.count(")")
            yield TreebankEntry(
                source, line, None,
                f"unbalanced brackets: {missing} unclosed '('" if missing > 0
                else "unbalanced brackets", tree_text)
            pos = end
            continue

        # Anything but another tree after a tree on the same line belongs to that tree.
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        rest = text[end:line_end].strip()
        if rest and not rest.startswith("("):
            tree_text = text[start:line_end].rstrip()
            reason = ("unbalanced brackets: extra ')'" if rest.startswith(")")
                      else f"text after the tree: {_abbreviate(rest)}")
            yield TreebankEntry(source, line, None, reason, tree_text)
            pos = line_end
            continue

        tree_text = text[start:end]
        tree, error = _parse_tree(tree_text)
        yield TreebankEntry(source, line, tree, error, tree_text)
        pos = end


def _matching_paren(text: str, start: int) -> int | None:
    """Returns the offset just past the ')' that closes the '(' at `start`, or None."""
    depth = 0
    for match in _PAREN.finditer(text, start):
        depth += 1 if match.group() == "(" else -1
        if depth == 0:
            return match.end()
    return None


def _next_line_starting_with_paren(text: str, line_starts: list[int], line: int,
                                   column_zero: bool = False) -> int:
    """Returns the offset of the first line after `line` (1-based) that starts with '('.

    With `column_zero`, the '(' must be the line's first character (how .mrg files and
    one-tree-per-line files start a tree); otherwise leading whitespace is allowed.
    """
    for offset in line_starts[line:]:
        if column_zero:
            if text.startswith("(", offset):
                return offset
        else:
            match = _NON_SPACE.search(text, offset)
            if match is None:
                return len(text)
            if text[match.start()] == "(" and "\n" not in text[offset:match.start()]:
                return offset
    return len(text)


def _abbreviate(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _parse_tree(tree_text: str) -> tuple[nltk.Tree | None, str | None]:
    """Parses one balanced bracketed tree; returns (tree, None) or (None, reason)."""
    try:
        tree = parse_tree(tree_text)
    except ValueError as e:
        return None, f"not a tree: {' '.join(str(e).split())}"
    if not any(True for _ in iter_leaves(tree)):
        return None, "no words"
    error = _shape_error(tree)
    return (None, error) if error else (tree, None)


# nltk.Tree.fromstring's default tokens: '(' plus an optional label, ')', or a leaf; a
# token character is a backslash-escaped bracket or anything but space and brackets. Each
# kind has its own group, (label, ")", leaf); all three empty: an unlabelled "(".
_TREE_TOKEN = re.compile(r"\(\s*((?:\\[()]|[^\s()])+)?|(\))|((?:\\[()]|[^\s()])+)")


def parse_tree(text: str) -> nltk.Tree:
    """Reads one bracketed tree as nltk.Tree.fromstring does, for any depth and width.

    NLTK's reader refuses trees nested deeper than nltk.tree.tree.MAX_TREE_DEPTH (500),
    because NLTK's other tree methods recurse; this one has no such limit, and the
    functions of this module that walk trees do so with explicit stacks. Well-formed text
    (what the parser returns) takes a fast path (`Parser.parse_sents` builds its trees
    here); anything else is read again by `_parse_tree_checked` for its exact error.

    Raises:
      ValueError: for text that is not exactly one tree (saying what was expected where).
    """
    stack: list[tuple[str, list]] = []
    root = None
    for label, close, leaf in _TREE_TOKEN.findall(text):
        if close:
            if not stack:
                return _parse_tree_checked(text)
            node_label, children = stack.pop()
            node = nltk.Tree(node_label, children)
            if stack:
                stack[-1][1].append(node)
            elif root is None:
                root = node
            else:
                return _parse_tree_checked(text)
        elif leaf:
            if not stack:
                return _parse_tree_checked(text)
            stack[-1][1].append(leaf)
        else:
            if root is not None:
                return _parse_tree_checked(text)
            stack.append((label, []))
    if stack or root is None:
        return _parse_tree_checked(text)
    return root


def _parse_tree_checked(text: str) -> nltk.Tree:
    """`parse_tree`, token by token with their positions: the error of malformed text."""
    stack: list[tuple[str | None, list]] = [(None, [])]
    for match in _TREE_TOKEN.finditer(text):
        token = match.group()
        if token[0] == "(":
            if len(stack) == 1 and stack[0][1]:
                _tree_error(text, match.start(), "end-of-string", token)
            stack.append((match.group(1) or "", []))
        elif token == ")":
            if len(stack) == 1:
                _tree_error(text, match.start(), "(" if not stack[0][1] else "end-of-string",
                            token)
            label, children = stack.pop()
            stack[-1][1].append(nltk.Tree(label, children))
        else:
            if len(stack) == 1:
                _tree_error(text, match.start(), "(", token)
            stack[-1][1].append(token)
    if len(stack) > 1:
        _tree_error(text, len(text), ")", "end-of-string")
    if not stack[0][1]:
        _tree_error(text, len(text), "(", "end-of-string")
    return stack[0][1][0]


def _tree_error(text: str, index: int, expected: str, got: str) -> None:
    raise ValueError(f"expected {expected!r} but got {_abbreviate(got)} at index {index}")


def iter_leaves(tree: nltk.Tree) -> Iterator[str]:
    """Yields a tree's words left to right (nltk's leaves(), without recursion)."""
    stack = [iter([tree])]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        elif isinstance(child, nltk.Tree):
            stack.append(iter(child))
        else:
            yield child


def leaves(tree: nltk.Tree) -> list[str]:
    """A tree's words, for any depth (nltk's Tree.leaves recurses)."""
    return list(iter_leaves(tree))


def iter_subtrees(tree: nltk.Tree) -> Iterator[nltk.Tree]:
    """Yields every subtree in pre-order, the tree first (nltk's subtrees(), iteratively)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in reversed(node) if isinstance(child, nltk.Tree))


def trees_equal(a, b) -> bool:
    """Whether two trees have equal labels and children everywhere (nltk's ==, iteratively).

    Words compare with ==; a tree never equals a word.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        x_tree, y_tree = isinstance(x, nltk.Tree), isinstance(y, nltk.Tree)
        if x_tree != y_tree:
            return False
        if not x_tree:
            if x != y:
                return False
            continue
        if type(x) is not type(y) or x.label() != y.label() or len(x) != len(y):
            return False
        stack.extend(zip(x, y))
    return True


def _shape_error(tree: nltk.Tree) -> str | None:
    """Returns why a parsed tree is not a treebank tree, or None if it is one."""
    for node in iter_subtrees(tree):
        is_root = node is tree
        label = node.label()
        if not is_root and not label:
            return "empty label inside the tree (is a ')' missing before it?)"
        words = [child for child in node if not isinstance(child, nltk.Tree)]
        if words:
            if len(node) > 1:
                return f"word {words[0]!r} is not the only child of a part-of-speech tag"
            if is_root and label in ROOT_LIKE_LABELS:
                return f"word {words[0]!r} has no part-of-speech tag"
    return None


def read_treebank_file(path: str) -> Iterator[TreebankEntry]:
    """Yields the entries of one treebank file (UTF-8, or Latin-1 if not valid UTF-8)."""
    with open(path, "rb") as f:
        data = f.read()
    yield from read_trees(_decode(data), path)


def read_treebank_files(paths: Iterable[str]) -> Iterator[TreebankEntry]:
    """Yields the entries of several treebank files, file after file."""
    for path in paths:
        yield from read_treebank_file(path)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def treebank_files(path_or_glob: str) -> list[str]:
    """Returns the files a path names: a file, a directory's files (sorted), or a glob.

    Hidden files (names starting with '.') in a directory are left out.

    Raises:
      FileNotFoundError: if nothing matches.
    """
    if os.path.isdir(path_or_glob):
        paths = sorted(os.path.join(path_or_glob, name) for name in os.listdir(path_or_glob)
                       if not name.startswith("."))
        paths = [p for p in paths if os.path.isfile(p)]
    elif os.path.isfile(path_or_glob):
        paths = [path_or_glob]
    else:
        paths = sorted(p for p in glob.glob(path_or_glob) if os.path.isfile(p))
    if not paths:
        raise FileNotFoundError(f"no treebank files match {path_or_glob!r}")
    return paths


def strip_function_tags(label: str) -> str:
    """Strips function tags and co-indices from a phrase label.

    NP-SBJ-1 → NP, PP-LOC=2 → PP, NP=3 → NP. Labels that start with '-' (-NONE-, -LRB-,
    -RRB-, -LCB-, -RCB-) are returned unchanged.
    """
    if label.startswith("-"):
        return label
    match = _FUNCTION_TAG_START.search(label)
    return label[:match.start()] if match else label


def clean_tree(tree: nltk.Tree) -> nltk.Tree:
    """Returns the standard parsing form of a raw treebank tree; `tree` is not changed.

    Removes empty elements (-NONE-) and the constituents they leave empty, strips function
    tags and co-indices from phrase labels (part-of-speech tags are kept verbatim), and
    roots the tree in TOP: a root labelled '', ROOT or TOP becomes TOP, any other root is
    put under a new TOP. Works with explicit stacks: any depth and width.

    Returns:
      The cleaned tree; a TOP with no children if nothing but empty elements was left.

    Raises:
      ValueError: if a word is not the only child of its part-of-speech tag.
    """
    root_label = strip_function_tags(tree.label()) if _is_phrase(tree) else tree.label()
    if root_label in ROOT_LIKE_LABELS and _is_phrase(tree):
        _check_words_under_pos(tree)
        return nltk.Tree(ROOT_LABEL, _clean_children(tree))
    cleaned = _clean_children(nltk.Tree("", [tree]))
    return nltk.Tree(ROOT_LABEL, cleaned)


def _is_phrase(tree: nltk.Tree) -> bool:
    """True unless `tree` is a preterminal (a part-of-speech tag over one word)."""
    return not (len(tree) == 1 and not isinstance(tree[0], nltk.Tree))


def _check_words_under_pos(tree: nltk.Tree) -> None:
    words = [child for child in tree if not isinstance(child, nltk.Tree)]
    if words:
        raise ValueError(f"word {words[0]!r} is not the only child of a part-of-speech tag")


def _clean_children(parent: nltk.Tree) -> list[nltk.Tree]:
    """The cleaned forms of a phrase's children (those not left empty), in order."""
    top: list[nltk.Tree] = []
    # Frames: (raw phrase, iterator over its children, cleaned children so far).
    stack = [(parent, iter(parent), top)]
    while stack:
        node, children, cleaned = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if stack and cleaned:
                stack[-1][2].append(nltk.Tree(strip_function_tags(node.label()), cleaned))
            continue
        if not _is_phrase(child):
            if child.label() != EMPTY_ELEMENT_TAG:
                cleaned.append(nltk.Tree(child.label(), [child[0]]))
            continue
        _check_words_under_pos(child)
        stack.append((child, iter(child), []))
    return top


def tree_to_line(tree: nltk.Tree) -> str:
    """Returns a tree on one line, ``(TOP (S (NP (PRP She)) ...))``, for any depth.

    parse_tree (and nltk.Tree.fromstring, up to its depth limit) reads the line back to an
    equal tree as long as no label or word holds whitespace or a parenthesis (PTB escapes
    them as -LRB- and -RRB-).
    """
    parts: list[str] = []
    stack: list = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, nltk.Tree):
            if len(item) == 0:
                parts.append(f"({item.label()})")
                continue
            parts.append(f"({item.label()}")
            stack.append(")")
            for child in reversed(item):
                stack.append(child)
                stack.append(" ")
        else:  # a word, or the ")" and " " queued above
            parts.append(str(item))
    return "".join(parts)


def find_nltk_sample() -> tuple[str, str | None]:
    """Locates the NLTK treebank sample on NLTK's data path.

    Returns:
      (directory, None) for an unzipped corpora/treebank, or (zip path, member prefix) for
      corpora/treebank.zip.

    Raises:
      NltkSampleNotFoundError: with a one-line message saying how to get it.
    """
    try:
        pointer = nltk.data.find("corpora/treebank")
        if isinstance(pointer, nltk.data.FileSystemPathPointer):
            return pointer.path, None
    except LookupError:
        pass
    try:
        pointer = nltk.data.find("corpora/treebank.zip")
    except LookupError:
        raise NltkSampleNotFoundError(NLTK_SAMPLE_NOT_FOUND) from None
    return pointer.zipfile.filename, "treebank/"


def nltk_sample_file_names(split: str) -> list[str]:
    """Returns the sample's .mrg file names of a split (see NLTK_SAMPLE_SPLITS), in order."""
    if split not in NLTK_SAMPLE_SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(NLTK_SAMPLE_SPLITS)}")
    first, last = NLTK_SAMPLE_SPLITS[split]
    return [f"wsj_{number:04d}.mrg" for number in range(first, last + 1)]


def read_nltk_sample(split: str) -> Iterator[TreebankEntry]:
    """Yields the raw trees of a split of the NLTK sample in file order.

    Raises:
      NltkSampleNotFoundError: if the sample is not on NLTK's data path.
      ValueError: for an unknown split name.
    """
    names = nltk_sample_file_names(split)
    location, zip_prefix = find_nltk_sample()
    if zip_prefix is None:
        for name in names:
            yield from read_treebank_file(os.path.join(location, "combined", name))
        return
    with zipfile.ZipFile(location) as archive:
        for name in names:
            member = f"{zip_prefix}combined/{name}"
            try:
                data = archive.read(member)
            except KeyError:
                raise NltkSampleNotFoundError(
                    f"{location} has no {member}; is it the NLTK treebank sample?") from None
            yield from read_trees(_decode(data), os.path.join(location, member))


def with_pos_tags(tree: nltk.Tree, pos_tags: Sequence[str]) -> nltk.Tree:
    """Returns a copy of `tree` whose preterminals carry `pos_tags` (e.g. gold POS, for F1).

    Raises:
      ValueError: if the tree has a different number of words.
    """
    copy = nltk.Tree(tree.label(), [])
    stack = [(tree, copy)]  # an explicit stack: trees of any depth
    while stack:
        source, target = stack.pop()
        for child in source:
            if isinstance(child, nltk.Tree):
                target.append(nltk.Tree(child.label(), []))
                stack.append((child, target[-1]))
            else:
                target.append(child)
    preterminals = [node for node in iter_subtrees(copy)
                    if len(node) == 1 and not isinstance(node[0], nltk.Tree)]
    if len(preterminals) != len(pos_tags):
        raise ValueError(f"the tree has {len(preterminals)} words but {len(pos_tags)} POS "
                         "tags were given")
    for node, pos in zip(preterminals, pos_tags):
        node.set_label(pos)
    return copy

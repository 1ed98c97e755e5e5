"""Trees ⇄ tetra-tags (Kitaev & Klein, 2020, §3).

A sentence of n words gets 2n−1 tags, interleaved as leaf, internal, leaf, …, leaf:

* a leaf tag per word: ``l`` if the word is a left child in the binarized tree, ``r`` if it
  is a right child;
* an internal tag per fencepost between two words: ``L`` or ``R`` for the binary node whose
  children meet at that fencepost (the shortest span crossing it), as a left or right child.

Labels ride on the tag of the node they belong to (``L/NP``, ``r/ADVP``): unary chains
collapse into one label joined by ``+`` (``S+VP``), the chain above a part-of-speech tag
rides on the word's leaf tag, and parts of speech are kept as a separate sequence. n-ary
nodes are binarized right-branching; the extra nodes have no label (a bare ``L``/``R``) and
vanish when the tree is rebuilt. The root label (``TOP``) is implicit and is never tagged;
the topmost binary node, like any node that is not a right child, takes an ``L``.

Reading the tags left to right is a shift-reduce derivation over a stack of trees each
with one empty slot (the paper's Algorithm 1): ``l`` pushes a word (+1 depth), ``r`` fills
the empty slot of the top tree (±0), ``L`` makes the top tree the left child of a new node
(±0), ``R`` does the same and fills the slot below with the result (−1).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Sequence

import nltk
import numpy as np

from tetra_tf.trees.treebank import ROOT_LABEL

LEAF_LEFT = "l"
LEAF_RIGHT = "r"
INTERNAL_LEFT = "L"
INTERNAL_RIGHT = "R"
LEAF_DIRECTIONS = (LEAF_LEFT, LEAF_RIGHT)
INTERNAL_DIRECTIONS = (INTERNAL_LEFT, INTERNAL_RIGHT)

LABEL_SEPARATOR = "/"
UNARY_JOINER = "+"

# How each action changes the depth of the stack.
DEPTH_CHANGE = {LEAF_LEFT: 1, LEAF_RIGHT: 0, INTERNAL_LEFT: 0, INTERNAL_RIGHT: -1}


def join_chain(labels: Sequence[str]) -> str:
    """One stacked label for a unary chain, top first: ``S+VP``.

    A joiner or backslash inside a label (French ``P+D``, say) is escaped with a backslash,
    so that any label survives; Penn Treebank labels have neither, and read as before.
    """
    return UNARY_JOINER.join(
        label.replace("\\", "\\\\").replace(UNARY_JOINER, "\\" + UNARY_JOINER)
        for label in labels)


def split_chain(label: str) -> list[str]:
    """The labels of a stacked label (`join_chain`'s inverse); [] for ''."""
    if not label:
        return []
    labels, current, escaped = [], [], False
    for char in label:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == UNARY_JOINER:
            labels.append("".join(current))
            current = []
        else:
            current.append(char)
    labels.append("".join(current))
    return labels


def make_tag(direction: str, label: str = "") -> str:
    """Returns the tag string for a direction (l/r/L/R) and an optional label."""
    return f"{direction}{LABEL_SEPARATOR}{label}" if label else direction


def tag_direction(tag: str) -> str:
    """Returns the direction of a tag: one of l, r, L, R."""
    return tag.split(LABEL_SEPARATOR, 1)[0]


def tag_label(tag: str) -> str:
    """Returns the (possibly stacked) label of a tag, '' for none."""
    parts = tag.split(LABEL_SEPARATOR, 1)
    return parts[1] if len(parts) == 2 else ""


@dataclasses.dataclass(frozen=True)
class TetraTags:
    """The tetra-tagging of one sentence.

    Attributes:
      words: the n words, verbatim.
      pos_tags: the n part-of-speech tags.
      leaf_tags: the n leaf tags (l/r, with labels).
      internal_tags: the n−1 internal tags (L/R, with labels), one per fencepost.
    """

    words: tuple[str, ...]
    pos_tags: tuple[str, ...]
    leaf_tags: tuple[str, ...]
    internal_tags: tuple[str, ...]

    def interleaved(self) -> list[str]:
        """Returns the 2n−1 tags in derivation order: leaf, internal, leaf, …, leaf."""
        out = []
        for i, leaf in enumerate(self.leaf_tags):
            if i:
                out.append(self.internal_tags[i - 1])
            out.append(leaf)
        return out

    def stack_depths(self) -> list[int]:
        """Returns the stack depth after each of the 2n−1 actions."""
        return stack_depths(self.interleaved())

    def max_stack_depth(self) -> int:
        """Returns the deepest stack the derivation needs (the decoder's cap must reach it)."""
        return max(self.stack_depths())


def stack_depths(tags: Sequence[str]) -> list[int]:
    """Returns the stack depth after each action of an interleaved tag sequence."""
    depths, depth = [], 0
    for tag in tags:
        depth += DEPTH_CHANGE[tag_direction(tag)]
        depths.append(depth)
    return depths


@dataclasses.dataclass
class _Leaf:
    index: int
    label: str  # The unary chain above the part of speech, '' if none.


@dataclasses.dataclass
class _Node:
    left: "_Leaf | _Node"
    right: "_Leaf | _Node | None"
    label: str  # '' for a node added by binarization.


def tree_to_tags(tree: nltk.Tree) -> TetraTags:
    """Converts a tree with a TOP-like root and a preterminal over every word to tags.

    Walks the tree with an explicit stack (no recursion), so trees of any width and depth
    convert in time linear in their size.

    Args:
      tree: an nltk.Tree whose root label is implicit (not tagged), whose words each sit
        under a part-of-speech preterminal, and whose other nodes have non-empty labels
        (any text: a '+' inside one is escaped, see `join_chain`).

    Returns:
      The sentence's TetraTags.

    Raises:
      ValueError: if the tree does not have that shape.
    """
    if not isinstance(tree, nltk.Tree):
        raise ValueError("expected an nltk.Tree")
    children = list(tree)
    if not children:
        raise ValueError("the tree has no words")
    if any(not isinstance(child, nltk.Tree) for child in children):
        raise ValueError("the root must not hold words directly")
    words: list[str] = []
    pos_tags: list[str] = []
    leaf_tags: list[str] = []
    internal_tags: list[str] = []
    # Work items, last first: (subtree, is it a right child) for a subtree to tag, or
    # (tag, None) for the internal tag of the fencepost after the words tagged so far.
    # The root's children form one unlabelled binary node (or its only child is the tree).
    work: list[tuple] = []
    if len(children) == 1:
        work.append((children[0], False))
    else:
        _push_children(work, children, "", False)
    while work:
        item, is_right = work.pop()
        if is_right is None:
            internal_tags.append(item)
            continue
        chain: list[str] = []
        node = item
        while True:  # down the unary chain
            if not isinstance(node, nltk.Tree):
                raise ValueError(f"word {node!r} has no part-of-speech tag above it")
            label = node.label()
            if not isinstance(label, str) or not label:
                raise ValueError("every node needs a non-empty label")
            if len(node) == 0:
                raise ValueError(f"empty constituent {label}")
            if len(node) == 1 and not isinstance(node[0], nltk.Tree):
                # A preterminal: the chain above it rides on the word's leaf tag.
                words.append(node[0])
                pos_tags.append(label)
                leaf_tags.append(make_tag(LEAF_RIGHT if is_right else LEAF_LEFT,
                                          join_chain(chain)))
                break
            if any(not isinstance(child, nltk.Tree) for child in node):
                raise ValueError(f"constituent {label} mixes words and constituents")
            chain.append(label)
            if len(node) > 1:
                _push_children(work, list(node), join_chain(chain), is_right)
                break
            node = node[0]
    return TetraTags(tuple(words), tuple(pos_tags), tuple(leaf_tags), tuple(internal_tags))


def _push_children(work: list, children: list, label: str, is_right: bool) -> None:
    """Queues an n-ary node's children, right-binarized: (c1 (c2 (... (c(k−1) ck)))).

    The node itself (labelled) sits at the fencepost after c1, as a left or right child;
    the binarization nodes at the fenceposts after c2 ... c(k−1) are unlabelled right
    children; c1 ... c(k−1) are left children, ck a right one.
    """
    items: list[tuple] = [(children[0], False),
                          (make_tag(INTERNAL_RIGHT if is_right else INTERNAL_LEFT, label), None)]
    for child in children[1:-1]:
        items += [(child, False), (INTERNAL_RIGHT, None)]
    items.append((children[-1], True))
    work.extend(reversed(items))


def tags_to_tree(
    words: Sequence[str],
    pos_tags: Sequence[str],
    leaf_tags: Sequence[str],
    internal_tags: Sequence[str],
    root_label: str = ROOT_LABEL,
) -> nltk.Tree:
    """Rebuilds the tree from a valid tag sequence (Algorithm 1 of the paper).

    Args:
      words: the n words, placed verbatim in the leaves.
      pos_tags: the n part-of-speech tags.
      leaf_tags: the n leaf tags.
      internal_tags: the n−1 internal tags.
      root_label: the label of the implicit root.

    Returns:
      The nltk.Tree, with binarization nodes removed and unary chains expanded.

    Raises:
      ValueError: if the lengths disagree or the tags are no valid derivation.
    """
    n = len(words)
    if n == 0:
        raise ValueError("cannot build a tree over no words")
    if len(pos_tags) != n or len(leaf_tags) != n or len(internal_tags) != n - 1:
        raise ValueError(
            f"{n} words need {n} POS tags, {n} leaf tags and {n - 1} internal tags; got "
            f"{len(pos_tags)}, {len(leaf_tags)} and {len(internal_tags)}")

    # Each stack entry is (tree, node whose right slot is empty, or None if complete).
    stack: list[tuple[object, _Node | None]] = []
    for i in range(n):
        leaf_direction = tag_direction(leaf_tags[i])
        leaf = _Leaf(i, tag_label(leaf_tags[i]))
        if leaf_direction == LEAF_LEFT:
            stack.append((leaf, None))
        elif leaf_direction == LEAF_RIGHT:
            if not stack or stack[-1][1] is None:
                raise ValueError(f"leaf tag {i} is 'r' but no tree has an empty slot")
            top, hole = stack[-1]
            hole.right = leaf
            stack[-1] = (top, None)
        else:
            raise ValueError(f"leaf tag {i} is {leaf_tags[i]!r}, not l or r")
        if i == n - 1:
            break

        direction = tag_direction(internal_tags[i])
        node = _Node(None, None, tag_label(internal_tags[i]))  # type: ignore[arg-type]
        complete, _ = stack.pop()
        node.left = complete
        if direction == INTERNAL_LEFT:
            stack.append((node, node))
        elif direction == INTERNAL_RIGHT:
            if not stack:
                raise ValueError(f"internal tag {i} is 'R' with nothing below it on the stack")
            top, hole = stack[-1]
            hole.right = node
            stack[-1] = (top, node)
        else:
            raise ValueError(f"internal tag {i} is {internal_tags[i]!r}, not L or R")

    if len(stack) != 1 or stack[0][1] is not None:
        raise ValueError("the tags do not end in one complete tree")
    return nltk.Tree(root_label, _to_nltk(stack[0][0], words, pos_tags))


def _to_nltk(root, words, pos_tags) -> list:
    """Returns the nltk subtrees of a binary tree (several if its root is a binarization
    node), walking it with an explicit stack: linear in its size, for any depth."""
    top: list = []
    work = [(root, top)]  # (binary node, the list its nltk subtrees are appended to)
    while work:
        node, target = work.pop()
        if isinstance(node, _Leaf):
            inner = nltk.Tree(pos_tags[node.index], [words[node.index]])
        else:
            inner = None
        outer = inner
        labels = split_chain(node.label)
        for label in reversed(labels):
            outer = nltk.Tree(label, [] if outer is None else [outer])
            if inner is None:
                inner = outer
        if outer is not None:
            target.append(outer)
        if isinstance(node, _Node):
            children = target if inner is None else inner
            work.append((node.right, children))
            work.append((node.left, children))
    return top


class TagVocabulary:
    """Maps the tags of one kind (leaf, internal or POS) to ids and back.

    Saved as a plain text file, one tag per line, the line number being the id.
    """

    def __init__(self, tags: Iterable[str]):
        self.tags: list[str] = list(tags)
        self._ids = {tag: i for i, tag in enumerate(self.tags)}
        if len(self._ids) != len(self.tags):
            raise ValueError("duplicate tags in vocabulary")

    @classmethod
    def build(cls, tag_sequences: Iterable[Sequence[str]], required: Sequence[str] = ()):
        """Builds a sorted vocabulary from the tags seen, plus `required` ones."""
        seen = set(required)
        for sequence in tag_sequences:
            seen.update(sequence)
        return cls(sorted(seen))

    @classmethod
    def load(cls, path: str) -> "TagVocabulary":
        """Reads a vocabulary file written by `save`."""
        with open(path, encoding="utf-8") as f:
            tags = [line.rstrip("\n") for line in f]
        if not tags or any(not tag for tag in tags):
            raise ValueError(f"{path}: not a tag vocabulary (empty file or blank line)")
        return cls(tags)

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(tag + "\n" for tag in self.tags)

    def __len__(self) -> int:
        return len(self.tags)

    def __contains__(self, tag: str) -> bool:
        return tag in self._ids

    def __eq__(self, other) -> bool:
        return isinstance(other, TagVocabulary) and self.tags == other.tags

    def id(self, tag: str) -> int:
        """Returns the id of a tag; KeyError if unknown."""
        return self._ids[tag]

    def ids(self, tags: Sequence[str], unknown: int | None = None) -> list[int]:
        """Returns the ids of tags; unknown tags map to `unknown`, or raise KeyError if None."""
        if unknown is None:
            return [self._ids[tag] for tag in tags]
        return [self._ids.get(tag, unknown) for tag in tags]

    def tag(self, tag_id: int) -> str:
        return self.tags[tag_id]

    def directions(self) -> np.ndarray:
        """Returns, per id, 0 for a left tag (l, L) and 1 for a right tag (r, R)."""
        return np.array(
            [0 if tag_direction(tag) in (LEAF_LEFT, INTERNAL_LEFT) else 1 for tag in self.tags],
            dtype=np.int32)


LEAF_VOCAB_FILE = "leaf_tags.txt"
INTERNAL_VOCAB_FILE = "internal_tags.txt"
POS_VOCAB_FILE = "pos_tags.txt"


@dataclasses.dataclass
class TagVocabularies:
    """The three vocabularies a parser predicts over, saved together in one directory."""

    leaf: TagVocabulary
    internal: TagVocabulary
    pos: TagVocabulary

    @classmethod
    def build(cls, taggings: Iterable[TetraTags]) -> "TagVocabularies":
        """Builds the vocabularies from training taggings; bare l/r/L/R are always present."""
        taggings = list(taggings)
        return cls(
            leaf=TagVocabulary.build((t.leaf_tags for t in taggings), LEAF_DIRECTIONS),
            internal=TagVocabulary.build((t.internal_tags for t in taggings), INTERNAL_DIRECTIONS),
            pos=TagVocabulary.build(t.pos_tags for t in taggings),
        )

    @classmethod
    def load(cls, directory: str) -> "TagVocabularies":
        paths = [os.path.join(directory, name)
                 for name in (LEAF_VOCAB_FILE, INTERNAL_VOCAB_FILE, POS_VOCAB_FILE)]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"tag vocabulary file not found: {missing[0]}")
        vocabs = cls(*(TagVocabulary.load(p) for p in paths))
        for name, vocab, allowed in (("leaf", vocabs.leaf, LEAF_DIRECTIONS),
                                     ("internal", vocabs.internal, INTERNAL_DIRECTIONS)):
            bad = [t for t in vocab.tags if tag_direction(t) not in allowed]
            if bad:
                raise ValueError(f"{directory}: {name} vocabulary holds {bad[0]!r}")
        return vocabs

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.leaf.save(os.path.join(directory, LEAF_VOCAB_FILE))
        self.internal.save(os.path.join(directory, INTERNAL_VOCAB_FILE))
        self.pos.save(os.path.join(directory, POS_VOCAB_FILE))

    def encode(self, tags: TetraTags, unknown: int = -1) -> dict[str, list[int]]:
        """Returns the ids of a tagging; tags unseen in training map to `unknown`."""
        return {
            "pos_tag_ids": self.pos.ids(tags.pos_tags, unknown),
            "leaf_tag_ids": self.leaf.ids(tags.leaf_tags, unknown),
            "internal_tag_ids": self.internal.ids(tags.internal_tags, unknown),
        }

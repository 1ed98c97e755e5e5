"""Tests for tetra_tf.trees.tags: trees ⇄ tetra-tags, stack depths, vocabularies."""

import string

import nltk
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tetra_tf.trees import tags, treebank

FIGURE_1 = ("(TOP (S (S (NP (PRP She)) (VP (VBZ enjoys) (S (VP (VBG playing) "
            "(NP (NN tennis)))))) (. .)))")


def _round_trip(tree: nltk.Tree) -> nltk.Tree:
    t = tags.tree_to_tags(tree)
    return tags.tags_to_tree(t.words, t.pos_tags, t.leaf_tags, t.internal_tags)


def _oracle_max_depth(tree: nltk.Tree) -> int:
    """The deepest stack, computed from the binarized tree instead of the tags.

    A right child v that is a binary node stays a separate stack entry from its first word
    until its left child is complete, so after word i the stack holds 1 + the number of
    such nodes whose [first word, last word of left child] contains i.
    """
    leaf = object()

    def binarize(node):
        if len(node) == 1 and not isinstance(node[0], nltk.Tree):
            return leaf
        children = [binarize(child) for child in node]
        right = children[-1]
        for child in reversed(children[:-1]):
            right = (child, right)
        return right

    intervals = []

    def walk(node, is_right, start):
        if node is leaf:
            return start + 1
        middle = walk(node[0], False, start)
        if is_right:
            intervals.append((start, middle - 1))
        return walk(node[1], True, middle)

    n = walk(binarize(tree), False, 0)
    return 1 + max(sum(a <= i <= b for a, b in intervals) for i in range(n))


# --- The paper's example ------------------------------------------------------------------


def test_figure_1_tags():
    t = tags.tree_to_tags(nltk.Tree.fromstring(FIGURE_1))
    directions = [tags.tag_direction(tag) for tag in t.interleaved()]
    assert " ".join(directions) == "l L l R l R r L r"
    assert t.words == ("She", "enjoys", "playing", "tennis", ".")
    assert t.pos_tags == ("PRP", "VBZ", "VBG", "NN", ".")
    # Labels worked out by hand: unary chains joined by '+', the chain over a POS on the leaf.
    assert t.leaf_tags == ("l/NP", "l", "l", "r/NP", "r")
    assert t.internal_tags == ("L/S", "R/VP", "R/S+VP", "L/S")


def test_figure_1_stack_depths():
    t = tags.tree_to_tags(nltk.Tree.fromstring(FIGURE_1))
    assert t.stack_depths() == [1, 1, 2, 1, 2, 1, 1, 1, 1]
    assert t.max_stack_depth() == 2


def test_figure_1_round_trip():
    tree = nltk.Tree.fromstring(FIGURE_1)
    assert _round_trip(tree) == tree


# --- Shapes -------------------------------------------------------------------------------


def test_nary_nodes_get_bare_binarization_tags():
    tree = nltk.Tree.fromstring("(TOP (NP (DT a) (JJ b) (JJ c) (NN d)))")
    t = tags.tree_to_tags(tree)
    # Right-branching: (a (b (c d))); only the topmost binary node carries NP.
    assert t.internal_tags == ("L/NP", "R", "R")
    assert t.leaf_tags == ("l", "l", "l", "r")
    assert _round_trip(tree) == tree


def test_one_word_sentence():
    tree = nltk.Tree.fromstring("(TOP (S (INTJ (UH Hello))))")
    t = tags.tree_to_tags(tree)
    assert t.leaf_tags == ("l/S+INTJ",) and t.internal_tags == ()
    assert t.stack_depths() == [1]
    assert _round_trip(tree) == tree


def test_top_with_several_children():
    tree = nltk.Tree.fromstring("(TOP (NP (NN a)) (VP (VB b) (NN c)) (. .))")
    t = tags.tree_to_tags(tree)
    assert t.internal_tags[0] == "L"  # The root's binarization node has no label.
    assert _round_trip(tree) == tree


def test_root_label_argument():
    t = tags.tree_to_tags(nltk.Tree.fromstring("(TOP (NN a))"))
    rebuilt = tags.tags_to_tree(t.words, t.pos_tags, t.leaf_tags, t.internal_tags,
                                root_label="ROOT")
    assert rebuilt == nltk.Tree.fromstring("(ROOT (NN a))")


def test_depth_grows_with_center_embedding():
    # Each right child whose left child is itself a binary node needs one more stack entry.
    tree = nltk.Tree.fromstring(
        "(TOP (A (W a) (B (C (D (W b) (E (F (G (W c) (W d)) (W e)) (W f))) (W g)) (W h))))")
    t = tags.tree_to_tags(tree)
    assert t.max_stack_depth() == _oracle_max_depth(tree) == 3


def test_left_branching_needs_depth_one():
    tree = nltk.Tree.fromstring("(TOP (A (B (C (W a) (W b)) (W c)) (W d)))")
    t = tags.tree_to_tags(tree)
    assert t.stack_depths() == [1] * 7


def test_stack_depths_follow_depth_changes():
    sequence = ["l", "L/S", "l/NP", "R", "l", "R/VP", "r", "L", "r"]
    depths = tags.stack_depths(sequence)
    expected, depth = [], 0
    for tag in sequence:
        depth += {"l": 1, "r": 0, "L": 0, "R": -1}[tag[0]]
        expected.append(depth)
    assert depths == expected


# --- Malformed trees and invalid tags -----------------------------------------------------


@pytest.mark.parametrize("tree", [
    nltk.Tree("TOP", ["word"]),  # Word under the root, no POS.
    nltk.Tree("TOP", [nltk.Tree("S", ["word", nltk.Tree("NN", ["x"])])]),  # Word without POS.
    nltk.Tree("TOP", [nltk.Tree("S", [nltk.Tree("NP", []), nltk.Tree("NN", ["x"])])]),  # Empty.
    nltk.Tree("TOP", []),  # No words.
    nltk.Tree("TOP", [nltk.Tree("", [nltk.Tree("NN", ["x"])])]),  # Empty label.
])
def test_malformed_trees_raise(tree):
    with pytest.raises(ValueError):
        tags.tree_to_tags(tree)


@pytest.mark.parametrize("tree_text", [
    # French Treebank-style labels that hold the chain joiner, in chains and on n-ary nodes.
    "(TOP (SENT (NP+D (P+D du) (NC vin)) (VN (V coule)) (PONCT .)))",
    "(TOP (A+B (C+ (NN x))))",
    "(TOP (A/B (NN x) (NN y)))",
    "(TOP (X\\+ (Y\\ (NN x)) (NN y)))",
])
def test_labels_with_the_joiner_round_trip(tree_text):
    tree = nltk.Tree.fromstring(tree_text)
    tagging = tags.tree_to_tags(tree)
    rebuilt = tags.tags_to_tree(tagging.words, tagging.pos_tags, tagging.leaf_tags,
                                tagging.internal_tags)
    assert rebuilt == tree
    # Through the vocabulary files too: the stacked labels are escaped, not reserved.
    chains = [tags.tag_label(t) for t in tagging.leaf_tags + tagging.internal_tags]
    assert all(tags.join_chain(tags.split_chain(c)) == c for c in chains)


def test_chain_escaping():
    assert tags.join_chain(["S", "VP"]) == "S+VP"  # PTB chains read as before
    assert tags.split_chain("S+VP") == ["S", "VP"]
    assert tags.join_chain(["P+D"]) == "P\\+D"
    for labels in (["P+D", "NP"], ["+", "\\", "a\\+b"], ["x"]):
        assert tags.split_chain(tags.join_chain(labels)) == labels
    assert tags.split_chain("") == []


def test_non_tree_raises():
    with pytest.raises(ValueError):
        tags.tree_to_tags("(TOP (NN a))")


@pytest.mark.parametrize("leaf_tags, internal_tags", [
    (["r"], []),  # First word cannot fill a slot.
    (["l", "r"], ["R"]),  # R with nothing below.
    (["l", "l"], ["L"]),  # Ends with two trees on the stack.
    (["l", "l", "r"], ["L", "L"]),  # Ends with two trees on the stack.
    (["x"], []),  # Not a leaf direction.
    (["l", "r"], ["Q"]),  # Not an internal direction.
    (["l", "r"], ["l"]),  # A leaf tag in an internal slot.
    (["L", "r"], ["L"]),  # An internal tag in a leaf slot.
])
def test_invalid_tag_sequences_raise(leaf_tags, internal_tags):
    n = len(leaf_tags)
    with pytest.raises(ValueError):
        tags.tags_to_tree(["w"] * n, ["NN"] * n, leaf_tags, internal_tags)


@pytest.mark.parametrize("n_words, n_pos, n_leaf, n_internal", [
    (0, 0, 0, 0), (2, 1, 2, 1), (2, 2, 1, 1), (2, 2, 2, 2), (2, 2, 2, 0)])
def test_length_mismatch_raises(n_words, n_pos, n_leaf, n_internal):
    with pytest.raises(ValueError):
        tags.tags_to_tree(["w"] * n_words, ["NN"] * n_pos, ["l"] + ["r"] * (n_leaf - 1),
                          ["L"] * n_internal)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from("lr"), min_size=1, max_size=12).flatmap(
    lambda leaves: st.tuples(st.just(leaves),
                             st.lists(st.sampled_from("LR"), min_size=len(leaves) - 1,
                                      max_size=len(leaves) - 1))))
def test_tags_are_valid_exactly_when_the_stack_stays_sound(directions):
    leaf_tags, internal_tags = directions
    n = len(leaf_tags)
    interleaved = tags.TetraTags(("w",) * n, ("NN",) * n, tuple(leaf_tags),
                                 tuple(internal_tags)).interleaved()
    depths = tags.stack_depths(interleaved)
    valid = leaf_tags[0] == "l" and min(depths) >= 1 and depths[-1] == 1
    try:
        tree = tags.tags_to_tree(["w"] * n, ["NN"] * n, leaf_tags, internal_tags)
    except ValueError:
        assert not valid
    else:
        assert valid
        assert tree.leaves() == ["w"] * n


# --- Random trees -------------------------------------------------------------------------

LABELS = st.sampled_from(["S", "NP", "VP", "PP", "SBAR", "ADJP", "X", "PRT|ADVP", "TOP",
                          "-LRB-", "WHNP"]) | st.text(
    alphabet=string.ascii_uppercase + "-$|=", min_size=1, max_size=4)
POS_TAGS = st.sampled_from(["NN", "DT", "VBZ", ".", ",", "-LRB-", "-NONE-", "PRP$", "``"])
WORDS = st.text(alphabet=string.ascii_letters + string.digits + "/+-.,'`$", min_size=1,
                max_size=5)


@st.composite
def subtrees(draw, depth=0):
    if depth >= 4 or draw(st.integers(0, 2)) == 0:
        return nltk.Tree(draw(POS_TAGS), [draw(WORDS)])
    arity = draw(st.integers(1, 5))
    return nltk.Tree(draw(LABELS), [draw(subtrees(depth + 1)) for _ in range(arity)])


TREES = st.lists(subtrees(), min_size=1, max_size=4).map(lambda kids: nltk.Tree("TOP", kids))


@settings(max_examples=200, deadline=None)
@given(TREES)
def test_random_trees_round_trip(tree):
    t = tags.tree_to_tags(tree)
    n = len(tree.leaves())
    assert t.words == tuple(tree.leaves())
    assert t.pos_tags == tuple(label for _, label in tree.pos())
    assert len(t.leaf_tags) == n and len(t.internal_tags) == n - 1
    assert all(tags.tag_direction(tag) in "lr" for tag in t.leaf_tags)
    assert all(tags.tag_direction(tag) in "LR" for tag in t.internal_tags)
    assert tags.tags_to_tree(t.words, t.pos_tags, t.leaf_tags, t.internal_tags) == tree


@settings(max_examples=100, deadline=None)
@given(TREES)
def test_random_trees_stack_depth_matches_oracle(tree):
    t = tags.tree_to_tags(tree)
    depths = t.stack_depths()
    assert min(depths) >= 1 and depths[-1] == 1
    assert t.max_stack_depth() == _oracle_max_depth(tree)


# --- The NLTK sample ----------------------------------------------------------------------


def _sample_trees():
    try:
        treebank.find_nltk_sample()
    except treebank.NltkSampleNotFoundError:
        pytest.skip("NLTK treebank sample not found (set NLTK_DATA)")
    trees = []
    for split in ("train", "dev", "test"):
        trees += [treebank.clean_tree(e.tree) for e in treebank.read_nltk_sample(split)]
    return trees


def test_nltk_sample_round_trips():
    trees = _sample_trees()
    assert len(trees) == 3914
    for tree in trees:
        t = tags.tree_to_tags(tree)
        assert tags.tags_to_tree(t.words, t.pos_tags, t.leaf_tags, t.internal_tags) == tree
        assert t.max_stack_depth() == _oracle_max_depth(tree)


# --- Vocabularies -------------------------------------------------------------------------


def _taggings():
    return [tags.tree_to_tags(nltk.Tree.fromstring(s)) for s in (
        FIGURE_1,
        "(TOP (NP (DT a) (JJ b) (NN c)))",
        "(TOP (S (NP (PRP It)) (VP (VBZ is)) (. .)))",
    )]


def test_vocabularies_build_save_load(tmp_path):
    taggings = _taggings()
    vocabs = tags.TagVocabularies.build(taggings)
    for bare in "lr":
        assert bare in vocabs.leaf
    for bare in "LR":
        assert bare in vocabs.internal
    for t in taggings:
        assert set(t.leaf_tags) <= set(vocabs.leaf.tags)
        assert set(t.internal_tags) <= set(vocabs.internal.tags)
        assert set(t.pos_tags) <= set(vocabs.pos.tags)
    assert "JJ" in vocabs.pos and "L/S" in vocabs.internal and "r/NP" in vocabs.leaf

    vocabs.save(str(tmp_path))
    for name in (tags.LEAF_VOCAB_FILE, tags.INTERNAL_VOCAB_FILE, tags.POS_VOCAB_FILE):
        assert (tmp_path / name).is_file()
    loaded = tags.TagVocabularies.load(str(tmp_path))
    assert loaded == vocabs
    for vocab in (loaded.leaf, loaded.internal, loaded.pos):
        assert [vocab.tag(vocab.id(tag)) for tag in vocab.tags] == vocab.tags


def test_vocabulary_directions():
    vocabs = tags.TagVocabularies.build(_taggings())
    for vocab in (vocabs.leaf, vocabs.internal):
        directions = vocab.directions()
        assert directions.dtype == np.int32 and len(directions) == len(vocab)
        for tag, direction in zip(vocab.tags, directions):
            assert direction == (1 if tag[0] in "rR" else 0)


def test_encode_and_unknown_tags():
    vocabs = tags.TagVocabularies.build(_taggings()[:1])
    t = tags.tree_to_tags(nltk.Tree.fromstring("(TOP (NP (DT a) (NN b)) (. .))"))
    ids = vocabs.encode(t)
    assert len(ids["pos_tag_ids"]) == 3 and len(ids["leaf_tag_ids"]) == 3
    assert len(ids["internal_tag_ids"]) == 2
    assert ids["pos_tag_ids"][0] == -1  # DT is not in Figure 1.
    assert ids["pos_tag_ids"][1] == vocabs.pos.id("NN")
    assert ids["pos_tag_ids"][2] == vocabs.pos.id(".")
    for kind, vocab in (("leaf_tag_ids", vocabs.leaf), ("internal_tag_ids", vocabs.internal)):
        source = t.leaf_tags if kind == "leaf_tag_ids" else t.internal_tags
        for tag, tag_id in zip(source, ids[kind]):
            assert tag_id == (vocab.id(tag) if tag in vocab else -1)
    assert vocabs.encode(t, unknown=99)["pos_tag_ids"][0] == 99
    with pytest.raises(KeyError):
        vocabs.pos.ids(["DT"])


def test_vocabulary_rejects_bad_files(tmp_path):
    with pytest.raises(ValueError):
        tags.TagVocabulary(["a", "b", "a"])
    with pytest.raises(FileNotFoundError):
        tags.TagVocabularies.load(str(tmp_path))
    tags.TagVocabularies.build(_taggings()).save(str(tmp_path))
    (tmp_path / tags.POS_VOCAB_FILE).write_text("NN\n\nDT\n")
    with pytest.raises(ValueError):
        tags.TagVocabularies.load(str(tmp_path))
    (tmp_path / tags.POS_VOCAB_FILE).write_text("")
    with pytest.raises(ValueError):
        tags.TagVocabularies.load(str(tmp_path))
    (tmp_path / tags.POS_VOCAB_FILE).write_text("NN\n")
    (tmp_path / tags.LEAF_VOCAB_FILE).write_text("l\nr\nL/NP\n")
    with pytest.raises(ValueError):
        tags.TagVocabularies.load(str(tmp_path))


# --- Wide and deep trees (no recursion) ---------------------------------------------------


def _wide(n: int) -> nltk.Tree:
    return nltk.Tree("TOP", [nltk.Tree("S", [nltk.Tree("NN", [f"w{i}"]) for i in range(n)])])


def _deep_right(n: int) -> nltk.Tree:
    """(X (NN w0) (X (NN w1) ... (NN end))), n constituents deep."""
    tree = nltk.Tree("NN", ["end"])
    for i in reversed(range(n)):
        tree = nltk.Tree("X", [nltk.Tree("NN", [f"w{i}"]), tree])
    return nltk.Tree("TOP", [tree])


def _deep_unary(n: int) -> nltk.Tree:
    tree = nltk.Tree("NN", ["w"])
    for _ in range(n):
        tree = nltk.Tree("X", [tree])
    return nltk.Tree("TOP", [tree])


@pytest.mark.parametrize("make, size", [(_wide, 1000), (_wide, 10000), (_deep_right, 10000),
                                        (_deep_unary, 10000)])
def test_wide_and_deep_trees_round_trip(make, size):
    tree = make(size)
    t = tags.tree_to_tags(tree)
    assert len(t.words) == len(treebank.leaves(tree))
    rebuilt = tags.tags_to_tree(t.words, t.pos_tags, t.leaf_tags, t.internal_tags)
    assert treebank.trees_equal(rebuilt, tree)
    assert treebank.tree_to_line(rebuilt) == treebank.tree_to_line(tree)

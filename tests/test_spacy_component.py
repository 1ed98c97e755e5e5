"""Tests for tetra_tf/integrations/spacy_component.py: the spaCy v3 component on a tiny export."""

import math
import os
import subprocess
import sys
import types

import pytest

spacy = pytest.importorskip("spacy")

import nltk  # noqa: E402

from conftest import REPO_ROOT, parse_with_copies_of, requires_nltk_sample  # noqa: E402
import tetra_tf_spacy  # noqa: E402
from tetra_tf.contract.sentences import escape_leaf  # noqa: E402
from tetra_tf.errors import ExportError  # noqa: E402
from tetra_tf.integrations.spacy_component import (  # noqa: E402
    MissingSentencesError, NonConstituentError, NonConstituentException, TetraTfComponent,
    sentence_words)
from tetra_tf.parser import ModelError, Parser  # noqa: E402

TEXTS = [
    'She said "hello (and goodbye)" to me. The cat sat on the mat!',
    "Emoji 😀 are words too 🎉. \u201cCurly quotes\u201d and [square] {curly} brackets?",
    "Two  spaces and\ttabs.\n\nA new paragraph starts here.\n",
    "Hi.",
]
LONG_WORDS = ("the cat sat on a mat and she says he even left early while dogs ran "
              "in text with words").split()
LONG_TEXT = " ".join(LONG_WORDS[i % len(LONG_WORDS)] for i in range(300)) + " ."


@pytest.fixture(scope="module")
def nlp(tiny_export_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("tetra_tf", config={"model_dir": tiny_export_dir, "batch_size": 4})
    return nlp


@pytest.fixture(scope="module")
def parser(tiny_export_dir):
    return Parser(tiny_export_dir)


@pytest.fixture(autouse=True)
def _export_loaded_once(parser, monkeypatch):
    """A component a test adds for the tiny export gets a copy of the module's Parser (the
    SavedModel loaded once; a test may change its copy's attributes) rather than loading
    the export again. The component's own load is the `nlp` fixture's (made before this
    patch) and the entry point test's (a new process); other directories load as usual."""
    parse_with_copies_of(parser, monkeypatch)


def _word_tokens(span):
    return [token for token in span if not token.is_space]


def _spans_of(tree: nltk.Tree, token_indices: list[int]) -> list[tuple[int, int, tuple]]:
    """(start token, end token, labels) of a Parser tree in preorder, as the component sees
    constituents: TOP dropped (unless it has several children), unary chains merged."""
    spans = []

    def visit(node, labels, word):
        while isinstance(node, nltk.Tree) and len(node) == 1 and isinstance(node[0], nltk.Tree):
            node = node[0]
            if not (len(node) == 1 and isinstance(node[0], str)):
                labels = labels + (node.label(),)
        if len(node) == 1 and isinstance(node[0], str):
            spans.append((token_indices[word], token_indices[word] + 1, labels))
            return word + 1
        position = len(spans)
        spans.append(None)
        end = word
        for child in node:
            is_word = len(child) == 1 and isinstance(child[0], str)
            end = visit(child, () if is_word else (child.label(),), end)
        spans[position] = (token_indices[word], token_indices[end - 1] + 1, labels)
        return end

    visit(tree, (tree.label(),) if len(tree) > 1 else (), 0)
    return spans


def test_sentence_words_are_the_tokens_written_as_the_treebank_writes_them():
    """One word per non-whitespace token (spaCy's boundaries kept), spelled as the model's
    training data spells it: the raw-text tokenizer's `ptb_words`."""
    from tetra_tf.contract import text

    nlp = spacy.blank("en")
    doc = nlp('"Hi (there)," he said, "it\u2019s [a] {test}" \u201cok\u201d \u2014 :-)')
    tokens = _word_tokens(doc)
    words = sentence_words(tokens)
    assert len(words) == len(tokens)
    assert words[:5] == ["``", "Hi", "-LRB-", "there", "-RRB-"]
    assert [words[i] for i, t in enumerate(tokens) if t.text in ('"', "\u201c", "\u201d")] == [
        "``", "''", "``", "''", "``", "''"]
    assert "--" in words and ":-)" in words and "'s" in words
    assert all(word and not any(c.isspace() for c in word) for word in words)
    # The same spelling as raw text gets where the tokens agree.
    raw = "He said \u201cok\u201d \u2014 fine."
    assert sentence_words(_word_tokens(nlp(raw))) == [t.word for t in text.tokenize(raw)]


@requires_nltk_sample
def test_a_doc_of_ptb_words_gives_the_parser_those_words():
    """Docs made of the sample's gold leaves (as benepar's users make them from
    pre-tokenized text): the parser gets exactly the leaves, quotes of either side
    included, as the parse CLI reads them from a line."""
    from spacy.tokens import Doc

    from tetra_tf.trees import treebank

    vocab = spacy.blank("en").vocab
    quotes = 0
    for entry in treebank.read_nltk_sample("test"):
        if entry.tree is None:
            continue
        leaves = treebank.clean_tree(entry.tree).leaves()
        assert sentence_words(Doc(vocab, words=leaves)) == leaves
        quotes += leaves.count("''") + leaves.count("``")
    assert quotes > 0


def test_sentences_get_the_parsers_trees_over_their_tokens(nlp, parser):
    for text in TEXTS + [LONG_TEXT]:
        doc = nlp(text)
        parsed = 0
        for sent in doc.sents:
            words = _word_tokens(sent)
            if not words:  # e.g. the trailing newline: skipped, not parsed
                assert sent._.parse_string is None and sent._.labels == ()
                assert sent._.parse_score is None and list(sent._.constituents) == []
                continue
            parsed += 1
            result = parser.parse_each([sentence_words(words)])[0]
            expected = _spans_of(result.tree, [t.i for t in words])
            found = [(c.start, c.end, c._.labels) for c in sent._.constituents]
            assert found == expected
            tree = nltk.Tree.fromstring(sent._.parse_string)
            # Leaves are exactly the sentence's non-space tokens, brackets PTB-escaped.
            assert tree.leaves() == [escape_leaf(w) for w in sentence_words(words)]
            assert sent._.parse_error is None
            assert [pos for _, pos in tree.pos()] == result.pos_tags
            root = result.tree if len(result.tree) > 1 else result.tree[0]
            assert tree == root
            assert math.isclose(sent._.parse_score, result.score, rel_tol=1e-4, abs_tol=1e-3)
            assert sent._.parse_score <= 0.0
            assert all(not t.is_space for c in sent._.constituents for t in (c[0], c[-1]))
        assert parsed >= 1
        assert math.isclose(doc._.tetra_score, sum(
            s._.parse_score for s in doc.sents if s._.parse_score is not None), abs_tol=1e-4)


def test_whitespace_tokens_are_skipped(nlp):
    doc = nlp(TEXTS[2])
    spaces = [t for t in doc if t.is_space]
    assert len(spaces) >= 3  # the double space, the tab, the blank line, the final newline
    sents = list(doc.sents)
    assert sents[-1].text == "\n" and sents[-1]._.parse_string is None
    # A sentence with leading whitespace matches its constituent without it.
    second = next(s for s in sents if s.text.strip().startswith("A new"))
    assert second[0].is_space
    words = _word_tokens(second)
    trimmed = doc[words[0].i:words[-1].i + 1]
    assert list(second._.constituents)[0] == trimmed
    assert second._.parse_string == trimmed._.parse_string is not None
    for sent in sents:
        leaves = nltk.Tree.fromstring(sent._.parse_string).leaves() if sent._.parse_string \
            else []
        assert len(leaves) == len(_word_tokens(sent))


def test_children_parent_and_tokens_agree(nlp):
    doc = nlp(TEXTS[0] + " " + LONG_TEXT)
    for sent in doc.sents:
        root = list(sent._.constituents)[0]
        assert root._.parent is None
        for constituent in sent._.constituents:
            children = list(constituent._.children)
            if len(constituent) == 1:
                assert children == []
                token = constituent[0]
                assert token._.labels == constituent._.labels
                assert token._.parse_string == constituent._.parse_string
                assert token._.parent == constituent._.parent
                continue
            assert len(children) >= 2
            assert [t.i for c in children for t in _word_tokens(c)] == [
                t.i for t in _word_tokens(constituent)]
            for child in children:
                assert child._.parent == constituent
            assert constituent._.parse_string == "".join(
                f"({label} " for label in constituent._.labels) + " ".join(
                c._.parse_string for c in children) + ")" * len(constituent._.labels)


def _raises_as_benepar(span, match: str) -> None:
    """benepar's behaviour on a span that is no constituent: labels, parse_string and parent
    raise when read; constituents and children are generators that raise when iterated."""
    for name in ("labels", "parse_string", "parent"):
        with pytest.raises(NonConstituentError, match=match):
            span._.get(name)
    for name in ("constituents", "children"):
        lazy = span._.get(name)  # reading it is fine
        assert isinstance(lazy, types.GeneratorType)
        with pytest.raises(NonConstituentError, match=match):
            next(lazy)
    assert span._.parse_score is None and span._.parse_error is None


def test_a_span_that_is_no_constituent_raises_as_benepar_does(nlp):
    doc = nlp(TEXTS[0])
    sent = next(doc.sents)
    constituents = {(c.start, c.end) for c in sent._.constituents}
    crossing = next((i, j) for i in range(sent.start, sent.end)
                    for j in range(i + 1, sent.end + 1) if (i, j) not in constituents)
    _raises_as_benepar(doc[crossing[0]:crossing[1]], "span is not a constituent")
    # A span across two sentences is none either.
    _raises_as_benepar(doc[sent.end - 1:sent.end + 1], "span is not a constituent")
    # Code written for benepar catches it by benepar's name, or as an Exception.
    assert NonConstituentException is NonConstituentError
    assert issubclass(NonConstituentError, ValueError)
    non_sentence = next(c for c in sent._.constituents if c._.parent is not None)
    assert non_sentence._.parse_score is None


def test_an_empty_span_raises_as_benepar_does(nlp):
    doc = nlp(TEXTS[0])
    assert len(doc) > 4
    for start in (0, 3, len(doc)):  # the doc's start, inside a sentence, the doc's end
        _raises_as_benepar(doc[start:start], "an empty span is not a constituent")
    # A one-token span is a constituent: its attributes answer.
    assert f"({doc[3].tag_} {doc[3].text})" in doc[3:4]._.parse_string
    assert doc[3:4]._.labels == doc[3]._.labels


def test_the_error_is_benepars_exception_when_benepar_is_loaded(nlp, monkeypatch):
    """With benepar imported (its module in sys.modules), `except
    benepar.NonConstituentException` catches the component's error too."""
    benepar_module = types.ModuleType("benepar.integrations.spacy_extensions")

    class BeneparNonConstituentException(Exception):
        pass

    benepar_module.NonConstituentException = BeneparNonConstituentException
    monkeypatch.setitem(sys.modules, benepar_module.__name__, benepar_module)
    doc = nlp(TEXTS[0])
    for read in (lambda: doc[2:2]._.labels, lambda: list(doc[2:2]._.children)):
        with pytest.raises(BeneparNonConstituentException) as caught:
            read()
        assert isinstance(caught.value, NonConstituentError)
    monkeypatch.delitem(sys.modules, benepar_module.__name__)
    with pytest.raises(NonConstituentError) as caught:
        doc[2:2]._.labels
    assert not isinstance(caught.value, BeneparNonConstituentException)


def test_token_tags_are_the_pos_tags_of_the_parse(nlp, parser):
    """token.tag_ is the parser's POS tag of each word, as benepar sets it: the POS leaves
    of parse_string; whitespace tokens are no words and keep theirs."""
    for text in TEXTS + [LONG_TEXT]:
        doc = nlp(text)
        assert doc.has_annotation("TAG")
        for sent in doc.sents:
            words = _word_tokens(sent)
            if not words:
                continue
            tree = nltk.Tree.fromstring(sent._.parse_string)
            tags = [token.tag_ for token in words]
            assert tags == [pos for _, pos in tree.pos()]
            assert tags == parser.parse_each([sentence_words(words)])[0].pos_tags
            assert all(tags)
        assert all(token.tag_ == "" for token in doc if token.is_space)
    assert any(token.is_space for token in nlp(TEXTS[2]))


@spacy.Language.component("test_tetra_tf_fixed_tags")
def _fixed_tags(doc):
    """A stand-in tagger: every token's tag_ is XX."""
    for token in doc:
        token.tag_ = "XX"
    return doc


@pytest.mark.parametrize("disable_tagger", [False, True])
def test_an_earlier_taggers_tags_are_overwritten_unless_disable_tagger(tiny_export_dir,
                                                                       disable_tagger):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("test_tetra_tf_fixed_tags")
    config = {"model_dir": tiny_export_dir}
    if disable_tagger:
        config["disable_tagger"] = True
    assert nlp.add_pipe("tetra_tf", config=config).disable_tagger is disable_tagger
    doc = nlp(TEXTS[0])
    for sent in doc.sents:
        pos = [pos for _, pos in nltk.Tree.fromstring(sent._.parse_string).pos()]
        assert "XX" not in pos  # parse_string shows the parser's tags either way
        assert [token.tag_ for token in sent] == (["XX"] * len(sent) if disable_tagger
                                                  else pos)


def test_the_300_word_sentence(nlp):
    doc = nlp(LONG_TEXT)
    sents = list(doc.sents)
    assert len(sents) == 1
    tree = nltk.Tree.fromstring(sents[0]._.parse_string)
    assert len(tree.leaves()) == 301
    assert len(list(sents[0]._.constituents)) >= 301


def test_pipe_batches_sentences_of_many_docs_shortest_together(nlp, tiny_export_dir):
    component = nlp.get_pipe("tetra_tf")
    calls = []
    serve = component.parser._serve

    def recording_serve(sentences):
        calls.append([s.decode("utf-8") for s in sentences.numpy()])
        return serve(sentences=sentences)

    texts = TEXTS + ["Another doc comes here. And one more sentence ."]
    single = [[s._.parse_string for s in nlp(text).sents] for text in texts]
    component.parser._serve = recording_serve
    try:
        docs = list(nlp.pipe(texts, batch_size=len(texts)))
    finally:
        component.parser._serve = serve
    sentences = [s for doc in docs for s in doc.sents if _word_tokens(s)]
    assert [[s._.parse_string for s in doc.sents] for doc in docs] == single
    assert len(calls) == math.ceil(len(sentences) / component.batch_size)
    assert all(len(call) <= component.batch_size for call in calls)
    # Shortest first; the calls themselves overlap (two at a time), so sort them back.
    lengths = sorted(([len(s) for s in call] for call in calls), key=min)
    for before, after in zip(lengths, lengths[1:]):
        assert max(before) <= min(after)  # shortest together
    # A model call mixes sentences of different docs.
    owners = {" ".join(sentence_words(_word_tokens(s))): i for i, doc in enumerate(docs)
              for s in doc.sents}
    assert any(len({owners[s] for s in call}) > 1 for call in calls)


def test_marginals_give_spans_the_parsers_probabilities_only_when_asked(nlp):
    """Each constituent span gets its outermost label's probability, each sentence its
    tree's, as Parser.parse_each(marginals=True) gives them; without marginals, None."""
    component = nlp.get_pipe("tetra_tf")
    plain = [nlp(text) for text in TEXTS]
    component.marginals = True  # as config={"marginals": True} sets it; the model loaded once
    try:
        docs = [nlp(text) for text in TEXTS]
    finally:
        component.marginals = False
    sents = [(sent, plain_sent) for doc, plain_doc in zip(docs, plain)
             for sent, plain_sent in zip(doc.sents, plain_doc.sents) if _word_tokens(sent)]
    results = component.parser.parse_each(
        [sentence_words(_word_tokens(sent)) for sent, _ in sents], marginals=True)
    chains = 0
    for (sent, plain_sent), result in zip(sents, results, strict=True):
        assert plain_sent._.tree_probability is None
        assert all(span._.constituent_probability is None
                   for span in plain_sent._.constituents)
        assert sent._.parse_string == plain_sent._.parse_string
        assert sent._.tree_probability == pytest.approx(result.tree_probability, abs=1e-5)
        indices = [token.i for token in _word_tokens(sent)]
        outermost = {}  # a chain's outermost bracket opens first
        for constituent in result.constituents:
            outermost.setdefault((indices[constituent.start], indices[constituent.end] + 1),
                                 constituent)
        with_probability = set()
        for span in sent._.constituents:
            expected = outermost.get((span.start, span.end))
            if expected is None:  # a word without a label, or a TOP root
                assert span._.constituent_probability is None
                continue
            with_probability.add((span.start, span.end))
            assert span._.labels[0] == expected.label
            # (1e-5: the same sentences batched otherwise sum in another order)
            assert span._.constituent_probability == pytest.approx(expected.probability,
                                                                   abs=1e-5)
            chains += len(span._.labels) > 1
            if span._.parent is not None:  # not the sentence's root
                assert span._.tree_probability is None
        assert with_probability == set(outermost)
    assert chains  # unary chains were checked


def test_span_marginals_give_sentences_the_parsers_labelled_spans_only_when_asked(nlp):
    """With span_marginals=p each sentence gets every labelled span of at least p as
    Parser.parse_each(span_marginals=p) gives them (labels, tokens, probabilities, order),
    and what marginals gives; without it, and on any other span, None."""
    from spacy.tokens import DocBin

    component = nlp.get_pipe("tetra_tf")
    plain = [nlp(text) for text in TEXTS]
    floor = 0.05
    component.span_marginals = floor  # as config={"span_marginals": 0.05} sets it
    try:
        docs = [nlp(text) for text in TEXTS]
    finally:
        component.span_marginals = None
    checked = 0
    for doc, plain_doc in zip(docs, plain, strict=True):
        sents = [sent for sent in doc.sents if _word_tokens(sent)]
        # The doc's sentences in one call, batched as the component batches them.
        results = component.parser.parse_each(
            [sentence_words(_word_tokens(sent)) for sent in sents],
            batch_size=component.batch_size, span_marginals=floor)
        for sent, result in zip(sents, results, strict=True):
            indices = [token.i for token in _word_tokens(sent)]
            spans = sent._.span_probabilities
            assert [(span.start, span.end, label) for span, label, _ in spans] == [
                (indices[c.start], indices[c.end] + 1, c.label)
                for c in result.span_marginals]
            assert [p for _, _, p in spans] == pytest.approx(
                [c.probability for c in result.span_marginals], abs=1e-6)
            assert all(p >= floor for _, _, p in spans)
            assert not any(span[0].is_space or span[-1].is_space for span, _, _ in spans)
            checked += len(spans)
            # What marginals gives comes too.
            assert sent._.tree_probability == pytest.approx(result.tree_probability,
                                                            abs=1e-6)
            assert any(c._.constituent_probability is not None for c in sent._.constituents)
            # Only a sentence has them.
            assert all(c._.span_probabilities is None for c in sent._.constituents
                       if c._.parent is not None)
        for plain_sent in plain_doc.sents:
            assert plain_sent._.span_probabilities is None
    assert checked
    # Kept through DocBin, as the rest of the parse.
    bin_ = DocBin(store_user_data=True)
    bin_.add(docs[0])
    restored = list(DocBin(store_user_data=True).from_bytes(bin_.to_bytes())
                    .get_docs(nlp.vocab))[0]
    assert [[(s.start, s.end, label, p) for s, label, p in sent._.span_probabilities]
            for sent in restored.sents] == [
        [(s.start, s.end, label, p) for s, label, p in sent._.span_probabilities]
        for sent in docs[0].sents]
    # A sentence over the signature's 256 words is refused alone, the others parsed.
    component.span_marginals = floor
    try:
        doc = nlp("The cat sat. " + "a " * 257 + ".")
    finally:
        component.span_marginals = None
    short, long_ = doc.sents
    assert short._.span_probabilities and short._.parse_error is None
    assert long_._.span_probabilities is None
    assert long_._.parse_error.startswith("too_many_words")


def test_doc_without_sentence_boundaries_names_the_fix(tiny_export_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("tetra_tf", config={"model_dir": tiny_export_dir})
    with pytest.raises(MissingSentencesError, match=r'nlp.add_pipe\("sentencizer"'):
        nlp("No sentencizer here.")
    assert nlp("")._.tetra_score == 0.0  # an empty doc needs no boundaries


def test_unparsed_doc_says_how_to_parse_it(nlp):
    doc = spacy.blank("en")("Not parsed .")
    with pytest.raises(ValueError, match="add the tetra_tf component"):
        doc[0:3]._.parse_string
    assert doc._.tetra_score is None


def test_docs_serialize_with_their_parses(nlp):
    from spacy.tokens import DocBin

    doc = nlp(TEXTS[0])
    bin_ = DocBin(store_user_data=True)
    bin_.add(doc)
    restored = list(DocBin(store_user_data=True).from_bytes(bin_.to_bytes())
                    .get_docs(nlp.vocab))[0]
    assert [s._.parse_string for s in restored.sents] == [s._.parse_string for s in doc.sents]
    assert restored._.tetra_score == doc._.tetra_score
    assert [t.tag_ for t in restored] == [t.tag_ for t in doc] and all(
        t.tag_ for t in doc)


@pytest.mark.slow
def test_entry_point_registers_the_factory_without_importing_tetra_tf(tiny_export_dir,
                                                                     parser, tmp_path):
    # The package metadata setup.py declares (what pip install writes), first on the path.
    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)],
                   cwd=REPO_ROOT, check=True, capture_output=True)
    script = (
        "import importlib.metadata, sys, spacy\n"
        "points = importlib.metadata.entry_points(group='spacy_factories')\n"
        "print([p.value for p in points if p.name == 'tetra_tf'])\n"
        "nlp = spacy.blank('en')\n"
        "print('tetra_tf' in sys.modules)  # spaCy imported the factory's module, not tetra_tf\n"
        "nlp.add_pipe('sentencizer')\n"
        f"nlp.add_pipe('tetra_tf', config={{'model_dir': {tiny_export_dir!r}}})\n"
        "print(next(nlp('The cat sat .').sents)._.parse_string)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), REPO_ROOT]),
               TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "['tetra_tf_spacy:make_tetra_tf']"
    assert lines[1] == "False"
    tree = parser.parse("The cat sat .".split())
    assert nltk.Tree.fromstring(lines[2]) == (tree if len(tree) > 1 else tree[0])


def test_bad_config_is_reported(tiny_export_dir, tmp_path):
    nlp = spacy.blank("en")
    with pytest.raises(ExportError, match="no SavedModel"):
        nlp.add_pipe("tetra_tf", config={"model_dir": str(tmp_path)})
    with pytest.raises(ExportError, match="^nowhere is neither an export's path nor a "
                       "packaged model's name"):
        spacy.blank("en").add_pipe("tetra_tf", config={"model_dir": "nowhere"})
    for key, value in (("disable_tagger", "maybe"), ("batch_size", "many"),
                       ("marginals", "maybe"), ("span_marginals", "maybe")):
        with pytest.raises(Exception, match=key):  # spaCy checks the factory's annotations
            spacy.blank("en").add_pipe("tetra_tf", config={"model_dir": tiny_export_dir,
                                                           key: value})
    with pytest.raises(ValueError, match="batch_size must be positive"):
        spacy.blank("en").add_pipe("tetra_tf", config={"model_dir": tiny_export_dir,
                                                       "batch_size": 0})
    for value in (1.5, -0.1):
        with pytest.raises(ValueError, match="^tetra_tf: span_marginals is a probability "
                                             f"from 0 to 1, got {value}$"):
            spacy.blank("en").add_pipe("tetra_tf", config={"model_dir": tiny_export_dir,
                                                           "span_marginals": value})
    # (spaCy refuses NaN in any config itself; the component, made directly, too.)
    with pytest.raises(ValueError, match="^tetra_tf: span_marginals is a probability "
                                         "from 0 to 1, got nan$"):
        TetraTfComponent(spacy.blank("en"), "tetra_tf", tiny_export_dir,
                         span_marginals=float("nan"))
    assert tetra_tf_spacy.FACTORY_NAME == "tetra_tf"


def _with_sentences(doc):
    """The doc with one sentence per "." (as a sentencizer would set them)."""
    for token in doc:
        token.is_sent_start = token.i == 0 or doc[token.i - 1].text == "."
    return doc


def test_error_handler_gets_a_doc_without_sentences_and_the_others_parse(tiny_export_dir):
    nlp = spacy.blank("en")  # no sentencizer: docs come with or without boundaries
    nlp.add_pipe("tetra_tf", config={"model_dir": tiny_export_dir, "batch_size": 4})
    handled = []
    nlp.set_error_handler(lambda name, component, docs, error: handled.append(
        (name, [doc.text for doc in docs], error)))
    docs = [_with_sentences(nlp.make_doc("The cat sat . She left .")),
            nlp.make_doc("No boundaries here ."),
            _with_sentences(nlp.make_doc("Hi ."))]
    out = list(nlp.pipe(docs, batch_size=3))
    assert [doc.text for doc in out] == [docs[0].text, docs[2].text]
    ((name, texts, error),) = handled
    assert name == "tetra_tf" and texts == ["No boundaries here ."]
    assert isinstance(error, MissingSentencesError)
    for doc in out:
        for sent in doc.sents:
            assert sent._.parse_string is not None and sent._.parse_error is None
    assert [s._.parse_string for s in out[0].sents] == [
        s._.parse_string for s in nlp(_with_sentences(nlp.make_doc(docs[0].text))).sents]


def test_refused_sentences_get_their_reason_and_the_rest_of_the_doc_parses(nlp):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    component = nlp.get_pipe("tetra_tf")
    serve = component.parser._serve

    def refusing_serve(sentences):  # the graph refuses a call holding REJECT
        if any(b"REJECT" in s.split(b" ") for s in sentences.numpy()):
            raise tf.errors.InvalidArgumentError(None, None, "REJECT refused")
        return serve(sentences=sentences)

    many = 33_000  # more words than the export's pieces per call (32,768)
    text = "The cat sat . " + "w " * many + ". She said REJECT here . Hi ."
    component.parser._serve = refusing_serve
    try:
        doc = nlp(text)
    finally:
        component.parser._serve = serve
    sents = list(doc.sents)
    assert [len(_word_tokens(s)) for s in sents] == [4, many + 1, 5, 2]
    over, refused = sents[1], sents[2]
    assert over._.parse_error.startswith(f"too_many_pieces: {many + 1} words")
    assert refused._.parse_error == "rejected: REJECT refused"
    for sent in (over, refused):
        assert sent._.parse_string is None and sent._.labels == ()
        assert list(sent._.constituents) == [] and sent._.parse_score is None
        assert sent[0:2]._.parse_error == sent._.parse_error  # any span inside it
    for sent in (sents[0], sents[3]):
        assert sent._.parse_error is None
        assert sent._.parse_string == next(nlp(sent.text).sents)._.parse_string
    assert math.isclose(doc._.tetra_score, sents[0]._.parse_score + sents[3]._.parse_score,
                        abs_tol=1e-4)


def test_a_failing_model_goes_to_the_error_handler(tiny_export_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("tetra_tf", config={"model_dir": tiny_export_dir, "batch_size": 4})
    calls = []

    def failing(**inputs):
        calls.append(1)
        raise RuntimeError("the device is gone")

    nlp.get_pipe("tetra_tf").parser._serve = failing
    nlp.get_pipe("tetra_tf").parser.concurrent_calls = 1
    with pytest.raises(ModelError, match="the model failed: RuntimeError: the device is gone"):
        nlp("The cat sat . She left .")  # spaCy's default handler raises
    handled = []
    nlp.set_error_handler(lambda name, component, docs, error: handled.append(
        ([doc.text for doc in docs], error)))
    assert list(nlp.pipe(["A b .", "C d ."], batch_size=2)) == []
    ((texts, error),) = handled
    assert texts == ["A b .", "C d ."] and isinstance(error, ModelError)
    assert len(calls) == 2  # one call each time; no retries
    # nlp(text) hands the error to the same handler, and gives back the doc unparsed.
    doc = nlp("E f .")
    assert doc.text == "E f ." and doc._.get("tetra_tf") is None  # no parse data set
    assert [texts for texts, _ in handled[1:]] == [["E f ."]]
    assert isinstance(handled[1][1], ModelError) and len(calls) == 3


def test_default_batch_size_is_every_way_in_s(tiny_export_dir):
    from tetra_tf.contract.export_format import DEFAULT_BATCH_SIZE

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    component = nlp.add_pipe("tetra_tf", config={"model_dir": tiny_export_dir})
    assert nlp.get_pipe_config("tetra_tf")["batch_size"] is None
    assert component.batch_size == DEFAULT_BATCH_SIZE
    assert nlp.get_pipe_config("tetra_tf")["marginals"] is False
    assert component.marginals is False
    assert nlp.get_pipe_config("tetra_tf")["span_marginals"] is None
    assert component.span_marginals is None
    configured = spacy.blank("en").add_pipe(
        "tetra_tf", config={"model_dir": tiny_export_dir, "span_marginals": 0.25})
    assert configured.span_marginals == 0.25  # what the spans test sets on its component

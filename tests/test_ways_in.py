"""One sentence, one contract: the same odd lines through every way in (the parse CLI, the
REST and gRPC servers, Beam, `Parser` and the spaCy component) get the same tree (TOP
aside) or the same refusal reason; and the graph splits exactly as the host does. (Spark,
the seventh way in, gets the same lines on its cluster in test_spark.py.)"""

import contextlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import (REPO_ROOT, free_port, parse_with_copies_of, served_until_done,
                      subprocess_env)
from tetra_tf.contract import export_format, sentences

SERVER_SCRIPT = os.path.join(REPO_ROOT, "serving", "server.py")
PIECE_LIMIT_WORD = "!" * 8  # 8 pieces: the per-word cap


def odd_lines(max_pieces: int) -> list[str]:
    """Lines a user could send: every whitespace character inside a line, format
    characters, combining marks, brackets raw and escaped, PTB quotes of both sides (a ''
    after a space closes, as written), emoji, an over-long word, a sentence past the
    export's pieces, empty and blank lines."""
    lines = [f"New{char}York is big ." for char in sorted(sentences.WHITESPACE - {"\n"})]
    lines += [f"a{char}b c ." for char in ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff",
                                           "\u00ad", "\u180e")]
    lines += ["cafe\u0301 is e\u0301 \u0301 .", "( ) [ ] { } .", "-LRB- -RRB- -LSB- -RSB- "
              "-LCB- -RCB- .", "a(b c[d e{f} :-) .", "He said `` fine '' .",
              "'' Odd , '' she said -LRB- `` x '' -RRB- `` .",
              "smile \U0001F600 \U0001F44D\U0001F3FD "
              "\U0001F468\u200d\U0001F469\u200d\U0001F467 .", "a " + "!" * 60 + " word .",
              " ".join([PIECE_LIMIT_WORD] * (max_pieces // 8 + 1)), "", "  \t\u3000 ",
              "The cat sat on the mat ."]
    return lines


def _without_top(tree: str) -> str:
    """A tree string without its TOP root when TOP has one child (as spaCy shows it)."""
    from tetra_tf.trees import treebank

    parsed = treebank.parse_tree(tree)
    if parsed.label() == "TOP" and len(parsed) == 1:
        return treebank.tree_to_line(parsed[0])
    return treebank.tree_to_line(parsed)


# The two tiny exports (BERT's and MPNet's) and the names one server serves them under.
EXPORTS = {"bert": ("tiny_export_dir", "tetra"), "mpnet": ("tiny_mpnet_export_dir", "tetra_mpnet")}


@pytest.fixture(scope="module")
def ways_in_server(request, tmp_path_factory):
    """serving/server.py serving both tiny exports (--model_config_file), REST and gRPC,
    for the module's tests: yields (rest_port, grpc_port)."""
    pytest.importorskip("grpc")
    root = tmp_path_factory.mktemp("ways_in_server")
    configs = []
    for fixture, name in EXPORTS.values():
        base_path = os.path.dirname(request.getfixturevalue(fixture))
        configs.append(f'config {{ name: "{name}" base_path: "{base_path}" '
                       'model_platform: "tensorflow" }')
    (root / "models.config").write_text("model_config_list {\n%s\n}\n" % "\n".join(configs))
    rest_port, grpc_port = free_port(), free_port()
    log_path = str(root / "server.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, SERVER_SCRIPT, f"--model_config_file={root / 'models.config'}",
             f"--rest_api_port={rest_port}", f"--port={grpc_port}"],
            stdout=log, stderr=subprocess.STDOUT, env=subprocess_env(), cwd=REPO_ROOT)
    with served_until_done(process, rest_port, log_path,
                           model_names=tuple(name for _, name in EXPORTS.values())):
        yield rest_port, grpc_port


@pytest.fixture(scope="module")
def parsers():
    """parsers(export_dir): a Parser of the export, loaded once for the module."""
    from tetra_tf.parser import Parser

    loaded = {}

    def parser_of(export_dir: str) -> Parser:
        if export_dir not in loaded:
            loaded[export_dir] = Parser(export_dir)
        return loaded[export_dir]

    return parser_of


@pytest.fixture(scope="module")
def saved_model(tiny_export_dir):
    """The tiny export, loaded as a SavedModel (its signatures called directly)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    return tf.saved_model.load(tiny_export_dir)


@contextlib.contextmanager
def _loaded_once(parser):
    """Inside the block, a Parser made of parser's export (Beam's model handler, the spaCy
    component) is a copy of parser: the export loaded once. What each way in does with the
    lines is what this module compares; their own loads are tests/test_beam.py's and
    tests/test_spacy_component.py's."""
    with pytest.MonkeyPatch.context() as patch:
        parse_with_copies_of(parser, patch)
        yield


def _answer(tree: str | None = None, reason: str | None = None) -> tuple:
    if tree is not None:
        return ("tree", _without_top(tree) if tree else "")
    return ("reason", reason)


def _rest(port: int, model_name: str, line: str) -> tuple:
    body = json.dumps({"signature_name": "serving_default",
                       "inputs": {"sentences": [line]}, "output_filter": ["tree"]})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/{model_name}:predict",
                                     body.encode("utf-8"), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            outputs = json.load(response)["outputs"]
    except urllib.error.HTTPError as e:
        error = json.load(e)["error"]
        assert e.code == 400, error
        return _answer(reason=sentences.reason_in(error))
    tree = outputs["tree"] if isinstance(outputs, dict) else outputs
    return _answer(tree[0])


def _grpc(port: int, model_name: str, lines: list[str]) -> list[tuple]:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    answers = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for line in lines:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = model_name
            request.inputs["sentences"].CopyFrom(
                tf.make_tensor_proto([line.encode("utf-8")], dtype=tf.string))
            request.output_filter.append("tree")
            try:
                response = stub.Predict(request, timeout=120)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
                answers.append(_answer(reason=sentences.reason_in(e.details())))
                continue
            answers.append(_answer(response.outputs["tree"].string_val[0].decode("utf-8")))
    return answers


def _cli(parser, lines: list[str]) -> list[tuple]:
    """The parse CLI's run (what `python -m tetra_tf.parse --on_error=skip` calls)."""
    import io

    from tetra_tf import parse

    output, errors = io.BytesIO(), io.StringIO()
    parse.run(parser.export_dir, io.BytesIO(("\n".join(lines) + "\n").encode("utf-8")), output,
              parser=parser, on_error="skip", errors_file=errors)
    trees = output.getvalue().decode("utf-8").split("\n")[:-1]
    reasons = {}
    for error in errors.getvalue().splitlines():
        number, rest = error.split(": ", 1)
        reasons[int(number.split()[1])] = sentences.reason_in(rest)
    return [_answer(tree) if tree else _answer(reason=reasons[i + 1])
            for i, tree in enumerate(trees)]


def _beam(export_dir: str, lines: list[str], tmp_path) -> list[tuple]:
    from apache_beam.options.pipeline_options import PipelineOptions

    from tetra_tf.integrations import beam

    input_path = tmp_path / "beam_in" / "lines.txt"
    input_path.parent.mkdir()
    input_path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    output = tmp_path / "beam_out" / "trees"
    beam.run(beam.ParseOptions(model_dir=export_dir, inputs=[str(input_path)],
                               output=str(output)), PipelineOptions(runner="FnApiRunner"))
    answers = {}
    for path in output.parent.iterdir():
        for record in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
            answers[record["line"]] = (_answer(record["tree"]) if "tree" in record
                                       else _answer(reason=record["reason"]))
    return [answers[number] for number in range(1, len(lines) + 1)]


def _parser_answers(parser, lines: list[str]) -> list[tuple]:
    results = parser.parse_each([sentences.split_words(line) for line in lines])
    return [_answer(reason=result.reason) if isinstance(result, sentences.SentenceError)
            else _answer(result.bracketed) for result in results]


def _spacy(export_dir: str, lines: list[str]) -> list[tuple | None]:
    """The spaCy component on docs of the lines' words, each doc one sentence; None for a
    line without words (a doc without tokens has no sentence to parse or refuse). Each
    tree's leaves are the doc's tokens as they are, quotes included, with brackets escaped
    (a token that is a bracket as benepar writes it, -LRB-)."""
    spacy = pytest.importorskip("spacy")
    from spacy.tokens import Doc

    from tetra_tf.trees import treebank

    nlp = spacy.blank("en")
    nlp.add_pipe("tetra_tf", config={"model_dir": export_dir})
    docs = []
    for line in lines:
        words = sentences.split_words(line)
        docs.append(Doc(nlp.vocab, words=words,
                        sent_starts=[True] + [False] * (len(words) - 1) if words else None))
    answers = []
    for doc in nlp.pipe(docs):
        if not len(doc):
            answers.append(None)
            continue
        sentence = doc[:]
        error = sentence._.parse_error
        if error:
            answers.append(_answer(reason=sentences.reason_in(error)))
            continue
        tree = "(TOP " + sentence._.parse_string + ")"
        assert treebank.parse_tree(tree).leaves() == [
            sentences.escape_leaf(token.text) for token in doc], tree
        answers.append(("tree", _without_top(tree)))
    return answers


@pytest.mark.parametrize("encoder", list(EXPORTS))
def test_every_way_in_gives_the_same_tree_or_reason_for_every_line(encoder, ways_in_server,
                                                                   parsers, request, tmp_path):
    pytest.importorskip("apache_beam")

    # MPNet's export: other special tokens and a relative position bias, the same contract.
    fixture, model_name = EXPORTS[encoder]
    tiny_export_dir = request.getfixturevalue(fixture)
    parser = parsers(tiny_export_dir)
    lines = odd_lines(parser.sentence_limits.max_pieces)
    expected = _parser_answers(parser, lines)
    reasons = [answer[1] for answer in expected if answer[0] == "reason"]
    # The set covers refusals of both kinds and parses of every other line.
    assert reasons == [sentences.TOO_MANY_PIECES, sentences.EMPTY, sentences.EMPTY], reasons
    rest_port, grpc_port = ways_in_server
    with _loaded_once(parser):
        ways = {"cli": _cli(parser, lines),
                "beam": _beam(tiny_export_dir, lines, tmp_path),
                "rest": [_rest(rest_port, model_name, line) for line in lines],
                "grpc": _grpc(grpc_port, model_name, lines)}
        spacy_answers = _spacy(tiny_export_dir, lines)
    ways["spacy"] = [expected[i] if answer is None and expected[i] == ("reason", "empty")
                     else answer for i, answer in enumerate(spacy_answers)]
    for way, answers in ways.items():
        for line, want, got in zip(lines, expected, answers):
            assert got == want, (way, line[:80])
    # Whitespace inside a line separates words everywhere: "New York", never "New_York".
    for line, (kind, tree) in zip(lines[:len(sentences.WHITESPACE) - 1], expected):
        assert kind == "tree" and " New)" in tree and " York)" in tree, (line, tree)


def test_graph_splits_exactly_as_the_host_on_every_code_point():
    import numpy as np
    import tensorflow as tf

    from tetra_tf.savedmodel.exporter import split_sentences

    code_points = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    lines = np.array([f"a{chr(c)}b".encode("utf-8") for c in code_points], dtype=object)
    counts = split_sentences(tf.constant(lines)).row_lengths().numpy()
    host = np.array([len(sentences.split_words(f"a{chr(c)}b")) for c in code_points])
    different = [hex(c) for c, graph, python in zip(code_points, counts, host)
                 if graph != python]
    assert not different, different[:20]
    assert int((counts == 2).sum()) == len(sentences.WHITESPACE)


def test_saved_model_splits_each_whitespace_character(saved_model):
    import tensorflow as tf

    model = saved_model
    lines = [f"x{char}y" for char in sorted(sentences.WHITESPACE)]
    outputs = model.signatures["serving_default"](sentences=tf.constant(lines))
    assert outputs["num_words"].numpy().tolist() == [2] * len(lines)
    assert {tuple(row[:2]) for row in outputs["words"].numpy().tolist()} == {(b"x", b"y")}
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad_words"):
        model.signatures["parse_words"](words=tf.constant([["x\u00a0y"]]),
                                        num_words=tf.constant([1]))


# --------------------------------------------------------------------------------------
# Raw text: one paragraph through every way in that takes documents

PARAGRAPH = ("Mr. Smith went to Washington (D.C.) on Jan. 5. He said \u201cit\u2019s "
             "fine\u201d \u2014 and left\u2026  \u201cWasn't it?\u201d she asked. "
             "Prices rose 3.5% to $1,000.50!")
# TeX-style quotes, the closing one once after a space as in text tokenized once.
TEX_QUOTES = "He said ``it's fine '' and left. ``Really?'' she asked."


def _text_sentences(parser, text: str) -> list[tuple]:
    """(start, end, words, token starts, token ends, tree) per sentence: Parser.parse_text."""
    return [(s.start, s.end, s.words, [t.start for t in s.tokens], [t.end for t in s.tokens],
             s.result.bracketed) for s in parser.parse_text(text)]


def _text_outputs(outputs: dict, row: int = 0) -> list[tuple]:
    """The same tuples from a parse_text signature's outputs (arrays or nested lists)."""
    import numpy as np

    outputs = {name: np.asarray(value) for name, value in outputs.items()}
    found = []
    for s in range(int(outputs["num_sentences"][row])):
        n = int(outputs["num_words"][row][s])
        words = [w.decode("utf-8") if isinstance(w, bytes) else str(w)
                 for w in outputs["words"][row][s][:n]]
        tree = outputs["tree"][row][s]
        found.append((int(outputs["sentence_starts"][row][s]),
                      int(outputs["sentence_ends"][row][s]), words,
                      [int(x) for x in outputs["word_starts"][row][s][:n]],
                      [int(x) for x in outputs["word_ends"][row][s][:n]],
                      tree.decode("utf-8") if isinstance(tree, bytes) else str(tree)))
    return found


def _rest_text(port: int, texts: list[str]) -> list[list[tuple]]:
    body = json.dumps({"signature_name": "parse_text", "instances": texts})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/tetra:predict",
                                     body.encode("utf-8"), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        predictions = json.load(response)["predictions"]
    return [_text_outputs({name: [value] for name, value in prediction.items()})
            for prediction in predictions]


def _grpc_text(port: int, texts: list[str]) -> list[list[tuple]]:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "tetra"
        request.model_spec.signature_name = "parse_text"
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(
            [text.encode("utf-8") for text in texts], dtype=tf.string))
        response = stub.Predict(request, timeout=120)
    outputs = {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}
    return [_text_outputs(outputs, row) for row in range(len(texts))]


def _cli_documents(parser, texts: list[str]) -> list[list[tuple]]:
    """`python -m tetra_tf.parse --documents`' run: line, sentence, start, end, tree."""
    import io

    from tetra_tf import parse

    output = io.BytesIO()
    parse.run(parser.export_dir, io.BytesIO(("\n".join(texts) + "\n").encode("utf-8")),
              output, parser=parser, documents=True)
    by_line = {number: [] for number in range(1, len(texts) + 1)}
    for row in output.getvalue().decode("utf-8").splitlines():
        number, index, start, end, tree = row.split("\t")
        assert int(index) == len(by_line[int(number)]) + 1, row
        by_line[int(number)].append((int(start), int(end), tree))
    return [by_line[number] for number in sorted(by_line)]


def test_a_paragraph_gets_the_same_sentences_tokens_offsets_and_trees_everywhere(
        ways_in_server, tiny_export_dir, parsers, saved_model):
    import tensorflow as tf

    parser = parsers(tiny_export_dir)
    texts = [PARAGRAPH, "", " \t\u3000", "One sentence without an end", TEX_QUOTES]
    expected = [_text_sentences(parser, text) for text in texts]
    # Quotes keep the side they are written with.
    assert [s[2] for s in expected[4]] == [
        ["He", "said", "``", "it", "'s", "fine", "''", "and", "left", "."],
        ["``", "Really", "?", "''", "she", "asked", "."]]
    # Its sentences' words, as a Doc of PTB words, get the same trees from spaCy.
    with _loaded_once(parser):
        assert _spacy(tiny_export_dir, [" ".join(s[2]) for s in expected[4]]) == [
            _answer(s[5]) for s in expected[4]]
    # The paragraph's three sentences ("…" ends none), each token's offsets its surface.
    assert [s[2][:2] for s in expected[0]] == [["Mr.", "Smith"], ["He", "said"],
                                               ["Prices", "rose"]]
    assert expected[1] == expected[2] == [] and len(expected[3]) == 1
    for sentence in expected[0]:
        assert PARAGRAPH[sentence[0]:sentence[1]].strip()
        for word, start, end in zip(*sentence[2:5]):
            assert PARAGRAPH[start:end] in (word, "\u201c", "\u201d", "\u2014", "\u2026",
                                           "\u2019s", "(", ")"), (word, PARAGRAPH[start:end])
    rest_port, grpc_port = ways_in_server
    model = saved_model
    in_graph = model.signatures["parse_text"](text=tf.constant(texts))
    ways = {"graph": [_text_outputs({k: v.numpy() for k, v in in_graph.items()}, row)
                      for row in range(len(texts))],
            "rest": _rest_text(rest_port, texts),
            "grpc": _grpc_text(grpc_port, texts)}
    for way, answers in ways.items():
        assert answers == expected, way
    # A request of blank texts: no sentences, no model call to fail.
    blank = model.signatures["parse_text"](text=tf.constant(["", " "]))
    assert blank["num_sentences"].numpy().tolist() == [0, 0]
    assert _rest_text(rest_port, ["", " "]) == [[], []]
    assert _cli_documents(parser, texts) == [[(s[0], s[1], s[5]) for s in document]
                                             for document in expected]


def test_marginals_are_the_same_from_the_parser_rest_and_grpc(ways_in_server, tiny_export_dir,
                                                              parsers):
    """parse_marginals through the server: each prediction's constituent probabilities (cut
    to its own count) and tree probability are Parser.parse_each(marginals=True)'s."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    lines = ["The cat sat on the mat .", "Hi", "a b c"]
    expected = [(result.bracketed, result.tree_probability, result.constituent_marginals)
                for result in parsers(tiny_export_dir).parse_each(
                    [line.split() for line in lines], marginals=True)]
    rest_port, grpc_port = ways_in_server
    body = json.dumps({"signature_name": "parse_marginals", "instances": lines})
    request = urllib.request.Request(f"http://127.0.0.1:{rest_port}/v1/models/tetra:predict",
                                     body.encode("utf-8"), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        predictions = json.load(response)["predictions"]
    # A request's constituent_marginals are cut to its own most constituents.
    assert {len(p["constituent_marginals"]) for p in predictions} == {
        max(len(m) for _, _, m in expected)}
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        grpc_request = predict_pb2.PredictRequest()
        grpc_request.model_spec.name = "tetra"
        grpc_request.model_spec.signature_name = "parse_marginals"
        grpc_request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(lines, dtype=tf.string))
        outputs = {name: tf.make_ndarray(proto) for name, proto in prediction_service_pb2_grpc
                   .PredictionServiceStub(channel).Predict(grpc_request, timeout=120)
                   .outputs.items()}
    for row, (tree, tree_probability, marginals) in enumerate(expected):
        for way, prediction in (("rest", predictions[row]),
                                ("grpc", {k: v[row] for k, v in outputs.items()})):
            count = int(prediction["num_constituents"])
            assert prediction["tree"] in (tree, tree.encode()), way
            assert count == len(marginals), way
            assert np.allclose(prediction["constituent_marginals"][:count], marginals), way
            assert np.isclose(prediction["tree_probability"], tree_probability), way


def test_span_marginals_are_the_same_from_the_parser_rest_and_grpc(ways_in_server,
                                                                   tiny_export_dir, parsers):
    """parse_span_marginals through the server: each prediction's labelled spans (cut to
    its own count) are Parser.parse_each(span_marginals=...)'s, floors per sentence."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    lines = ["The cat sat on the mat .", "Hi", "a b c"]
    floors = [0.1, 0.0, 0.3]
    # Every span of each sentence alone, then those at or above its floor (a span within
    # float noise of the floor may be on either side of it in a batch of other widths).
    every = [{(span.label, span.start, span.end): span.probability
              for span in result.span_marginals} for result in parsers(tiny_export_dir).parse_each(
                 [line.split() for line in lines], span_marginals=0.0)]
    must = [{key for key, p in spans.items() if p >= floor + 1e-5}
            for spans, floor in zip(every, floors)]
    may = [{key for key, p in spans.items() if p >= floor - 1e-5}
           for spans, floor in zip(every, floors)]
    rest_port, grpc_port = ways_in_server
    body = json.dumps({"signature_name": "parse_span_marginals", "instances": [
        {"sentences": line, "min_probability": floor} for line, floor in zip(lines, floors)]})
    request = urllib.request.Request(f"http://127.0.0.1:{rest_port}/v1/models/tetra:predict",
                                     body.encode("utf-8"), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        predictions = json.load(response)["predictions"]
    # A request's span outputs are cut to its own most spans.
    assert {len(p["span_probabilities"]) for p in predictions} == {
        max(int(p["num_spans"]) for p in predictions)}
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        grpc_request = predict_pb2.PredictRequest()
        grpc_request.model_spec.name = "tetra"
        grpc_request.model_spec.signature_name = "parse_span_marginals"
        grpc_request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(lines, dtype=tf.string))
        grpc_request.inputs["min_probability"].CopyFrom(
            tf.make_tensor_proto(floors, dtype=tf.float32))
        outputs = {name: tf.make_ndarray(proto) for name, proto in prediction_service_pb2_grpc
                   .PredictionServiceStub(channel).Predict(grpc_request, timeout=120)
                   .outputs.items()}
    for row in range(len(lines)):
        assert must[row]
        for way, prediction in (("rest", predictions[row]),
                                ("grpc", {k: v[row] for k, v in outputs.items()})):
            count = int(prediction["num_spans"])
            labels = [label if isinstance(label, str) else label.decode()
                      for label in prediction["span_labels"][:count]]
            got = {(label, int(start), int(end)): float(p) for label, start, end, p in zip(
                labels, prediction["span_starts"], prediction["span_ends"],
                prediction["span_probabilities"])}
            assert len(got) == count and must[row] <= set(got) <= may[row], way
            for key, p in got.items():
                assert p == pytest.approx(every[row][key], abs=1e-5), (way, key)


def test_constrained_parses_are_the_same_from_the_parser_rest_and_grpc(ways_in_server,
                                                                        tiny_export_dir):
    """parse_constrained through the server: each answer is
    Parser.parse_each(constraints=...)'s, an unsatisfiable row comes back unsatisfied with
    no tree, and bad constraints are a 400 naming bad_constraints."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from tetra_tf.decode import constraints as constraints_lib
    from tetra_tf.decode.constraints import Constraints
    from tetra_tf.parser import Parser

    parser = Parser(tiny_export_dir)
    lines = ["The cat sat on the mat .", "Hi", "a b c"]
    constraint_sets = [Constraints(forced=[(0, 1, "NP"), (3, 5)], forbidden=[(2, 3)],
                                   pos_tags=[None, "NN"] + [None] * 5),
                       None,
                       Constraints(forced=[(0, 1)], forbidden=[(0, 1), (1, 2)])]
    expected = parser.parse_each([line.split() for line in lines],
                                 constraints=constraint_sets[:2] + [None])
    inputs = constraints_lib.as_inputs(constraint_sets)
    rest_port, grpc_port = ways_in_server

    def rest(rows):
        instances = [{"sentences": lines[row],
                      **{name: inputs[name][row].tolist()
                         for name in export_format.CONSTRAINT_INPUTS}}
                     for row in rows]
        for instance in instances:
            instance["forced_labels"] = [x.decode() for x in instance["forced_labels"]]
            instance["given_pos_tags"] = [x.decode() for x in instance["given_pos_tags"]]
        body = json.dumps({"signature_name": "parse_constrained", "instances": instances})
        request = urllib.request.Request(
            f"http://127.0.0.1:{rest_port}/v1/models/tetra:predict", body.encode("utf-8"),
            {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)["predictions"]

    predictions = rest([0, 1, 2])
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        grpc_request = predict_pb2.PredictRequest()
        grpc_request.model_spec.name = "tetra"
        grpc_request.model_spec.signature_name = "parse_constrained"
        grpc_request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(lines, dtype=tf.string))
        for name in export_format.CONSTRAINT_INPUTS:
            grpc_request.inputs[name].CopyFrom(tf.make_tensor_proto(inputs[name]))
        outputs = {name: tf.make_ndarray(proto) for name, proto in prediction_service_pb2_grpc
                   .PredictionServiceStub(channel).Predict(grpc_request, timeout=120)
                   .outputs.items()}
    for way, answers in (("rest", predictions),
                         ("grpc", [{k: v[row] for k, v in outputs.items()} for row in range(3)])):
        for row in range(2):
            assert bool(answers[row]["satisfied"]), way
            assert answers[row]["tree"] in (expected[row].bracketed,
                                             expected[row].bracketed.encode()), way
        assert not answers[2]["satisfied"] and answers[2]["tree"] in ("", b""), way
    # Rows of one request padded to its widest constraints equal the same rows alone.
    assert [p["tree"] for p in rest([0])] == [predictions[0]["tree"]]
    assert [p["tree"] for p in rest([1])] == [predictions[1]["tree"]]
    body = json.dumps({"signature_name": "parse_constrained", "instances": [{
        "sentences": "a b", "forced_spans": [[0, 5]], "forced_labels": [""],
        "forbidden_spans": [[-1, -1]], "given_pos_tags": [""]}]})
    request = urllib.request.Request(f"http://127.0.0.1:{rest_port}/v1/models/tetra:predict",
                                     body.encode("utf-8"), {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=120)
    assert error.value.code == 400
    assert "bad_constraints: a span of forced_spans" in error.value.read().decode()

"""End-to-end parsing throughput of the exported SavedModel, next to its encoder alone.

For the NLTK-sample test split and for a set of long sentences (test sentences joined to
100–400 words), at batch sizes 1, 16 and 64, sentences sorted by length (plus the test
split in file order at batch 64), prints sentences per second of:

* end to end: words in → tree strings out, one `serving_default` call per batch (Python
  word lists joined into the request tensor, the trees fetched as numpy), as many calls in
  flight as Parser makes;
* encoder: the same batches, tokenized and packed beforehand, through the SavedModel's
  `encode` function (BERT + the three linear heads) alone;
* Parser: `tetra_tf.Parser.parse_sents`, i.e. end to end plus nltk.Tree objects, with
  its default two model calls at once (batches overlapping) and with one at a time;
* plain Keras encoder: a `BertEncoderV2` of the same architecture in a plain tf.function on
  the same batches, each padded to its longest sentence (the baseline that BASELINES.md
  measured at 280 sents/s on an idle machine), to calibrate against load from others;
* reference: the reference implementation's pipeline (bench/reference_pipeline.py:
  HF tokenizer, PyTorch MiniLM, per-sentence NumPy decoder, nltk trees) on the same
  sentences and batches, in a subprocess whose passes alternate with ours: after each of
  our passes (every export's), one of the reference's (--noreference to skip);

TensorFlow's thread pools are sized as `Parser` sizes them in a new process (each of its
concurrent calls on its share of the cores: `tetra_tf.cpu.share_cores`) unless
--intra_op_threads/--inter_op_threads set them. So the one-call-at-a-time figures (the
per-batch timings, Parser one call at a time, the matmul peak) run on one call's share of
the cores: on a 2-core CPU, one core.

With --compare_export_dir, further exports (of the same model exported with
--encoder_dtype=bfloat16, or of another encoder: the MPNet model beside the MiniLM one) are
measured the same way right after the first, on the same batches, beside the same
reference run; each is named by its encoder, compute dtype and packing. The header names the CPU and its vector
extensions and TensorFlow's best 2048 × 2048 matmul in float32 and bfloat16 (the practical
peak); a second table gives, per export, the milliseconds per sentence of tokenization,
the encoder, the rest of the graph (decoding, tree strings) and the host's nltk Trees
(parse_sents − parse_each), and the encoder's GFLOPS on real pieces against that peak.
With --f1, each export's test-split F1 (gold POS, tools/eval_export.py).

Also the share of end-to-end time spent outside the encoder (splitting, tokenization,
windows, log-softmax, decoding, tree strings, host transfers). Each batch is timed
end to end, encoder-only and plain back to back. The end-to-end, Parser and reference
figures are each the best of --repeats whole passes (the reference's: the best of all
its passes, one after each of ours, so that drift in the machine's speed, 10-30% within
minutes on a shared VM, reaches both sides alike);
the encoder and plain figures and the outside-encoder share sum every batch's best of the
passes, so that bursts of load from other processes skew them little and alike.

The model: --export_dir (an export), --checkpoint (a training model directory, exported
to a temporary directory), or by default the bundled all-MiniLM-L6-v2 with random tag
heads (vocabularies of the NLTK-sample training split): the speed is the same as a
trained model's.

Usage: python bench/throughput.py [--export_dir=DIR | --checkpoint=MODEL_DIR] [--repeats=3]
    [--compare_export_dir=DIR[,DIR...]] [--f1] [--intra_op_threads=N] [--inter_op_threads=N]
    [--batch_sizes=1,16,64] [--noreference]
Exit codes: 0 success, 1 failure, 2 usage error (e.g. NLTK sample not found).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import os
import random
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tetra_tf import train_extra  # noqa: E402,F401  (first: Keras 2 before TensorFlow loads)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags, logging  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import reference_pipeline  # noqa: E402  (imports neither torch nor TF)
from bench.minilm_model import default_model_dir, test_split_sentences  # noqa: E402
from tetra_tf import cpu  # noqa: E402
from tetra_tf.contract import export_format
from tetra_tf.parser import DEFAULT_CONCURRENT_CALLS, Parser  # noqa: E402
from tetra_tf.savedmodel import exporter as export
from tetra_tf.training import encoders
from tetra_tf.training import model_dir as model_dir_lib  # noqa: E402
from tetra_tf.training.model import ENCODER_INPUTS  # noqa: E402
from tetra_tf.training.model_dir import TaggerSpec  # noqa: E402
from tetra_tf.trees import treebank

_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "An exported SavedModel to measure.")
# Not --model_dir: tetra_tf.train (imported by export) defines that flag.
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "A training model directory (or checkpoint) to export and measure.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed passes; the best is reported.")
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", ["1", "16", "64"], "Batch sizes.")
_INTRA = flags.DEFINE_integer("intra_op_threads", 0,
                              "TF intra-op threads (0: as Parser sizes them, cpu.share_cores).")
_INTER = flags.DEFINE_integer("inter_op_threads", 0,
                              "TF inter-op threads (0: as Parser sizes them).")
_NUM_LONG = flags.DEFINE_integer("num_long", 48, "Long sentences (100–400 words).")
_SKIP_PARSER = flags.DEFINE_bool("skip_parser", False, "Do not time tetra_tf.Parser.")
_REFERENCE = flags.DEFINE_bool(
    "reference", True, "Also time the reference pipeline (bench/reference_pipeline.py, "
    "PyTorch, in a subprocess) on the same sentences and batches.")
_FILE_ORDER = flags.DEFINE_bool("file_order", True,
                                "Also time the test split in file order at batch 64.")
_COMPARE = flags.DEFINE_list(
    "compare_export_dir", [], "Further exports (e.g. the same model exported with "
    "--encoder_dtype=bfloat16, or another encoder's) measured side by side with the first, "
    "batch by batch.")
_F1 = flags.DEFINE_bool("f1", False, "Also score each export on the test split "
                        "(tools/eval_export.py, gold POS; meaningless for random heads).")


def long_sentences(sentences: list[list[str]], count: int, seed: int = 0) -> list[list[str]]:
    """`count` sentences of 100–400 words, each test sentences joined end to end."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        target = 100 + (300 * i) // max(count - 1, 1)
        words: list[str] = []
        while len(words) < target:
            words += rng.choice(sentences)
        out.append(words[:target])
    return out


def make_batches(sentences: list[list[str]], batch_size: int,
                 sort: bool = True) -> list[list[list[str]]]:
    """Batches after sorting by length (characters of the joined words), or in file order."""
    ordered = sorted(sentences, key=lambda words: len(" ".join(words))) if sort else sentences
    return [ordered[i:i + batch_size] for i in range(0, len(ordered), batch_size)]


def dense_words(batch: list[list[str]]) -> tuple[tf.Tensor, tf.Tensor]:
    width = max(len(words) for words in batch)
    array = np.full((len(batch), width), "", dtype=object)
    for row, words in enumerate(batch):
        array[row, :len(words)] = words
    return tf.constant(array), tf.constant([len(words) for words in batch], tf.int32)


def plain_encoder_function(config):
    """The encoder alone in a plain tf.function over flat [batch, length] inputs."""
    encoder = encoders.build_encoder(config)
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec, spec])
    def encode(input_word_ids, input_mask, input_type_ids):
        return encoder(dict(input_word_ids=input_word_ids, input_mask=input_mask,
                            input_type_ids=input_type_ids), training=False)["sequence_output"]

    return encode


def matmul_gflops(dtype: tf.DType, size: int = 2048, repeats: int = 10) -> float:
    """The best GFLOPS of one size × size matmul in TensorFlow: the CPU's practical peak."""
    matrix = tf.cast(tf.random.normal([size, size]), dtype)
    multiply = tf.function(lambda x: tf.matmul(x, x))
    multiply(matrix).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        multiply(matrix).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


def encoder_flops(window_pieces: np.ndarray, encoder: dict) -> float:
    """The encoder's floating-point operations on the real pieces of the given windows
    (padding not counted): per layer, each piece's dense projections (2 · (4h² + 2hi)) and
    each window's attention scores and mixing (4 · n² · h)."""
    hidden, inner, layers = (encoder["hidden_size"], encoder["intermediate_size"],
                             encoder["layers"])
    pieces = float(window_pieces.sum())
    attention = 4.0 * float((window_pieces.astype(np.float64) ** 2).sum()) * hidden
    return layers * (2.0 * (4 * hidden * hidden + 2 * hidden * inner) * pieces + attention)


def test_split_f1(export_dir: str) -> float:
    """An export's F1 on the NLTK sample's test split (gold POS, COLLINS.prm), scored by
    tools/eval_export.py."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                        "eval_export.py")
    spec = importlib.util.spec_from_file_location("eval_export", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    trees = [treebank.clean_tree(entry.tree) for entry in treebank.read_nltk_sample("test")
             if entry.tree is not None]
    result, _, _ = tool.score_export(export_dir, [tree for tree in trees if tree.leaves()])
    return result.fscore


def measure(model, parser, plain_encoder, sentences: list[list[str]], batch_size: int,
            repeats: int, sort: bool = True,
            after_each_pass: Callable[[], None] | None = None) -> dict:
    """Best-of-`repeats` seconds over all batches: end to end, encoder, Parser, plain.

    after_each_pass: called after each timed pass (e.g. one reference pass).
    """
    serve = model.signatures[export_format.SERVING_SIGNATURE]
    batches = make_batches(sentences, batch_size, sort)
    encoder_inputs, plain_inputs, window_pieces, word_inputs = [], [], [], []
    for batch in batches:
        word_inputs.append(dense_words(batch))
        packed = model.tokenize(*word_inputs[-1])
        window_pieces.append(packed["input_mask"].numpy().sum(axis=-1).ravel())
        encoder_inputs.append([packed[key] for key in ENCODER_INPUTS + ("word_end_positions",)])
        # The plain encoder gets the batch padded to its longest window (multiple of 8).
        mask = packed["input_mask"].numpy()
        length = mask.shape[2]
        trim = min(length, -(-max(int(mask.sum(axis=2).max()), 1) // 8) * 8)
        plain_inputs.append([tf.reshape(packed[key], [-1, length])[:, :trim]
                             for key in ENCODER_INPUTS])

    def end_to_end(batch):
        return serve(sentences=tf.constant([" ".join(words) for words in batch]))[
            "tree"].numpy()

    def encoder_only(inputs):
        outputs = model.encode(*inputs)
        return [value.numpy() for value in outputs.values()]

    def plain(inputs):
        return plain_encoder(*inputs).numpy()

    def tokenize(inputs):
        return [value.numpy() for value in model.tokenize(*inputs).values()]

    # Warm up every batch shape once.
    for batch, inputs, flat, words in zip(batches, encoder_inputs, plain_inputs, word_inputs):
        end_to_end(batch)
        encoder_only(inputs)
        tokenize(words)
        if plain_encoder is not None:
            plain(flat)
    # Per batch, the best of the passes: robust to bursts of load from other processes.
    per_batch = {key: [float("inf")] * len(batches)
                 for key in ("end_to_end", "encoder", "plain", "tokenize")}
    best = {"parser": float("inf"), "parser_one_call": float("inf"),
            "end_to_end_pass": float("inf")}
    in_flight = parser.concurrent_calls if parser is not None else DEFAULT_CONCURRENT_CALLS
    for _ in range(repeats):
        for i, (batch, inputs, flat, words) in enumerate(zip(batches, encoder_inputs,
                                                              plain_inputs, word_inputs)):
            runs = [("encoder", encoder_only, inputs), ("end_to_end", end_to_end, batch),
                    ("tokenize", tokenize, words)]
            if plain_encoder is not None:
                runs.append(("plain", plain, flat))
            for key, fn, arg in runs:
                start = time.perf_counter()
                fn(arg)
                per_batch[key][i] = min(per_batch[key][i], time.perf_counter() - start)
        # The end-to-end time of a whole pass, as the reference pipeline reports it, with
        # as many calls in flight as Parser makes (each on its share of the cores).
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(in_flight) as pool:
            list(pool.map(end_to_end, batches))
        best["end_to_end_pass"] = min(best["end_to_end_pass"], time.perf_counter() - start)
        if parser is not None and sort:
            # Its default (batches overlapping, concurrent_calls model calls at once), then
            # one call at a time.
            for key, calls in (("parser", parser.concurrent_calls), ("parser_one_call", 1)):
                default, parser.concurrent_calls = parser.concurrent_calls, calls
                try:
                    start = time.perf_counter()
                    parser.parse_sents(sentences, batch_size=batch_size)
                    best[key] = min(best[key], time.perf_counter() - start)
                finally:
                    parser.concurrent_calls = default
            # The same without nltk Trees (the graph's tree strings): the host trees' cost.
            start = time.perf_counter()
            parser.parse_each(sentences, batch_size=batch_size)
            best["parse_each"] = min(best.get("parse_each", float("inf")),
                                     time.perf_counter() - start)
        if after_each_pass is not None:
            after_each_pass()
    best.update({key: sum(times) for key, times in per_batch.items()})
    best["window_pieces"] = np.concatenate(window_pieces)
    return best


def main(argv):
    del argv
    # As Parser would size them, unless the flags choose the sizes.
    cpu.share_cores(DEFAULT_CONCURRENT_CALLS, intra_op=_INTRA.value or None,
                    inter_op=_INTER.value or None)
    try:
        test = test_split_sentences()
    except treebank.NltkSampleNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.set_verbosity(logging.WARNING)
    with tempfile.TemporaryDirectory() as scratch:
        export_dir = _EXPORT_DIR.value
        model_dir = None
        if export_dir is None:
            checkpoint = _CHECKPOINT.value or default_model_dir(os.path.join(scratch, "model"))
            export_dir = os.path.join(scratch, "export", "1")
            started = time.time()
            export.export(checkpoint, export_dir)
            print(f"exported {checkpoint} in {time.time() - started:.1f} s")
            model_dir = model_dir_lib.resolve_checkpoint(checkpoint)[0]
        exports = [export_dir] + list(_COMPARE.value)
        started = time.time()
        parsers = [Parser(directory) for directory in exports]
        cards = [export_format.read_card(directory) for directory in exports]
        names = [f"{os.path.basename(card['encoder'].get('name') or '?')}, "
                 f"{card['encoder'].get('compute_dtype', 'float32')}, pack "
                 f"{card['encoder'].get('pack_length', 0)}" for card in cards]
        print(f"CPU: {cpu.describe()}")
        peaks = {dtype.name: matmul_gflops(dtype) for dtype in (tf.float32, tf.bfloat16)}
        print("TensorFlow's best 2048 × 2048 matmul (the practical peak): "
              + ", ".join(f"{name} {gflops:.0f} GFLOPS" for name, gflops in peaks.items()))
        print(f"loaded {len(exports)} SavedModel(s) in {time.time() - started:.1f} s "
              f"({'; '.join(f'{d}: {n}' for d, n in zip(exports, names))}); TensorFlow's "
              f"threads: intra-op {tf.config.threading.get_intra_op_parallelism_threads()}, "
              f"inter-op {tf.config.threading.get_inter_op_parallelism_threads()} (0: default)")
        long = long_sentences(test, _NUM_LONG.value)
        batch_sizes = [int(b) for b in _BATCH_SIZES.value]
        runs = [("test split", test, b, True) for b in batch_sizes]
        runs += [("test split, file order", test, 64, False)] if _FILE_ORDER.value else []
        runs += [("long (100-400 words)", long, b, True) for b in batch_sizes]
        plain_encoder = plain_encoder_function(TaggerSpec.load(model_dir).encoder) \
            if model_dir else None
        print("| sentences | batch | export | e2e sents/s | encoder sents/s | outside encoder "
              f"| Parser (nltk), {parsers[0].concurrent_calls} calls at once, sents/s "
              "| Parser, 1 call at a time | plain Keras encoder sents/s "
              "| reference e2e sents/s | e2e / reference | Parser / reference |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        breakdowns = []
        for name, sentences, batch_size, sort in runs:
            words = sum(len(s) for s in sentences)
            label = f"{name}: {len(sentences)} sents, {words / len(sentences):.1f} words avg"
            n = len(sentences)
            reference = None
            with contextlib.ExitStack() as stack:
                reference_process = None
                reference_seconds: list[float] = []
                if _REFERENCE.value:
                    path = os.path.join(scratch, "sentences.txt")
                    reference_pipeline.write_sentences_file(sentences, path)
                    reference_process = stack.enter_context(reference_pipeline.ReferenceProcess(
                        path, batch_size=batch_size, sort=sort))

                def after_each_pass():
                    if reference_process is not None:
                        reference_seconds.append(reference_process.timed_pass())
                results = [measure(parser.model, None if _SKIP_PARSER.value else parser,
                                   plain_encoder if index == 0 else None, sentences,
                                   batch_size, _REPEATS.value, sort, after_each_pass)
                           for index, parser in enumerate(parsers)]
            if reference_seconds:
                reference = n / min(reference_seconds)
            for export_name, card, best in zip(names, cards, results):
                e2e_rate = n / best["end_to_end_pass"]
                share = 100.0 * (1.0 - best["encoder"] / best["end_to_end"])
                parser_rate, parser_one_call_rate = (
                    "-" if best[key] == float("inf") else f"{n / best[key]:.1f}"
                    for key in ("parser", "parser_one_call"))
                plain_rate = f"{n / best['plain']:.1f}" if best["plain"] != float("inf") \
                    and plain_encoder else "-"
                ratios = ["-", "-"]
                if reference:
                    ratios[0] = f"{e2e_rate / reference:.2f}x"
                    if best["parser"] != float("inf"):
                        ratios[1] = f"{n / best['parser'] / reference:.2f}x"
                print(f"| {label} | {batch_size} | {export_name} | {e2e_rate:.1f} | "
                      f"{n / best['encoder']:.1f} | {share:.1f}% | {parser_rate} | "
                      f"{parser_one_call_rate} | {plain_rate} | "
                      f"{f'{reference:.1f}' if reference else '-'} | {ratios[0]} | "
                      f"{ratios[1]} |", flush=True)
                gflops = encoder_flops(best["window_pieces"], card["encoder"]) \
                    / best["encoder"] / 1e9
                dtype = card["encoder"].get("compute_dtype", "float32")
                breakdowns.append((label, n, batch_size, export_name, best, gflops,
                                   peaks.get(dtype, peaks["float32"])))
        print("\nWhere a batch's time goes (per-batch bests summed; ms per sentence), and the "
              "encoder's GFLOPS on real pieces (padding not counted) against the matmul peak:")
        print("| sentences | batch | export | tokenize | encoder | rest of the graph (decode, "
              "tree strings) | host trees (parse_sents − parse_each) | encoder GFLOPS "
              "| of peak |")
        print("|---|---|---|---|---|---|---|---|---|")
        for label, n, batch_size, export_name, best, gflops, peak in breakdowns:
            rest = best["end_to_end"] - best["encoder"] - best["tokenize"]
            trees = (f"{1e3 * (best['parser'] - best['parse_each']) / n:.2f}"
                     if "parse_each" in best else "-")
            print(f"| {label} | {batch_size} | {export_name} | "
                  f"{1e3 * best['tokenize'] / n:.2f} | {1e3 * best['encoder'] / n:.2f} | "
                  f"{1e3 * rest / n:.2f} | {trees} | {gflops:.0f} | {100 * gflops / peak:.0f}% |")
        if _F1.value:
            for directory, export_name in zip(exports, names):
                print(f"test split F1 (gold POS, tools/eval_export.py), {export_name}: "
                      f"{test_split_f1(directory):.2f}")
    return 0


if __name__ == "__main__":
    app.run(main)

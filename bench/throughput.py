"""End-to-end parsing throughput of the exported SavedModel, next to its encoder alone.

For the NLTK-sample test split and for a set of long sentences (test sentences joined to
100–400 words), at batch sizes 1, 16 and 64, sentences sorted by length (plus the test
split in file order at batch 64), prints sentences per second of:

* end to end: words in → tree strings out, one `serving_default` call per batch (Python
  word lists joined into the request tensor, the trees fetched as numpy);
* encoder: the same batches, tokenized and packed beforehand, through the SavedModel's
  `encode` function (BERT + the three linear heads) alone;
* Parser: `tetra_tf.Parser.parse_sents`, i.e. end to end plus nltk.Tree objects, with
  its default two model calls at once (batches overlapping) and with one at a time;
* plain Keras encoder: a `BertEncoderV2` of the same architecture in a plain tf.function on
  the same batches, each padded to its longest sentence (the baseline that BASELINES.md
  measured at 280 sents/s on an idle machine), to calibrate against load from others;
* reference: the reference implementation's pipeline (bench/reference_pipeline.py:
  HF tokenizer, PyTorch MiniLM, per-sentence NumPy decoder, nltk trees) on the same
  sentences and batches, in a subprocess, right after ours (--noreference to skip);

and the share of end-to-end time spent outside the encoder (splitting, tokenization,
windows, log-softmax, decoding, tree strings, host transfers). Each batch is timed
end to end, encoder-only and plain back to back. The end-to-end, Parser and reference
figures are each the best of --repeats whole passes (as the reference pipeline reports);
the encoder and plain figures and the outside-encoder share sum every batch's best of the
passes, so that bursts of load from other processes skew them little and alike.

The model: --export_dir (an export), --checkpoint (a training model directory, exported
to a temporary directory), or by default the bundled all-MiniLM-L6-v2 with random tag
heads (vocabularies of the NLTK-sample training split): the speed is the same as a
trained model's.

Usage: python bench/throughput.py [--export_dir=DIR | --checkpoint=MODEL_DIR] [--repeats=3]
    [--intra_op_threads=N] [--inter_op_threads=N] [--batch_sizes=1,16,64] [--noreference]
Exit codes: 0 success, 1 failure, 2 usage error (e.g. NLTK sample not found).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import tetra_tf  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags, logging  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import reference_pipeline  # noqa: E402  (imports neither torch nor TF)
from bench.minilm_model import default_model_dir, test_split_sentences  # noqa: E402
from tetra_tf import encoders, export, model_dir as model_dir_lib, treebank  # noqa: E402
from tetra_tf.model import ENCODER_INPUTS  # noqa: E402
from tetra_tf.parser import Parser  # noqa: E402
from tetra_tf.model_dir import TaggerSpec  # noqa: E402

_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "An exported SavedModel to measure.")
# Not --model_dir: tetra_tf.train (imported by export) defines that flag.
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "A training model directory (or checkpoint) to export and measure.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed passes; the best is reported.")
_BATCH_SIZES = flags.DEFINE_list("batch_sizes", ["1", "16", "64"], "Batch sizes.")
_INTRA = flags.DEFINE_integer("intra_op_threads", 0, "TF intra-op threads (0: default).")
_INTER = flags.DEFINE_integer("inter_op_threads", 0, "TF inter-op threads (0: default).")
_NUM_LONG = flags.DEFINE_integer("num_long", 48, "Long sentences (100–400 words).")
_SKIP_PARSER = flags.DEFINE_bool("skip_parser", False, "Do not time tetra_tf.Parser.")
_REFERENCE = flags.DEFINE_bool(
    "reference", True, "Also time the reference pipeline (bench/reference_pipeline.py, "
    "PyTorch, in a subprocess) on the same sentences and batches.")
_FILE_ORDER = flags.DEFINE_bool("file_order", True,
                                "Also time the test split in file order at batch 64.")


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


def measure(model, parser, plain_encoder, sentences: list[list[str]], batch_size: int,
            repeats: int, sort: bool = True) -> dict:
    """Best-of-`repeats` seconds over all batches: end to end, encoder, Parser, plain."""
    serve = model.signatures["serving_default"]
    batches = make_batches(sentences, batch_size, sort)
    encoder_inputs, plain_inputs = [], []
    for batch in batches:
        packed = model.tokenize(*dense_words(batch))
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

    # Warm up every batch shape once.
    for batch, inputs, flat in zip(batches, encoder_inputs, plain_inputs):
        end_to_end(batch)
        encoder_only(inputs)
        if plain_encoder is not None:
            plain(flat)
    # Per batch, the best of the passes: robust to bursts of load from other processes.
    per_batch = {key: [float("inf")] * len(batches) for key in ("end_to_end", "encoder", "plain")}
    best = {"parser": float("inf"), "parser_one_call": float("inf"),
            "end_to_end_pass": float("inf")}
    for _ in range(repeats):
        pass_start = time.perf_counter()
        pass_other = 0.0
        for i, (batch, inputs, flat) in enumerate(zip(batches, encoder_inputs, plain_inputs)):
            runs = [("encoder", encoder_only, inputs), ("end_to_end", end_to_end, batch)]
            if plain_encoder is not None:
                runs.append(("plain", plain, flat))
            for key, fn, arg in runs:
                start = time.perf_counter()
                fn(arg)
                seconds = time.perf_counter() - start
                per_batch[key][i] = min(per_batch[key][i], seconds)
                pass_other += seconds if key != "end_to_end" else 0.0
        # The end-to-end time of the whole pass, as the reference pipeline reports it.
        best["end_to_end_pass"] = min(best["end_to_end_pass"],
                                      time.perf_counter() - pass_start - pass_other)
        if parser is not None and sort:
            # Its default (batches overlapping, concurrent_calls model calls at once), then
            # one call at a time.
            for key, in_flight in (("parser", parser.concurrent_calls), ("parser_one_call", 1)):
                default, parser.concurrent_calls = parser.concurrent_calls, in_flight
                try:
                    start = time.perf_counter()
                    parser.parse_sents(sentences, batch_size=batch_size)
                    best[key] = min(best[key], time.perf_counter() - start)
                finally:
                    parser.concurrent_calls = default
    best.update({key: sum(times) for key, times in per_batch.items()})
    return best


def main(argv):
    del argv
    if _INTRA.value:
        tf.config.threading.set_intra_op_parallelism_threads(_INTRA.value)
    if _INTER.value:
        tf.config.threading.set_inter_op_parallelism_threads(_INTER.value)
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
        started = time.time()
        parser = Parser(export_dir)
        model = parser.model
        print(f"loaded the SavedModel in {time.time() - started:.1f} s; "
              f"threads intra={_INTRA.value or 'default'} inter={_INTER.value or 'default'}")
        long = long_sentences(test, _NUM_LONG.value)
        batch_sizes = [int(b) for b in _BATCH_SIZES.value]
        runs = [("test split", test, b, True) for b in batch_sizes]
        runs += [("test split, file order", test, 64, False)] if _FILE_ORDER.value else []
        runs += [("long (100-400 words)", long, b, True) for b in batch_sizes]
        plain_encoder = plain_encoder_function(TaggerSpec.load(model_dir).encoder) \
            if model_dir else None
        print("| sentences | batch | e2e sents/s | encoder sents/s | outside encoder "
              f"| Parser (nltk), {parser.concurrent_calls} calls at once, sents/s "
              "| Parser, 1 call at a time | plain Keras encoder sents/s "
              "| reference e2e sents/s | e2e / reference |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, sentences, batch_size, sort in runs:
            words = sum(len(s) for s in sentences)
            label = f"{name}: {len(sentences)} sents, {words / len(sentences):.1f} words avg"
            best = measure(model, None if _SKIP_PARSER.value else parser, plain_encoder,
                           sentences, batch_size, _REPEATS.value, sort)
            n = len(sentences)
            e2e_rate = n / best["end_to_end_pass"]
            share = 100.0 * (1.0 - best["encoder"] / best["end_to_end"])
            parser_rate, parser_one_call_rate = (
                "-" if best[key] == float("inf") else f"{n / best[key]:.1f}"
                for key in ("parser", "parser_one_call"))
            plain_rate = f"{n / best['plain']:.1f}" if plain_encoder else "-"
            reference_rate = ratio = "-"
            if _REFERENCE.value:
                path = os.path.join(scratch, "sentences.txt")
                reference_pipeline.write_sentences_file(sentences, path)
                report = reference_pipeline.run_reference(
                    path, batch_size=batch_size, sort=sort, repeats=_REPEATS.value,
                    encoder_only=False)
                reference_rate = f"{report['sents_per_s']:.1f}"
                ratio = f"{e2e_rate / report['sents_per_s']:.2f}x"
            print(f"| {label} | {batch_size} | {e2e_rate:.1f} | {n / best['encoder']:.1f} | "
                  f"{share:.1f}% | {parser_rate} | {parser_one_call_rate} | {plain_rate} | "
                  f"{reference_rate} | {ratio} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    app.run(main)

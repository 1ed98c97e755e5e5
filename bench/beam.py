"""Sentences per second of the Beam pipeline (integrations/beam.py) next to `Parser.parse_sents`.

The NLTK sample's sentences (all splits, cleaned trees' words), shuffled and repeated to
--sentences, written to one file. Then, one run each, in this order:

* Parser: `Parser.parse_sents` in this process (batches of --batch_size sorted by length),
  timed without and with loading the model;
* Beam, 1 worker: the whole pipeline (read, validate, reshuffle, sort and batch, RunInference,
  JSON records, dead letters) on FnApiRunner in this process, timed from building the
  pipeline to its end, model loading included;
* Beam, N workers: the same on FnApiRunner with --direct_num_workers=N
  --direct_running_mode=multi_processing (each worker process loads TensorFlow and the model).

Prints sentences/s, the ratio to the Parser, and where the pipeline's time went: model
loading and model calls (RunInference's own metrics, summed over workers) and the rest
(Beam start-up, reading, shuffling, writing). Also the load average, since the machine
may be shared.

The model: --export_dir, else models/tetra/1 if it holds an export, else the bundled
all-MiniLM-L6-v2 with random tag heads (bench/throughput.py's default; the same speed as a
trained model), exported to a temporary folder.

Usage: python bench/beam.py [--export_dir=DIR] [--sentences=20000] [--workers=2]
Needs the [beam] extra.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tetra_tf import train_extra  # noqa: E402,F401  (first: Keras 2 before TensorFlow loads)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

DEFAULT_EXPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "models", "tetra", "1")  # the Makefile's EXPORT_DIR


def sample_sentences(count: int, seed: int) -> list[list[str]]:
    """The NLTK sample's sentences, shuffled and repeated to `count`."""
    from bench.minilm_model import split_sentences  # pylint: disable=import-outside-toplevel

    pool = [words for split in ("train", "dev", "test") for words in split_sentences(split)]
    rng = random.Random(seed)
    out: list[list[str]] = []
    while len(out) < count:
        rng.shuffle(pool)
        out.extend(pool[:count - len(out)])
    return out


def model_export(requested: str | None, scratch: str) -> tuple[str, str]:
    """(export dir, description)."""
    if requested:
        return requested, requested
    if os.path.isfile(os.path.join(DEFAULT_EXPORT, "saved_model.pb")):
        return DEFAULT_EXPORT, DEFAULT_EXPORT
    from bench import minilm_model  # pylint: disable=import-outside-toplevel

    return (minilm_model.default_export(scratch),
            "all-MiniLM-L6-v2 with random tag heads (no trained export found)")


def run_arguments(description: str) -> argparse.ArgumentParser:
    """The flags both corpus benches take: --export_dir, --sentences, --batch_size, --seed."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export_dir")
    parser.add_argument("--sentences", type=int, default=20000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def prepare_run(requested_export: str | None, count: int, seed: int, batch_size: int,
                scratch: str) -> tuple[str, list[list[str]], str]:
    """The export to measure, `count` sample sentences, and them written one per line to a
    corpus file in scratch; prints what they are. Returns (export_dir, sentences, corpus)."""
    export_dir, description = model_export(requested_export, scratch)
    sentences = sample_sentences(count, seed)
    words = sum(len(s) for s in sentences)
    corpus = os.path.join(scratch, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.writelines(" ".join(s) + "\n" for s in sentences)
    print(f"model: {description}")
    print(f"{len(sentences)} sentences ({words} words, {words / len(sentences):.1f} per "
          f"sentence), batch_size {batch_size}; {os.cpu_count()} CPUs; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the start", flush=True)
    return export_dir, sentences, corpus


def time_parser(export_dir: str, sentences: list[list[str]], batch_size: int
                ) -> tuple[float, float]:
    """(load seconds, parse_sents seconds)."""
    from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel

    start = time.perf_counter()
    parser = Parser(export_dir)
    loaded = time.perf_counter()
    parser.parse_sents(sentences, batch_size=batch_size)
    return loaded - start, time.perf_counter() - loaded


def time_beam(export_dir: str, corpus: str, output: str, batch_size: int, workers: int
              ) -> tuple[float, dict]:
    """(wall seconds, tetra_tf counters and distribution sums) of one pipeline run."""
    import apache_beam  # pylint: disable=import-outside-toplevel
    from apache_beam.metrics.metric import MetricsFilter  # pylint: disable=import-outside-toplevel
    # pylint: disable=import-outside-toplevel
    from apache_beam.options.pipeline_options import PipelineOptions

    from tetra_tf.integrations import beam  # pylint: disable=import-outside-toplevel

    args = ["--runner=FnApiRunner", "--default_sdk_harness_log_level=WARNING"]
    if workers > 1:
        args += [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]
    options = beam.ParseOptions(model_dir=export_dir, inputs=[corpus], output=output,
                                max_words=0, batch_size=batch_size)
    start = time.perf_counter()
    pipeline = apache_beam.Pipeline(options=PipelineOptions(args))
    beam.build(pipeline, options)
    result = pipeline.run()
    result.wait_until_finish()
    wall = time.perf_counter() - start
    query = result.metrics().query(MetricsFilter().with_namespace(beam.METRICS_NAMESPACE))
    figures: dict = {}
    for counter in query["counters"]:
        name = counter.key.metric.name
        figures[name] = figures.get(name, 0) + (counter.committed or 0)
    for dist in query["distributions"]:
        name = dist.key.metric.name
        figures[name + ".sum"] = figures.get(name + ".sum", 0) + dist.committed.sum
        figures[name + ".count"] = figures.get(name + ".count", 0) + dist.committed.count
    return wall, figures


def main() -> int:
    parser = run_arguments(__doc__)
    parser.add_argument("--workers", type=int, default=2,
                        help="Worker processes of the second Beam run (1: no second run).")
    args = parser.parse_args()
    import logging  # pylint: disable=import-outside-toplevel
    logging.getLogger().setLevel(logging.ERROR)

    scratch = tempfile.mkdtemp(prefix="bench_beam_")
    try:
        export_dir, sentences, corpus = prepare_run(args.export_dir, args.sentences, args.seed,
                                                    args.batch_size, scratch)

        load_s, parse_s = time_parser(export_dir, sentences, args.batch_size)
        rows = [("Parser.parse_sents, 1 process", parse_s, None),
                ("Parser incl. loading the model", load_s + parse_s, None)]
        worker_counts = [1] + ([args.workers] if args.workers > 1 else [])
        for workers in worker_counts:
            wall, figures = time_beam(export_dir, corpus, os.path.join(scratch, f"out{workers}",
                                                                       "trees"),
                                      args.batch_size, workers)
            assert figures.get("sentences_parsed") == len(sentences), figures
            rows.append((f"Beam FnApiRunner, {workers} worker{'s' if workers > 1 else ''}",
                         wall, figures))
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end\n")

        print(f"{'':34} {'seconds':>8} {'sent/s':>8} {'vs Parser':>10}")
        for name, seconds, _ in rows:
            print(f"{name:34} {seconds:8.1f} {len(sentences) / seconds:8.1f} "
                  f"{parse_s / seconds:9.2f}x")
        print("\nwhere the pipeline's time went (RunInference's metrics, summed over workers):")
        for (name, seconds, figures), workers in zip(rows[2:], worker_counts):
            load = figures.get("load_model_latency_milli_secs.sum", 0) / 1e3
            infer = figures.get("inference_batch_latency_micro_secs.sum", 0) / 1e6
            batches = figures.get("inference_batch_latency_micro_secs.count", 0)
            print(f"  {name}: wall {seconds:.1f} s; model loading {load:.1f} s; {batches} model "
                  f"calls {infer:.1f} s; "
                  + (f"the rest (start-up, read, validate, shuffle, batch, write) "
                     f"{seconds - load - infer:.1f} s" if workers == 1 else
                     f"the workers were busy loading or parsing "
                     f"{100 * (load + infer) / (workers * seconds):.0f}% of {workers} × wall")
                  + f"; vs Parser.parse_sents {100 * (seconds / parse_s - 1):+.1f}%, "
                  f"vs Parser incl. loading {100 * (seconds / (load_s + parse_s) - 1):+.1f}%")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

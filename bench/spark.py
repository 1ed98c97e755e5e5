"""Sentences per second of Spark (tetra_tf.spark_parse on a local standalone cluster) next to
`Parser.parse_each` and the Beam pipeline, on the same sentences, in one run.

The NLTK sample's sentences (all splits, cleaned trees' words), shuffled and repeated to
--sentences, written to one file. Then, in this order:

* Parser: `Parser.parse_each` in this process (the same call the Spark adapter makes),
  timed from loading the model; then `Parser.parse_sents` (nltk Trees, what most users
  call), timed the same way, once before Spark and once after it (the machine's speed
  drifts over minutes: "vs parse_sents" is against the two passes' mean);
* Spark: a standalone master and --workers workers of one core each on 127.0.0.1
  (`tetra_tf.integrations.spark_cluster.LocalCluster`), the driver's session started (not
  timed), then
  `spark_parse.run` timed: read the file, spread the lines, parse, write Parquet, count;
* Beam: the Beam pipeline (bench/beam.py's `time_beam`) on FnApiRunner with --workers
  worker processes (--beam=false: not run).

For each: seconds, sentences/s, the ratio to the Parser, time to the first result (Parser:
its first batch parsed; Spark: the first parse task done, its rows written; Beam writes its
outputs at the end), model loads, and whether every tree equals the Parser's. Also the load
average, since the machine may be shared.

The model: --export_dir, else models/tetra/1 if it holds an export, else the bundled
all-MiniLM-L6-v2 with random tag heads (bench/throughput.py's default; the same speed as a
trained model), exported to a temporary folder.

Usage: python bench/spark.py [--export_dir=DIR] [--sentences=20000] [--workers=2]
    [--partitions=0] [--beam=true]
Needs the [spark] extra, a Java 17 runtime, and [beam] for the Beam row.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import tempfile
import threading
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before tetra_tf sets 2

from tetra_tf import train_extra  # noqa: E402,F401  (first: Keras 2 before TensorFlow loads)

from bench.beam import prepare_run, run_arguments  # noqa: E402
from tetra_tf.trees.treebank import parse_tree  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def time_parser(export_dir: str, sentences: list[list[str]], batch_size: int,
                nltk_trees: bool = False) -> dict:
    """Parser.parse_each (or with nltk_trees, Parser.parse_sents): seconds (load included),
    first result, the bracketed trees."""
    from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel

    start = time.perf_counter()
    first: list[float] = []
    parser = Parser(export_dir)
    loaded = time.perf_counter()
    progress = lambda _: first or first.append(time.perf_counter())  # noqa: E731
    if nltk_trees:
        trees = parser.parse_sents(sentences, batch_size=batch_size, progress=progress)
        end = time.perf_counter()
    else:
        results = parser.parse_each(sentences, batch_size=batch_size, progress=progress)
        end = time.perf_counter()
        trees = [getattr(result, "bracketed", None) for result in results]
    return {"seconds": end - start, "parse_seconds": end - loaded, "load_seconds": loaded - start,
            "first": first[0] - start, "loads": 1, "trees": trees}


class _FirstTaskWatch:
    """Polls Spark's status tracker: when did the job's last stage first finish a task."""

    def __init__(self, context):
        self._tracker = context.statusTracker()
        self.first: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> "_FirstTaskWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        seen_stages: set[int] = set()
        while not self._stop.wait(0.1) and self.first is None:
            for job_id in self._tracker.getActiveJobsIds():
                job = self._tracker.getJobInfo(job_id)
                if job is None or len(job.stageIds) < 2:
                    continue  # the parse runs in the last stage of a job after a shuffle
                stage = self._tracker.getStageInfo(max(job.stageIds))
                seen_stages.add(max(job.stageIds))
                if stage is not None and stage.numCompletedTasks > 0:
                    self.first = time.perf_counter()


def time_spark(export_dir: str, corpus: str, output: str, batch_size: int, workers: int,
               partitions: int, scratch: str) -> dict:
    """spark_parse.run on a local standalone cluster: seconds, first result, loads, trees."""
    from tetra_tf import spark_parse  # pylint: disable=import-outside-toplevel
    from tetra_tf.integrations.spark_cluster import LocalCluster  # pylint: disable=C0415

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    started = time.perf_counter()
    with LocalCluster(os.path.join(scratch, "cluster"), workers=workers,
                      env={"PYTHONPATH": REPO_ROOT}) as cluster:
        spark = spark_parse.session(cluster.url, {
            "spark.executor.cores": "1", "spark.cores.max": str(workers),
            "spark.executor.memory": "1g", "spark.executorEnv.PYTHONPATH": REPO_ROOT,
            "spark.ui.showConsoleProgress": "false"})
        try:
            # Wait for the executors to register, so that the timed job is the parse alone.
            deadline = time.monotonic() + 120
            status = spark.sparkContext._jsc.sc()  # pylint: disable=protected-access
            while (status.getExecutorMemoryStatus().size() < workers + 1
                   and time.monotonic() < deadline):
                time.sleep(0.2)
            up = time.perf_counter()
            start = time.perf_counter()
            with _FirstTaskWatch(spark.sparkContext) as watch:
                summary = spark_parse.run(spark, export_dir, [corpus], output,
                                          batch_size=batch_size, partitions=partitions)
            end = time.perf_counter()
            rows = spark_parse.read_output(spark, output).select("line", "tree").collect()
        finally:
            spark.stop()
    trees: list[str | None] = [None] * summary["lines"]
    for line, tree in rows:
        trees[line - 1] = tree
    return {"seconds": end - start, "first": (watch.first or end) - start,
            "loads": len(summary["loads"]), "load_seconds": sum(s for _, _, s in summary["loads"]),
            "processes": len({(h, p) for h, p, _ in summary["loads"]}),
            "cluster_seconds": up - started, "trees": trees, "refused": summary["refused"]}


def time_beam_run(export_dir: str, corpus: str, output: str, batch_size: int,
                  workers: int) -> dict:
    """The Beam pipeline (bench/beam.py's time_beam): seconds, loads, trees."""
    from bench.beam import time_beam  # pylint: disable=import-outside-toplevel

    seconds, figures = time_beam(export_dir, corpus, output, batch_size, workers)
    trees: dict[int, str] = {}
    for path in glob.glob(output + "-[0-9]*.jsonl"):
        with open(path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                trees[record["line"]] = record["tree"]
    return {"seconds": seconds, "first": None,
            "loads": int(figures.get("load_model_latency_milli_secs.count", 0)),
            "trees": [trees.get(i + 1) for i in range(max(trees) if trees else 0)]}


def main() -> int:
    parser = run_arguments(__doc__)
    parser.add_argument("--workers", type=int, default=2,
                        help="Spark workers (one core each) and Beam worker processes.")
    parser.add_argument("--partitions", type=int, default=0,
                        help="Spark partitions of the lines (0: spark_parse's default, 4 per "
                             "core).")
    parser.add_argument("--beam", type=lambda v: v.lower() in ("1", "true", "yes"),
                        default=True, help="Also run the Beam pipeline (true/false).")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    with tempfile.TemporaryDirectory(prefix="bench_spark_") as scratch:
        export_dir, sentences, corpus = prepare_run(args.export_dir, args.sentences, args.seed,
                                                    args.batch_size, scratch)

        reference = time_parser(export_dir, sentences, args.batch_size)
        with_trees = time_parser(export_dir, sentences, args.batch_size, nltk_trees=True)
        rows = [("Parser.parse_each, 1 process", reference),
                ("Parser.parse_sents (nltk Trees)", with_trees)]
        spark = time_spark(export_dir, corpus, os.path.join(scratch, "spark_out"),
                           args.batch_size, args.workers, args.partitions, scratch)
        rows.append((f"Spark standalone, {args.workers}×1-core workers", spark))
        # The machine's speed drifts over minutes: parse_sents again, just after Spark, and
        # the "vs parse_sents" ratios against the two passes' mean.
        with_trees_after = time_parser(export_dir, sentences, args.batch_size, nltk_trees=True)
        rows.append(("Parser.parse_sents, after Spark", with_trees_after))
        parse_sents_seconds = (with_trees["seconds"] + with_trees_after["seconds"]) / 2
        if args.beam:
            rows.append((f"Beam FnApiRunner, {args.workers} workers", time_beam_run(
                export_dir, corpus, os.path.join(scratch, "beam_out", "trees"),
                args.batch_size, args.workers)))
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end\n")

        print(f"{'':36} {'seconds':>8} {'sent/s':>8} {'vs parse_each':>14} "
              f"{'vs parse_sents':>15} {'first result':>13} {'loads':>6}  same trees")
        for name, result in rows:
            first = f"{result['first']:.1f} s" if result["first"] is not None else "at the end"
            nltk_trees = result is with_trees or result is with_trees_after
            same = (result["trees"] == [parse_tree(tree) for tree in reference["trees"]]
                    if nltk_trees else result["trees"] == reference["trees"])
            print(f"{name:36} {result['seconds']:8.1f} {len(sentences) / result['seconds']:8.1f} "
                  f"{reference['seconds'] / result['seconds']:13.2f}x "
                  f"{parse_sents_seconds / result['seconds']:14.2f}x {first:>13} "
                  f"{result['loads']:>6}  {'yes' if same else 'NO'}")
        print(f"\nParser: model loading {reference['load_seconds']:.1f} s, parse_each "
              f"{reference['parse_seconds']:.1f} s. Spark: the cluster and session came up in "
              f"{spark['cluster_seconds']:.1f} s (not timed); {spark['loads']} model loads in "
              f"{spark['processes']} Python worker processes took {spark['load_seconds']:.1f} s "
              f"summed; refused: {spark['refused'] or 'none'}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

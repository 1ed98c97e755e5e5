r"""k-fold distillation data: training folds, and each fold labelled by teachers that never saw it.

The library of `python -m tetra_tf.distillation` (tetra_tf/distillation.py, whose docstring is the
program's --help).
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Iterable

from tetra_tf import train_extra  # noqa: F401  (first: the [train] extra, Keras 2)

from absl import flags
import numpy as np
import tensorflow as tf
from tqdm import tqdm

from tetra_tf import cli
from tetra_tf.data import records
from tetra_tf.data.convert import TREES_FILE
from tetra_tf.errors import InputError
from tetra_tf.training import model_dir as model_dir_lib
from tetra_tf.training.model import LOGIT_KEYS
from tetra_tf.training.trainer import load_model_on_data, log_softmax, model_inputs
from tetra_tf.trees.tags import TagVocabularies

Words = tuple[bytes, ...]
# The library's parameters that the program's flags of other names give (cli.run).
FLAG_NAMES = {"data_dir": "data", "num_folds": "folds", "teacher_dirs": "teachers"}


def _read_serialized(data_dir: str) -> list[bytes]:
    files = records.record_files(data_dir)
    return [bytes(r) for r in tf.data.TFRecordDataset(files).as_numpy_iterator()]


def _read_trees(data_dir: str) -> list[str] | None:
    path = os.path.join(data_dir, TREES_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# The statistics a model card reads from a data directory (its input, size and licence).
STATS_FILE = "stats.json"


def _write_companions(data_dir: str, output_dir: str, trees: list[str] | None,
                      sentences: int, what: str) -> None:
    """The vocabularies, trees.txt when the input has one, and stats.json with the input's
    provenance and licence (a model card names them) and this output's sentence count."""
    TagVocabularies.load(data_dir).save(output_dir)
    source = model_dir_lib.read_json(os.path.join(data_dir, STATS_FILE)) or {}
    stats = {"input": f"{source.get('input') or os.path.abspath(data_dir)} ({what})",
             "trees_written": sentences}
    if source.get("licence"):
        stats["licence"] = source["licence"]
    model_dir_lib.write_json(os.path.join(output_dir, STATS_FILE), stats)
    if trees is not None:
        with open(os.path.join(output_dir, TREES_FILE), "w", encoding="utf-8") as f:
            f.writelines(tree + "\n" for tree in trees)


def _remove_record_files(directory: str) -> None:
    """Old shards would be read with the new ones."""
    for old in glob.glob(os.path.join(directory, records.RECORD_FILE_PATTERN)):
        os.remove(old)


def _check_output_dir(output_dir: str, inputs: list[str]) -> None:
    if any(os.path.abspath(output_dir) == os.path.abspath(d) for d in inputs):
        raise InputError(f"output_dir={output_dir} is an input directory: write elsewhere",
                         ["output_dir"])


def split_folds(data_dir: str, num_folds: int, output_dir: str) -> list[str]:
    """Splits a records directory into contiguous folds (documents stay together).

    Args:
      data_dir: a convert_ptb output directory.
      num_folds: how many folds (at least 2).
      output_dir: gets fold0, fold1, …: each a records directory with the same vocabularies.

    Returns:
      The fold directories, in order; reading them one after the other gives the
      sentences of `data_dir` in its order.
    """
    if num_folds < 2:
        raise InputError(f"num_folds={num_folds}: at least 2", ["num_folds"])
    serialized = _read_serialized(data_dir)
    if len(serialized) < num_folds:
        raise InputError(f"data_dir: {data_dir} has {len(serialized)} sentences, fewer than "
                         f"{num_folds} folds", ["data_dir"])
    trees = _read_trees(data_dir)
    if trees is not None and len(trees) != len(serialized):
        trees = None  # Not the records' trees.txt: do not split a mismatch.
    fold_dirs = []
    for fold in range(num_folds):
        begin = fold * len(serialized) // num_folds
        end = (fold + 1) * len(serialized) // num_folds
        fold_dir = os.path.join(output_dir, f"fold{fold}")
        _check_output_dir(fold_dir, [data_dir])
        os.makedirs(fold_dir, exist_ok=True)
        _remove_record_files(fold_dir)
        path = os.path.join(fold_dir, records.record_file_name(0, 1))
        with tf.io.TFRecordWriter(path) as writer:
            for one in serialized[begin:end]:
                writer.write(one)
        _write_companions(data_dir, fold_dir, None if trees is None else trees[begin:end],
                          end - begin, f"fold {fold} of {num_folds}")
        fold_dirs.append(fold_dir)
    return fold_dirs


def teacher_scores(teacher_dir: str, data_dir: str, batch_size: int = 32,
                   progress: bool = True) -> dict[Words, dict[str, np.ndarray]]:
    """Scores every sentence of a records directory with one teacher.

    Args:
      teacher_dir: a training model directory (its kept weights) of the data's vocabulary.
      data_dir: the records to label.
      batch_size: sentences per batch.
      progress: show a progress bar.

    Returns:
      Per sentence (its words), per tag id feature, the teacher's log-probabilities:
      float [rows, tags] (n rows; n − 1 for internal tags). A sentence that occurs twice is
      scored the same both times, so its words identify it.
    """
    loaded = load_model_on_data(teacher_dir, data_dir, batch_size=batch_size)
    bar = tqdm(total=loaded.num_sentences, desc=f"teacher {teacher_dir}", unit="sentence",
               disable=not progress, file=sys.stderr)
    scored: dict[Words, dict[str, np.ndarray]] = {}
    for batch in loaded.batches:
        logits = loaded.predict(model_inputs(batch))
        batch_log_probs = {key: log_softmax(logits[LOGIT_KEYS[key]].numpy())
                           for key in records.TAG_ID_FEATURES}
        for row, n in enumerate(batch["num_words"]):
            if n == 0:
                continue
            rows = {key: n - 1 if key == records.INTERNAL_TAG_IDS else n
                    for key in records.TAG_ID_FEATURES}
            scored[tuple(batch[records.WORDS][row, :n])] = {
                key: log_probs[row, :rows[key]] for key, log_probs in batch_log_probs.items()}
        bar.update(int(np.sum(batch["num_words"] > 0)))
    bar.close()
    return scored


def mean_log_probs(per_teacher: Iterable[dict[Words, dict[str, np.ndarray]]]
                   ) -> dict[Words, dict[str, np.ndarray]]:
    """The teachers' mean log-probabilities per sentence, renormalized (an ensemble
    export's average); teachers are summed one at a time, so only one is held whole."""
    sums: dict[Words, dict[str, np.ndarray]] = {}
    count = 0
    for scored in per_teacher:
        count += 1
        for words, scores in scored.items():
            previous = sums.get(words)
            sums[words] = (scores if previous is None
                           else {key: previous[key] + scores[key] for key in scores})
    return {words: {key: log_softmax(total / count).astype(np.float32)
                    for key, total in per_key.items()}
            for words, per_key in sums.items()}


def teacher_log_probs(teacher_dirs: list[str], data_dir: str, batch_size: int = 32,
                      progress: bool = True) -> dict[Words, dict[str, np.ndarray]]:
    """Scores every sentence of a records directory with each teacher (`teacher_scores`)
    and returns their renormalized mean (`mean_log_probs`), float32."""
    return mean_log_probs(teacher_scores(teacher, data_dir, batch_size, progress)
                          for teacher in teacher_dirs)


def write_teacher_data(data_dir: str, teacher_dirs: list[str], output_dir: str,
                       batch_size: int = 32, progress: bool = True) -> int:
    """Writes a records directory's sentences with their teachers' log-probabilities.

    Args:
      data_dir: the records to label (a fold none of the teachers trained on).
      teacher_dirs: the teachers' training model directories.
      output_dir: gets the records (same order and number of shards), the vocabularies,
        trees.txt and records.TEACHER_FILE.
      batch_size: sentences per batch.
      progress: show progress bars.

    Returns:
      The number of sentences written.
    """
    if not teacher_dirs:
        raise InputError("teacher_dirs is empty", ["teacher_dirs"])
    _check_output_dir(output_dir, [data_dir] + list(teacher_dirs))
    log_probs = teacher_log_probs(teacher_dirs, data_dir, batch_size, progress)
    num_shards = len(records.record_files(data_dir))
    examples = []
    for serialized in _read_serialized(data_dir):
        example = tf.train.Example.FromString(serialized)
        words = tuple(example.features.feature[records.WORDS].bytes_list.value)
        if words not in log_probs:  # Every sentence is scored: a bug if not.
            raise RuntimeError(f"no teacher scores for {b' '.join(words)[:80]!r}")
        examples.append(records.add_teacher_log_probs(example, log_probs[words]))
    os.makedirs(output_dir, exist_ok=True)
    _remove_record_files(output_dir)
    records.write_records(examples, output_dir, num_shards)
    _write_companions(data_dir, output_dir, _read_trees(data_dir), len(examples),
                      f"labelled by {len(teacher_dirs)} teacher(s)")
    model_dir_lib.write_json(os.path.join(output_dir, records.TEACHER_FILE), {
        "data": os.path.abspath(data_dir),
        "teachers": [os.path.abspath(t) for t in teacher_dirs],
        "sentences": len(examples)})
    return len(examples)


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the program's flags."""
    flags.DEFINE_string("data", None, "A records directory (tools/convert_ptb.py output, or a "
                        "fold of one).")
    flags.DEFINE_string("output_dir", None, "With --folds: where fold0, fold1, ... go. With "
                        "--teachers: the labelled records' directory.")
    flags.DEFINE_integer("folds", None, "Split --data into this many contiguous folds. "
                         "Exclusive with --teachers.")
    flags.DEFINE_list("teachers", None, "Training model directories that never saw --data: "
                      "write --data's sentences with their averaged tag log-probabilities. "
                      "Exclusive with --folds.")
    flags.DEFINE_integer("batch_size", 32, "Sentences per batch when the teachers score.")
    flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv) -> int:
    del argv
    cli.require("data", "output_dir")
    if (FLAGS.folds is None) == (not FLAGS.teachers):
        raise cli.UsageError("give exactly one of --folds and --teachers (see --help)")
    if not os.path.isdir(FLAGS.data):
        raise cli.UsageError(f"--data: {FLAGS.data} is not a directory")
    if FLAGS.folds is not None:
        fold_dirs = split_folds(FLAGS.data, FLAGS.folds, FLAGS.output_dir)
        print(f"wrote {len(fold_dirs)} folds: {', '.join(fold_dirs)}")
        return 0
    count = write_teacher_data(FLAGS.data, FLAGS.teachers, FLAGS.output_dir,
                               FLAGS.batch_size, FLAGS.progress)
    print(f"wrote {count} sentences with the log-probabilities of {len(FLAGS.teachers)} "
          f"teacher(s) to {FLAGS.output_dir}")
    return 0



def run_program() -> None:
    """Runs `python -m tetra_tf.distillation` (tetra_tf/distillation.py)."""
    define_flags()
    cli.adopt_program_flags(__name__)
    cli.run(main, flag_names=FLAG_NAMES)

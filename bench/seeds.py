r"""Trains a recipe with several seeds and reports its F1 as mean ± standard deviation.

One difference between two recipes means something only beside the spread that the seed
alone gives, so every recipe comparison of the project goes through this script:

  python bench/seeds.py --name=today --seeds=1,2,3
  python bench/seeds.py --name=ema --seeds=1,2,3 --train_flags="--ema_decay=0.999"
  python bench/seeds.py --report          # the table of every recipe run so far

For each seed it trains `python -m tetra_tf.train --seed=S <--train_flags>` on the NLTK
sample's train split into <runs_dir>/<name>/seed<S> (dev F1 scored after every epoch; a
killed run resumes where it stopped), then parses the dev and test splits with the
kept weights and scores them with EVALB (COLLINS.prm): F1 with gold POS on the leaves
(the standard) and with the parser's own POS, per split and on dev + test pooled (518
sentences, a steadier figure than either). Each seed's figures go to its results.json;
a seed with results is not run again. The report gives, per recipe, the mean ± sample
standard deviation over its seeds, which epoch was kept (a recipe that keeps the best dev
epoch has a dev F1 biased upwards, and so a pooled one), and the mean training time (the
sum of the epochs' wall-clock times in history.json, dev scoring after each epoch
included; a resumed run adds the time of the epochs it finished, so a kill loses only the
unfinished epoch's).

Each seed is also scored with its run's last raw weights (the final rolling checkpoint:
the last epoch, no weight average). Against those, the kept weights (the best dev epoch,
or the average) differ by the selection or averaging alone, with the seed's own noise
cancelled; the report's second table gives that paired difference.

With --ensemble the recipe's finished seeds are also scored as one ensemble: their tag
log-probabilities averaged before the decoder, as an ensemble export would parse (N times
the encoder's cost). The report's last table gives its F1 and its gain over the mean of its
members.

With --train_data the seeds train on other records (e.g. a teacher's labelled training split
and silver data, `make taught`); dev and test are still --data_dir's.

With --final_fit the recipe trains on train + dev without selection (its last weights are
kept) and only the test split is scored.

With --distill_folds=K each seed is a k-fold distillation (tetra_tf.distillation): the train
split goes into K folds (once per recipe, <runs_dir>/<name>/folds); per fold a teacher
(`--teacher_flags`, the seed's own seed) trains on the other folds into
<seed dir>/teacher<k> and labels its fold; the seed's model, the student, trains on the
labelled folds with --train_flags (which give --distillation_weight). Its training time is
the teachers', the labelling's and the student's together.

Exit codes: 0 done; 2 bad flags (one line on stderr); 1 a training run failed.
"""

from __future__ import annotations

import json
import os
import shlex
import dataclasses
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tetra_tf import train_extra  # noqa: E402,F401  (first: Keras 2 before TensorFlow loads)

from absl import flags  # noqa: E402

from tetra_tf import cli  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the program's flags (only when run, so that importing it, as its tests do,
    defines none beside another program's)."""
    flags.DEFINE_string("name", None, "The recipe's name: its runs go to <runs_dir>/<name>/.")
    flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds to train with.")
    flags.DEFINE_string("train_flags", "", "Flags for `python -m tetra_tf.train` that make the "
                        "recipe (beyond --seed and the data and model directories).")
    flags.DEFINE_bool("final_fit", False, "Train on train + dev, keep the last weights, score "
                      "the test split only.")
    flags.DEFINE_string("data_dir", "data/ptb_sample",
                        "`make data`'s output: train/, dev/, test/.")
    flags.DEFINE_list("train_data", None, "Train on these records directories instead of "
                      "--data_dir's train/ (dev and test stay --data_dir's): e.g. `make "
                      "taught`'s DISTILL_DIR/train_taught,DISTILL_DIR/silver_taught for a "
                      "student of the teachers (with --train_flags=--distillation_weight=W).")
    flags.DEFINE_string("runs_dir", "runs/seeds", "Where every recipe's runs go.")
    flags.DEFINE_bool("ensemble", False, "Also score the ensemble of the recipe's finished seeds "
                      "(tag log-probabilities averaged before decoding).")
    flags.DEFINE_integer("distill_folds", 0, "Train each seed as a k-fold distillation with "
                         "this many folds (0: no distillation).")
    flags.DEFINE_string("teacher_flags", "--keep=last", "With --distill_folds: flags for "
                        "`python -m tetra_tf.train` that make the teachers' recipe.")
    flags.DEFINE_bool("report", False, "Only print the table of the runs in --runs_dir.")
    flags.DEFINE_string("report_file", None, "Also write the table (Markdown) here.")


RESULTS_FILE = "results.json"
LAST_WEIGHTS = "last_raw_weights"  # results.json key: the figures of the final rolling checkpoint
ENSEMBLE_FILE = "ensemble.json"  # per recipe name: the ensemble of its seeds' kept weights
RECIPE_FILE = "recipe.json"  # per recipe name: its flags and what they resolve to (one recipe)
LABELLING_FILE = "labelling.json"  # in a teacher's directory: how long labelling its fold took
SPLITS = ("dev", "test", "pooled")
# Flags the script sets itself; in --train_flags they would silently override its own.
RESERVED_FLAGS = ("--seed", "--model_dir", "--train_data", "--dev_data")


@dataclasses.dataclass(frozen=True)
class Distillation:
    """A k-fold distillation recipe: how many folds, and the teachers' train flags."""

    folds: int
    teacher_flags: list[str]


def check_recipe(runs_dir: str, name: str, train_flags: list[str], final_fit: bool,
                 data_dir: str, distillation: Distillation | None = None,
                 train_data: list[str] | None = None) -> None:
    """Records what a recipe name trains on first use; refuses another recipe under that name.

    A recipe is what its flags resolve to, every default spelled out: the same flags under
    the same name are refused once a default they leave out has changed, and the flags that
    restore the recorded recipe are taken.
    """
    for what, recipe_flags in (("--train_flags", train_flags),
                               ("--teacher_flags", distillation.teacher_flags
                                if distillation else [])):
        for flag in recipe_flags:
            if flag.split("=", 1)[0] in RESERVED_FLAGS:
                raise cli.UsageError(f"{what}: {flag.split('=', 1)[0]} is set by "
                                     "bench/seeds.py itself")
    recipe = {"train_flags": train_flags, "recipe": resolved_recipe(train_flags),
              "final_fit": final_fit, "data_dir": os.path.abspath(data_dir),
              "train_data": [os.path.abspath(d) for d in train_data] if train_data else None}
    if distillation:
        recipe["distillation"] = {**dataclasses.asdict(distillation),
                                  "recipe": resolved_recipe(distillation.teacher_flags)}
    path = os.path.join(runs_dir, name, RECIPE_FILE)
    if not os.path.isfile(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(recipe, f, indent=2)
        return
    with open(path) as f:
        recorded = json.load(f)
    if "recipe" not in recorded:  # recorded before recipes were resolved: ask its runs
        recorded = with_trained_recipes(recorded, os.path.join(runs_dir, name), recipe)
        with open(path, "w") as f:
            json.dump(recorded, f, indent=2)
    for key in ("final_fit", "data_dir", "train_data"):
        if recorded.get(key) != recipe[key]:
            raise cli.UsageError(f"recipe {name!r} was run with {key} {recorded[key]}, not "
                                 f"{recipe[key]}: use another --name")
    if bool(recorded.get("distillation")) != bool(distillation) or (
            distillation and recorded["distillation"]["folds"] != distillation.folds):
        raise cli.UsageError(f"recipe {name!r} was run with distillation "
                             f"{recorded.get('distillation')}, not {recipe.get('distillation')}"
                             ": use another --name")
    compared = [("--train_flags", recorded["recipe"], recipe["recipe"])]
    if distillation:
        compared.append(("--teacher_flags", recorded["distillation"]["recipe"],
                         recipe["distillation"]["recipe"]))
    changes = [(what, *change) for what, then, now in compared
               for change in recipe_changes(then, now)]
    if changes:
        said = "; ".join(f"{what} give --{field}={now} where its runs had {then}"
                         for what, field, then, now in changes)
        raise cli.UsageError(f"recipe {name!r}: {said} (a default changed, or other flags): "
                             "add the flags that restore it, or use another --name")


def resolved_recipe(train_flags: list[str]) -> dict:
    """What `python -m tetra_tf.train <train_flags>` trains, every default spelled out (but
    the seed, which bench/seeds.py sets per run)."""
    from tetra_tf.training import trainer as train  # noqa: PLC0415  (TensorFlow: only to train)

    return without_seed(dataclasses.asdict(train.recipe_of_command_line(train_flags)))


def without_seed(recipe: dict) -> dict:
    """A resolved recipe as a recipe name means it: every run's seed is its own."""
    return {field: value for field, value in recipe.items() if field != "seed"}


def with_trained_recipes(recorded: dict, recipe_dir: str, recipe: dict) -> dict:
    """A recipe record of before resolution, completed by what its trained runs record
    (the seeds', and the teachers' of a distillation); by this run's resolution if none
    has trained yet."""
    from tetra_tf.training import trainer as train  # noqa: PLC0415

    def trained(subdir: str, fallback: dict) -> dict:
        seed_dirs = sorted(d for d in os.listdir(recipe_dir) if d.startswith("seed"))
        for seed_dir in seed_dirs:
            began = train.recipe_began_with(os.path.join(recipe_dir, seed_dir, subdir))
            if began:
                return without_seed(began)
        return fallback

    completed = {**recorded, "recipe": trained("", recipe["recipe"])}
    if recorded.get("distillation") and recipe.get("distillation"):
        completed["distillation"] = {**recorded["distillation"], "recipe": trained(
            "teacher0", recipe["distillation"]["recipe"])}
    return completed


def recipe_changes(then: dict, now: dict) -> list[tuple[str, object, object]]:
    """(field, recorded value, new value) where two resolved recipes differ; a field one of
    them lacks (an option younger than a record) is no change."""
    return [(field, then[field], value) for field, value in now.items()
            if field in then and then[field] != value]


def run_training(what: str, data_flags: list[str], model_dir: str, seed: int,
                 train_flags: list[str]) -> float:
    """Runs (or resumes) one `python -m tetra_tf.train`; returns its epochs' seconds."""
    command = ([sys.executable, "-m", "tetra_tf.train", *data_flags, f"--model_dir={model_dir}",
                f"--seed={seed}", "--noprogress"] + train_flags)
    print(f"{what}: {shlex.join(command[1:])}", file=sys.stderr, flush=True)
    os.makedirs(model_dir, exist_ok=True)
    code = subprocess.call(command)
    if code:
        raise RuntimeError(f"{what}: training exited with {code}")
    with open(os.path.join(model_dir, "history.json")) as f:
        return sum(epoch["epoch_seconds"] for epoch in json.load(f))


def teach_folds(name: str, seed: int, distillation: Distillation, data_dir: str,
                runs_dir: str) -> tuple[list[str], float]:
    """Trains each fold's teacher and labels the fold with it.

    Returns:
      (the labelled folds' directories, the seconds spent: teachers' epochs and labelling).
    """
    folds_dir = os.path.join(runs_dir, name, "folds")
    fold_dirs = [os.path.join(folds_dir, f"fold{k}") for k in range(distillation.folds)]
    if not all(os.path.isdir(d) for d in fold_dirs):
        run_program("tetra_tf.distillation", f"--data={os.path.join(data_dir, 'train')}",
                    f"--folds={distillation.folds}", f"--output_dir={folds_dir}")
    seed_dir = os.path.join(runs_dir, name, f"seed{seed}")
    seconds, taught_dirs = 0.0, []
    for k, fold_dir in enumerate(fold_dirs):
        teacher_dir = os.path.join(seed_dir, f"teacher{k}")
        others = ",".join(d for d in fold_dirs if d != fold_dir)
        seconds += run_training(
            f"{name} seed {seed} teacher {k}",
            [f"--train_data={others}", f"--dev_data={os.path.join(data_dir, 'dev')}"],
            teacher_dir, seed, distillation.teacher_flags)
        taught_dir = os.path.join(seed_dir, "taught", f"fold{k}")
        if not os.path.isfile(os.path.join(taught_dir, "teacher.json")):
            started = time.time()
            run_program("tetra_tf.distillation", f"--data={fold_dir}",
                        f"--teachers={teacher_dir}", f"--output_dir={taught_dir}",
                        "--noprogress")
            with open(os.path.join(teacher_dir, LABELLING_FILE), "w") as f:
                json.dump({"seconds": round(time.time() - started, 1)}, f)
        with open(os.path.join(teacher_dir, LABELLING_FILE)) as f:
            seconds += json.load(f)["seconds"]
        taught_dirs.append(taught_dir)
    return taught_dirs, seconds


def run_program(module: str, *args: str) -> None:
    code = subprocess.call([sys.executable, "-m", module, *args])
    if code:
        raise RuntimeError(f"python -m {module} {shlex.join(args)} exited with {code}")


def run_seed(name: str, seed: int, train_flags: list[str], final_fit: bool, data_dir: str,
             runs_dir: str, distillation: Distillation | None = None,
             train_data: list[str] | None = None) -> dict:
    """Trains one seed (or resumes it), scores it, and writes its results.json (on
    `train_data`'s directories when given, else data_dir's train split)."""
    model_dir = os.path.join(runs_dir, name, f"seed{seed}")
    results_path = os.path.join(model_dir, RESULTS_FILE)
    if os.path.isfile(results_path):
        with open(results_path) as f:
            results = json.load(f)
        if LAST_WEIGHTS not in results:  # results written before this scoring existed
            results[LAST_WEIGHTS] = score(model_dir, data_dir, final_fit, last_weights=True)
            write_results(results_path, results)
        return results
    train_data = ",".join(train_data) if train_data else os.path.join(data_dir, "train")
    dev_data = os.path.join(data_dir, "dev")
    teaching_seconds = 0.0
    if distillation:
        taught_dirs, teaching_seconds = teach_folds(name, seed, distillation, data_dir,
                                                    runs_dir)
        train_data = ",".join(taught_dirs)
    data_flags = ([f"--train_data={train_data},{dev_data}"] if final_fit
                  else [f"--train_data={train_data}", f"--dev_data={dev_data}"])
    seconds = run_training(f"{name} seed {seed}", data_flags, model_dir, seed, train_flags)
    results = {"name": name, "seed": seed, "train_flags": train_flags, "final_fit": final_fit,
               "keep": kept_epoch(model_dir),
               "train_seconds": round(seconds + teaching_seconds, 1),
               **({"teaching_seconds": round(teaching_seconds, 1),
                   "distillation": dataclasses.asdict(distillation)} if distillation else {}),
               **score(model_dir, data_dir, final_fit),
               LAST_WEIGHTS: score(model_dir, data_dir, final_fit, last_weights=True)}
    write_results(results_path, results)
    return results


def kept_epoch(model_dir: str) -> str:
    """Which epoch a finished run kept, 'best' (dev F1) or 'last', from its training.json."""
    from tetra_tf.training import model_dir as model_dir_lib  # noqa: PLC0415

    training = model_dir_lib.read_json(os.path.join(model_dir, model_dir_lib.TRAINING_FILE))
    return training["runs"][-1]["recipe"]["keep"]


def write_results(path: str, results: dict) -> None:
    with open(path, "w") as f:
        json.dump(results, f, indent=2)


def scored_splits(final_fit: bool) -> tuple[str, ...]:
    """The splits a run is scored on: test only if it trained on dev."""
    return ("test",) if final_fit else ("dev", "test")


def score(model_dir: str, data_dir: str, final_fit: bool, last_weights: bool = False) -> dict:
    """Parses dev and test (test only after a final fit) and scores each and the two pooled.

    Args:
      model_dir: a finished training run.
      data_dir: `make data`'s output.
      final_fit: whether the run trained on dev too (then only test is scored).
      last_weights: score the final rolling checkpoint's raw weights, not the kept ones.
    """
    import tensorflow as tf  # noqa: PLC0415  (TensorFlow only when scoring)

    from tetra_tf.training import model_dir as model_dir_lib  # noqa: PLC0415
    from tetra_tf.training import trainer as train

    checkpoint = None
    if last_weights:
        checkpoint = tf.train.latest_checkpoint(
            os.path.join(model_dir, model_dir_lib.ROLLING_CHECKPOINT_DIR))
        if checkpoint is None:  # else the kept weights would be scored as the last ones
            raise RuntimeError(f"{model_dir} has no rolling checkpoint to score")
    return score_parsed({split: train.parse_data(model_dir, os.path.join(data_dir, split),
                                                 checkpoint)
                         for split in scored_splits(final_fit)})


def score_ensemble(name: str, results: list[dict], data_dir: str, runs_dir: str) -> dict:
    """Scores the ensemble of a recipe's finished seeds; writes and returns its ensemble.json."""
    path = os.path.join(runs_dir, name, ENSEMBLE_FILE)
    seeds = [r["seed"] for r in results]
    if os.path.isfile(path):
        with open(path) as f:
            ensemble = json.load(f)
        if ensemble["seeds"] == seeds:
            return ensemble
    final_fit = results[0]["final_fit"]
    model_dirs = [os.path.join(runs_dir, name, f"seed{seed}") for seed in seeds]
    parse = ensemble_parser(model_dirs)
    ensemble = {"seeds": seeds, **score_parsed(
        {split: parse(os.path.join(data_dir, split))
         for split in scored_splits(final_fit)})}
    write_results(path, ensemble)
    return ensemble


def ensemble_parser(model_dirs: list[str]):
    """A function that parses a converted data set with the runs' averaged tag log-probabilities."""
    import tensorflow as tf  # noqa: PLC0415

    from tetra_tf.data import input_pipeline  # noqa: PLC0415
    from tetra_tf.training import model_dir as model_dir_lib
    from tetra_tf.training import trainer as train
    from tetra_tf.training.model import mean_log_probabilities  # noqa: PLC0415
    from tetra_tf.trees.tags import TagVocabularies  # noqa: PLC0415

    taggers = [model_dir_lib.load_tagger(*model_dir_lib.resolve_checkpoint(model_dir))
               for model_dir in model_dirs]
    spec = taggers[0][1]
    vocabs = TagVocabularies.load(model_dir_lib.vocab_dir(model_dirs[0]))
    for model_dir in model_dirs[1:]:
        train.check_same_vocabulary(model_dir_lib.vocab_dir(model_dir), vocabs, "--ensemble")
    tokenizer = spec.encoder.tokenizer(model_dir_lib.encoder_vocab_path(model_dirs[0]))
    config = input_pipeline.InputConfig(batch_size=32)

    @tf.function(reduce_retracing=True)
    def predict(inputs):
        return mean_log_probabilities([tagger(inputs, training=False) for tagger, _ in taggers])

    def parse(data_dir: str):
        train.check_same_vocabulary(data_dir, vocabs, "--ensemble")
        data, summary = train.load_training_data(data_dir, vocabs, tokenizer, config,
                                                 "--ensemble")
        return train.predict_trees(predict, input_pipeline.evaluation_batches(
            data, tokenizer, config, summary), vocabs, spec.max_stack_depth)

    return parse


def score_parsed(parsed: dict) -> dict:
    """EVALB figures per split, and for dev and test pooled when both were parsed."""
    from tetra_tf.trees import scoring  # noqa: PLC0415

    if "dev" in parsed:
        parsed["pooled"] = tuple(parsed["dev"][i] + parsed["test"][i] for i in range(2))
    figures = {}
    for split, (gold, predicted) in parsed.items():
        scores = scoring.score_parses(gold, predicted)
        figures[split] = {"sentences": scores.sentences, "f1": scores.f1,
                          "f1_predicted_pos": scores.f1_predicted_pos,
                          "pos_accuracy": scores.pos_accuracy}
    return figures


def figures_line(results: dict) -> str:
    return ", ".join(f"{split} {results[split]['f1']:.2f}" for split in SPLITS if split in results)


def mean_std(values: list[float], signed: bool = False) -> str:
    if not values:
        return "–"
    mean = f"{statistics.mean(values):{'+' if signed else ''}.2f}"
    return mean if len(values) == 1 else f"{mean} ± {statistics.stdev(values):.2f}"


def report(runs_dir: str) -> str:
    """The Markdown table of every recipe under runs_dir (its seeds with results)."""
    rows, paired_rows, ensemble_rows = [], [], []
    names = sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []
    for name in names:
        if not os.path.isdir(os.path.join(runs_dir, name)):
            continue
        results = []
        for seed_dir in sorted(os.listdir(os.path.join(runs_dir, name))):
            path = os.path.join(runs_dir, name, seed_dir, RESULTS_FILE)
            if os.path.isfile(path):
                with open(path) as f:
                    results.append(json.load(f))
        if not results:
            continue
        cells = [name, ",".join(str(r["seed"]) for r in results)]
        for split in SPLITS:
            cells.append(mean_std([r[split]["f1"] for r in results if split in r]))
        cells.append(mean_std([r["pooled"]["f1_predicted_pos"] for r in results
                               if "pooled" in r]))
        cells.append(f"{statistics.mean(r['train_seconds'] for r in results) / 60:.1f}")
        # Results written before "keep" was recorded come from runs whose default was best.
        keep = results[0].get("keep") or (
            "last" if "--keep=last" in results[0]["train_flags"] else "best")
        cells.append("last" if results[0].get("final_fit") or keep == "last" else "best dev*")
        cells.append(recipe_flags(results[0]))
        rows.append(cells)
        paired = paired_row(name, results)
        if paired:
            paired_rows.append(paired)
        ensemble_path = os.path.join(runs_dir, name, ENSEMBLE_FILE)
        if os.path.isfile(ensemble_path):
            with open(ensemble_path) as f:
                ensemble_rows.append(ensemble_row(name, json.load(f), results))
    header = ["recipe", "seeds", "dev F1", "test F1", "pooled F1", "pooled F1, predicted POS",
              "train min", "kept epoch", "train flags"]
    lines = markdown_table(header, rows)
    if any(row[-2] == "best dev*" for row in rows):
        lines += ["", "\\* the epoch with the best dev F1 is kept, so that recipe's dev (and "
                  "pooled) F1 is biased upwards; test F1 is not."]
    if paired_rows:
        lines += ["", "Each run's last raw weights (final epoch, no average), and the kept weights "
                  "minus them, seed by seed:", ""]
        lines += markdown_table(["recipe", "seeds", "dev F1", "test F1", "pooled F1",
                                 "kept − last: test F1", "kept − last: pooled F1"], paired_rows)
    if ensemble_rows:
        lines += ["", "Each recipe's seeds as one ensemble (tag log-probabilities averaged), and "
                  "its gain over the mean of those seeds alone:", ""]
        lines += markdown_table(["recipe", "seeds", "dev F1", "test F1", "pooled F1",
                                 "gain: test F1", "gain: pooled F1"], ensemble_rows)
    return "\n".join(lines)


def recipe_flags(results: dict) -> str:
    """The report's description of a run's recipe: its train flags, and how it was trained."""
    text = " ".join(results["train_flags"])
    if results.get("final_fit"):
        text += " (train+dev)"
    distillation = results.get("distillation")
    if distillation:
        text += (f" (student of {distillation['folds']}-fold teachers: "
                 f"{' '.join(distillation['teacher_flags'])})")
    return text


def ensemble_row(name: str, ensemble: dict, results: list[dict]) -> list[str]:
    members = [r for r in results if r["seed"] in ensemble["seeds"]]
    cells = [name, ",".join(str(seed) for seed in ensemble["seeds"])]
    cells += [f"{ensemble[split]['f1']:.2f}" if split in ensemble else "–" for split in SPLITS]
    for split in ("test", "pooled"):
        if split in ensemble:
            gain = ensemble[split]["f1"] - statistics.mean(r[split]["f1"] for r in members)
            cells.append(f"{gain:+.2f}")
        else:
            cells.append("–")
    return cells


def paired_row(name: str, results: list[dict]) -> list[str] | None:
    """The last raw weights' F1 and the kept weights' gain over them, or None if unscored."""
    results = [r for r in results if LAST_WEIGHTS in r]
    if not results:
        return None
    cells = [name, ",".join(str(r["seed"]) for r in results)]
    for split in SPLITS:
        cells.append(mean_std([r[LAST_WEIGHTS][split]["f1"] for r in results
                               if split in r[LAST_WEIGHTS]]))
    for split in ("test", "pooled"):
        cells.append(mean_std([r[split]["f1"] - r[LAST_WEIGHTS][split]["f1"] for r in results
                               if split in r], signed=True))
    return cells


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(row) + " |" for row in rows])


def main(argv) -> int:
    del argv
    if not FLAGS.report:
        cli.require("name")
        try:
            seeds = [int(seed) for seed in FLAGS.seeds]
        except ValueError:
            raise cli.UsageError(f"--seeds={','.join(FLAGS.seeds)}: give integers") from None
        if FLAGS.ensemble and len(seeds) < 2:
            raise cli.UsageError("--ensemble: give at least two --seeds")
        for split in ("train", "dev", "test"):
            if not os.path.isdir(os.path.join(FLAGS.data_dir, split)):
                raise cli.UsageError(
                    f"--data_dir={FLAGS.data_dir} has no {split}/: run `make data`")
        train_flags = shlex.split(FLAGS.train_flags)
        distillation = None
        if FLAGS.distill_folds:
            if FLAGS.distill_folds < 2:
                raise cli.UsageError(f"--distill_folds={FLAGS.distill_folds}: at least 2 "
                                     "(0: no distillation)")
            if FLAGS.final_fit:
                raise cli.UsageError("--distill_folds and --final_fit: one or the other")
            distillation = Distillation(FLAGS.distill_folds, shlex.split(FLAGS.teacher_flags))
        if FLAGS.train_data:
            if distillation:
                raise cli.UsageError("--train_data and --distill_folds: one or the other")
            for directory in FLAGS.train_data:
                if not os.path.isdir(directory):
                    raise cli.UsageError(f"--train_data: {directory} is not a directory")
        check_recipe(FLAGS.runs_dir, FLAGS.name, train_flags, FLAGS.final_fit, FLAGS.data_dir,
                     distillation, FLAGS.train_data)
        finished = []
        for seed in seeds:
            results = run_seed(FLAGS.name, seed, train_flags, FLAGS.final_fit, FLAGS.data_dir,
                               FLAGS.runs_dir, distillation, FLAGS.train_data)
            finished.append(results)
            print(f"{FLAGS.name} seed {seed}: F1 {figures_line(results)}; "
                  f"{results['train_seconds'] / 60:.1f} min", flush=True)
        if FLAGS.ensemble:
            ensemble = score_ensemble(FLAGS.name, finished, FLAGS.data_dir, FLAGS.runs_dir)
            print(f"{FLAGS.name} ensemble of seeds {','.join(FLAGS.seeds)}: "
                  f"F1 {figures_line(ensemble)}", flush=True)
    table = report(FLAGS.runs_dir)
    print(table)
    if FLAGS.report_file:
        with open(FLAGS.report_file, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)

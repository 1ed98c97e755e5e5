"""bench/seeds.py's report: per recipe, mean ± standard deviation over the seeds run."""

import dataclasses
import json
import os
import subprocess
import sys

from conftest import REPO_ROOT, subprocess_env

sys.path.insert(0, os.path.join(REPO_ROOT, "bench"))
import seeds  # noqa: E402

import pytest  # noqa: E402

from tetra_tf import cli  # noqa: E402


def figures(dev, test, pooled, final_fit=False):
    result = {"test": {"f1": test, "f1_predicted_pos": test - 1}}
    if not final_fit:
        result["dev"] = {"f1": dev, "f1_predicted_pos": dev - 1}
        result["pooled"] = {"f1": pooled, "f1_predicted_pos": pooled - 1}
    return result


def write_results(runs_dir, name, seed, dev, test, pooled, minutes, final_fit=False,
                  last=None, keep=None):
    directory = runs_dir / name / f"seed{seed}"
    directory.mkdir(parents=True)
    results = {"name": name, "seed": seed,
               "train_flags": ["--ema_decay=0.999"] if final_fit else [],
               "final_fit": final_fit, "train_seconds": minutes * 60,
               **figures(dev, test, pooled, final_fit)}
    if last:
        results[seeds.LAST_WEIGHTS] = figures(*last)
    if keep:
        results["keep"] = keep
    (directory / seeds.RESULTS_FILE).write_text(json.dumps(results))


def test_report_gives_mean_and_sample_std_per_recipe(tmp_path):
    write_results(tmp_path, "today", 1, 88.0, 86.0, 87.0, 30)
    write_results(tmp_path, "today", 2, 87.0, 85.0, 86.0, 32)
    write_results(tmp_path, "today", 3, 89.0, 87.0, 88.0, 34)
    write_results(tmp_path, "final", 1, None, 87.5, None, 40, final_fit=True)
    (tmp_path / "today" / "seed4").mkdir()  # a seed still training: not counted
    (tmp_path / "notes.txt").write_text("a file among the recipes")
    lines = seeds.report(str(tmp_path)).splitlines()
    assert len(lines) == 6 and lines[-1].startswith("\\* the epoch with the best dev F1")
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in lines[2:4]}
    today = rows["today"]
    assert today[1:7] == ["1,2,3", "88.00 ± 1.00", "86.00 ± 1.00", "87.00 ± 1.00",
                          "86.00 ± 1.00", "32.0"]
    final = rows["final"]
    assert final[2:5] == ["–", "87.50", "–"]
    assert today[7] == "best dev*" and final[7] == "last"
    assert final[8].strip(" |") == "--ema_decay=0.999 (train+dev)"


def test_report_says_which_epoch_each_recipe_kept(tmp_path):
    """From the runs' recorded choice; results that predate it kept the best dev epoch
    unless their flags said --keep=last."""
    write_results(tmp_path, "recorded_last", 1, 88.0, 86.0, 87.0, 30, keep="last")
    write_results(tmp_path, "recorded_best", 1, 88.0, 86.0, 87.0, 30, keep="best")
    write_results(tmp_path, "older", 1, 88.0, 86.0, 87.0, 30)
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")
            for line in seeds.report(str(tmp_path)).splitlines()[2:5]}
    assert rows["recorded_last"][7] == "last"
    assert rows["recorded_best"][7] == "best dev*" and rows["older"][7] == "best dev*"


def test_report_pairs_kept_weights_with_the_same_runs_last_weights(tmp_path):
    write_results(tmp_path, "ema", 1, 88.0, 86.0, 87.0, 30, last=(87.0, 85.5, 86.0))
    write_results(tmp_path, "ema", 2, 87.0, 85.0, 86.0, 30, last=(87.5, 84.0, 85.0))
    write_results(tmp_path, "old", 1, 88.0, 86.0, 87.0, 30)  # scored before the pairing
    lines = seeds.report(str(tmp_path)).splitlines()
    paired = [line.split(" | ") for line in lines if line.startswith("| ema")]
    assert len(paired) == 2 and not any(line.startswith("| old") for line in lines[5:])
    assert paired[1][1:5] == ["1,2", "87.25 ± 0.35", "84.75 ± 1.06", "85.50 ± 0.71"]
    assert paired[1][5:7] == ["+0.75 ± 0.35", "+1.00 ± 0.00 |"]


def test_last_weights_are_the_final_rolling_checkpoint(tmp_path, monkeypatch):
    import tensorflow as tf

    from tetra_tf.training import model_dir as model_dir_lib
    from tetra_tf.training import trainer as train

    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(step=tf.Variable(0)),
        str(tmp_path / "run" / model_dir_lib.ROLLING_CHECKPOINT_DIR), max_to_keep=2)
    for _ in range(3):
        last = manager.save()
    asked = []

    def parse_data(model_dir, data_dir, checkpoint=None):
        asked.append((os.path.basename(data_dir), checkpoint))
        return ["(S (NN a))"], ["(S (NN a))"]

    monkeypatch.setattr(train, "parse_data", parse_data)
    kept = seeds.score(str(tmp_path / "run"), str(tmp_path / "data"), final_fit=False)
    assert asked == [("dev", None), ("test", None)] and kept["pooled"]["sentences"] == 2
    asked.clear()
    seeds.score(str(tmp_path / "run"), str(tmp_path / "data"), final_fit=True,
                last_weights=True)
    assert asked == [("test", last)] and last.endswith("ckpt-3")


def test_report_gives_each_ensembles_gain_over_its_members(tmp_path):
    write_results(tmp_path, "ema", 1, 88.0, 86.0, 87.0, 30)
    write_results(tmp_path, "ema", 2, 87.0, 85.0, 86.0, 30)
    write_results(tmp_path, "ema", 3, 90.0, 88.0, 89.0, 30)  # not in the ensemble
    (tmp_path / "ema" / seeds.ENSEMBLE_FILE).write_text(json.dumps(
        {"seeds": [1, 2], **figures(88.5, 86.0, 87.5)}))
    row = seeds.report(str(tmp_path)).splitlines()[-1].split(" | ")
    assert row[1:] == ["1,2", "88.50", "86.00", "87.50", "+0.50", "+1.00 |"]


def test_an_ensemble_of_one_run_twice_parses_as_that_run(trained_run, small_data_dirs, tmp_path,
                                                         monkeypatch):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "dev").symlink_to(small_data_dirs["dev"])
    (data_dir / "test").symlink_to(trained_run["test_dir"])
    for seed in (1, 2):
        (tmp_path / "runs" / "twice").mkdir(parents=True, exist_ok=True)
        (tmp_path / "runs" / "twice" / f"seed{seed}").symlink_to(trained_run["model_dir"])
    members = [{"seed": seed, "final_fit": False} for seed in (1, 2)]
    ensemble = seeds.score_ensemble("twice", members, str(data_dir), str(tmp_path / "runs"))
    assert ensemble["seeds"] == [1, 2]
    assert ensemble["test"]["f1"] == pytest.approx(trained_run["evaluation"]["f1"])
    assert ensemble["pooled"]["sentences"] == 2 * ensemble["test"]["sentences"]

    def parse_again(model_dirs):
        raise AssertionError("an ensemble of the same seeds is scored once")

    monkeypatch.setattr(seeds, "ensemble_parser", parse_again)
    again = seeds.score_ensemble("twice", members, str(data_dir), str(tmp_path / "runs"))
    assert again == ensemble


def test_a_recipe_name_keeps_its_flags(tmp_path):
    data_dir = str(tmp_path)
    seeds.check_recipe(str(tmp_path / "runs"), "ema", ["--ema_decay=0.999"], False, data_dir)
    seeds.check_recipe(str(tmp_path / "runs"), "ema", ["--ema_decay=0.999"], False, data_dir)
    with pytest.raises(cli.UsageError, match="use another --name"):
        seeds.check_recipe(str(tmp_path / "runs"), "ema", ["--ema_decay=0.99"], False, data_dir)
    with pytest.raises(cli.UsageError, match="--seed is set by bench/seeds.py"):
        seeds.check_recipe(str(tmp_path / "runs"), "other", ["--seed=4"], False, data_dir)


def test_a_recipe_is_what_its_flags_resolve_to(tmp_path):
    """A name records its flags' recipe with every default spelled out: once a default the
    flags leave out changes, the same flags are refused, and the flags that give the
    recorded recipe back are taken."""
    runs, data_dir = str(tmp_path / "runs"), str(tmp_path)
    seeds.check_recipe(runs, "plain", ["--label_smoothing=0.1"], False, data_dir)
    with open(os.path.join(runs, "plain", seeds.RECIPE_FILE)) as f:
        recorded = json.load(f)
    assert recorded["recipe"]["label_smoothing"] == 0.1
    assert recorded["recipe"]["internal_uses_next_word"] is True  # today's default
    assert "seed" not in recorded["recipe"]
    # As if the record were made when the default was the paper's head:
    recorded["recipe"]["internal_uses_next_word"] = False
    with open(os.path.join(runs, "plain", seeds.RECIPE_FILE), "w") as f:
        json.dump(recorded, f)
    with pytest.raises(cli.UsageError, match="--internal_uses_next_word=True where its runs "
                                             "had False"):
        seeds.check_recipe(runs, "plain", ["--label_smoothing=0.1"], False, data_dir)
    seeds.check_recipe(runs, "plain", ["--label_smoothing=0.1", "--nointernal_uses_next_word"],
                       False, data_dir)
    with pytest.raises(cli.UsageError, match="use another --name"):
        seeds.check_recipe(runs, "plain", ["--nointernal_uses_next_word"], True, data_dir)


def test_a_distillation_recipe_keeps_its_teachers_recipe(tmp_path):
    runs, data_dir = str(tmp_path / "runs"), str(tmp_path)
    teachers = seeds.Distillation(2, ["--keep=last"])
    seeds.check_recipe(runs, "kd", ["--distillation_weight=0.2"], False, data_dir, teachers)
    seeds.check_recipe(runs, "kd", ["--distillation_weight=0.2"], False, data_dir, teachers)
    with pytest.raises(cli.UsageError, match="--teacher_flags give --epochs=10 where its runs "
                                             "had 20"):
        seeds.check_recipe(runs, "kd", ["--distillation_weight=0.2"], False, data_dir,
                           seeds.Distillation(2, ["--keep=last", "--epochs=10"]))
    with pytest.raises(cli.UsageError, match="use another --name"):
        seeds.check_recipe(runs, "kd", ["--distillation_weight=0.2"], False, data_dir,
                           seeds.Distillation(3, ["--keep=last"]))


def test_a_recipe_recorded_before_resolution_is_what_its_runs_trained(tmp_path):
    """A recipe.json of flags alone is completed from its seeds' training.json (an option
    younger than that record at its "off" value), then checked like any other."""
    recipe_dir = tmp_path / "runs" / "old"
    (recipe_dir / "seed1").mkdir(parents=True)
    (recipe_dir / seeds.RECIPE_FILE).write_text(json.dumps(
        {"train_flags": ["--keep=last"], "final_fit": False, "data_dir": str(tmp_path)}))
    from tetra_tf.training import trainer as train

    began = dataclasses.asdict(train.TrainingConfig(seed=1))
    del began["internal_uses_next_word"]  # the record of a run older than the option
    (recipe_dir / "seed1" / "training.json").write_text(json.dumps({"runs": [
        {"recipe": began}, {"resumed_from_step": 200, "recipe": {**began, "keep": "best"}}]}))
    with pytest.raises(cli.UsageError, match="--internal_uses_next_word=True where its runs "
                                             "had False"):
        seeds.check_recipe(str(tmp_path / "runs"), "old", ["--keep=last"], False, str(tmp_path))
    seeds.check_recipe(str(tmp_path / "runs"), "old",
                       ["--keep=last", "--nointernal_uses_next_word"], False, str(tmp_path))
    completed = json.loads((recipe_dir / seeds.RECIPE_FILE).read_text())
    assert completed["train_flags"] == ["--keep=last"]
    assert completed["recipe"]["keep"] == "last" and "seed" not in completed["recipe"]
    assert completed["recipe"]["internal_uses_next_word"] is False


def test_train_flags_that_training_would_refuse_are_refused_first(tmp_path):
    for train_flags, message in ((["--no_such_flag"], "Unknown command line flag"),
                                 (["--ema_decay=high"], "could not convert"),
                                 (["stray"], "unexpected arguments stray")):
        with pytest.raises(cli.UsageError, match=message):
            seeds.check_recipe(str(tmp_path / "runs"), "bad", train_flags, False,
                               str(tmp_path))
    assert not os.path.exists(tmp_path / "runs" / "bad" / seeds.RECIPE_FILE)


def test_bad_flags_are_one_line(tmp_path):
    for flags, message in ((["--seeds=1,x", "--name=a"], "give integers"),
                           (["--seeds=1"], "--name is required"),
                           (["--name=a", "--seeds=1", "--ensemble"], "at least two --seeds"),
                           (["--name=a", f"--data_dir={tmp_path}"], "has no train/")):
        result = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "bench", "seeds.py"),
                                 f"--runs_dir={tmp_path / 'runs'}", *flags],
                                capture_output=True, text=True, env=subprocess_env(),
                                cwd=tmp_path, timeout=120, check=False)  # no data/ here, as in CI
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_bad_distillation_flags_are_one_line(tmp_path):
    for split in ("train", "dev", "test"):
        (tmp_path / "data" / split).mkdir(parents=True)
    for flags, message in ((["--distill_folds=1"], "at least 2"),
                           (["--distill_folds=2", "--final_fit"], "one or the other"),
                           (["--distill_folds=2", "--teacher_flags=--seed=3"],
                            "--teacher_flags: --seed is set by bench/seeds.py")):
        result = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "bench", "seeds.py"),
                                 f"--runs_dir={tmp_path / 'runs'}", "--name=d", "--seeds=1",
                                 f"--data_dir={tmp_path / 'data'}", *flags],
                                capture_output=True, text=True, env=subprocess_env(),
                                timeout=120, check=False)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_each_fold_is_labelled_by_the_teacher_that_did_not_train_on_it(tmp_path, monkeypatch):
    """The k-fold order of work: split once, then per fold train its teacher on the other
    folds and label the fold with it; the student trains on the labelled folds."""
    calls = []

    def run_program(module, *args):
        calls.append(("program", module) + args)
        flags = dict(arg[2:].split("=", 1) for arg in args if "=" in arg)
        if "folds" in flags:
            for k in range(int(flags["folds"])):
                os.makedirs(os.path.join(flags["output_dir"], f"fold{k}"))
        else:
            os.makedirs(flags["output_dir"])
            open(os.path.join(flags["output_dir"], "teacher.json"), "w").close()

    def run_training(what, data_flags, model_dir, seed, train_flags):
        calls.append(("train", os.path.relpath(model_dir, tmp_path), seed, *data_flags,
                      *train_flags))
        os.makedirs(model_dir, exist_ok=True)
        with open(os.path.join(model_dir, "training.json"), "w") as f:
            json.dump({"runs": [{"recipe": {"keep": "last"}}]}, f)
        return 60.0

    monkeypatch.setattr(seeds, "run_program", run_program)
    monkeypatch.setattr(seeds, "run_training", run_training)
    monkeypatch.setattr(seeds, "score", lambda *args, **kwargs: figures(88.0, 86.0, 87.0))
    runs, data = str(tmp_path / "runs"), str(tmp_path / "data")
    distillation = seeds.Distillation(3, ["--keep=last"])
    results = seeds.run_seed("kd", 7, ["--distillation_weight=0.5"], False, data, runs,
                             distillation)
    folds = [os.path.join(runs, "kd", "folds", f"fold{k}") for k in range(3)]
    seed_dir = os.path.join(runs, "kd", "seed7")
    taught = [os.path.join(seed_dir, "taught", f"fold{k}") for k in range(3)]
    assert calls[0] == ("program", "tetra_tf.distillation", f"--data={data}/train",
                        "--folds=3", f"--output_dir={runs}/kd/folds")
    for k in range(3):
        teacher, labelling = calls[1 + 2 * k], calls[2 + 2 * k]
        others = ",".join(folds[j] for j in range(3) if j != k)
        assert teacher == ("train", f"runs/kd/seed7/teacher{k}", 7, f"--train_data={others}",
                           f"--dev_data={data}/dev", "--keep=last")
        assert labelling[:4] == ("program", "tetra_tf.distillation", f"--data={folds[k]}",
                                 f"--teachers={seed_dir}/teacher{k}")
        assert f"--output_dir={taught[k]}" in labelling
    assert calls[7] == ("train", "runs/kd/seed7", 7, f"--train_data={','.join(taught)}",
                        f"--dev_data={data}/dev", "--distillation_weight=0.5")
    assert len(calls) == 8
    assert results["teaching_seconds"] >= 180.0  # three teachers' 60 s, and the labelling
    assert results["train_seconds"] == results["teaching_seconds"] + 60.0
    assert "student of 3-fold teachers: --keep=last" in seeds.recipe_flags(results)
    assert results["keep"] == "last"


def test_a_student_trains_on_the_given_records_and_keeps_them_in_its_recipe(tmp_path,
                                                                           monkeypatch):
    trained = []

    def run_training(what, data_flags, model_dir, seed, train_flags):
        trained.append(data_flags)
        os.makedirs(model_dir, exist_ok=True)
        with open(os.path.join(model_dir, "training.json"), "w") as f:
            json.dump({"runs": [{"recipe": {"keep": "last"}}]}, f)
        return 60.0

    monkeypatch.setattr(seeds, "run_training", run_training)
    monkeypatch.setattr(seeds, "score", lambda *args, **kwargs: figures(88.0, 86.0, 87.0))
    runs, data = str(tmp_path / "runs"), str(tmp_path / "data")
    taught = [str(tmp_path / "train_taught"), str(tmp_path / "silver_taught")]
    seeds.check_recipe(runs, "student", ["--distillation_weight=0.5"], False, data,
                       train_data=taught)
    seeds.run_seed("student", 1, ["--distillation_weight=0.5"], False, data, runs,
                   train_data=taught)
    assert trained == [[f"--train_data={','.join(taught)}", f"--dev_data={data}/dev"]]
    with pytest.raises(cli.UsageError, match="train_data"):  # the same name on other data
        seeds.check_recipe(runs, "student", ["--distillation_weight=0.5"], False, data)

"""Training: the learning-rate schedule, XLA and bfloat16 train like the default path,
distribution strategies agree, a killed run resumes, weight averaging, the layer mix, a
final fit on several data directories, bad input."""

import collections
import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tensorflow as tf
import tf_keras

from conftest import (REPO_ROOT, TRAINED_RUN_EPOCHS, convert, free_port, run_cli,
                      subprocess_env)
from tetra_tf import errors
from tetra_tf.data import input_pipeline
from tetra_tf.data.tokenization import SubwordTokenizer
from tetra_tf.training import encoders
from tetra_tf.training import trainer as train
from tetra_tf.training.model import HeadsConfig
from tetra_tf.trees.tags import TagVocabularies

TINY = dict(epochs=30, batch_size=8, warmup_steps=2, checkpoint_every_steps=2)


def train_command(encoder_dir, data_dirs, model_dir, *extra):
    return [sys.executable, "-m", "tetra_tf.train", f"--train_data={data_dirs['train']}",
            f"--model_dir={model_dir}", f"--encoder={encoder_dir}", "--batch_size=8",
            "--progress=false", *extra]


def steps_per_epoch(encoder_dir, data_dir, batch_size=8):
    tokenizer = SubwordTokenizer(os.path.join(encoder_dir, "vocab.txt"), lower_case=True)
    data = input_pipeline.tokenize_examples(input_pipeline.read_examples(data_dir), tokenizer)
    config = input_pipeline.InputConfig(batch_size=batch_size)
    return input_pipeline.summarize(data, config).steps_per_epoch(config)


@pytest.mark.slow
def test_mirrored_two_cpus_matches_default_strategy(tiny_encoder_dir, small_data_dirs,
                                                    tmp_path):
    out = tmp_path / "compare.json"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tests", "train_worker.py"), "compare",
         tiny_encoder_dir, small_data_dirs["train"], str(out)],
        capture_output=True, text=True, env=subprocess_env(), timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["replicas"] == 2
    np.testing.assert_allclose(found["single_losses"], found["mirrored_losses"], rtol=1e-5)
    assert found["max_weight_change"] > 1e-4  # The steps did move the weights...
    assert found["max_weight_difference"] < 1e-5  # ...identically under both strategies.
    # The weight average lags the weights, and is the same under both strategies.
    assert found["max_average_lag"] > 1e-5
    assert found["max_average_difference"] < 1e-5


def logged_scalars(log_dir) -> dict[str, dict[int, float]]:
    """TensorBoard scalars of a run: tag -> step -> value."""
    values = collections.defaultdict(dict)
    for path in glob.glob(os.path.join(str(log_dir), "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                values[value.tag][event.step] = float(tf.make_ndarray(value.tensor))
    return values


class TestSchedule:
    PEAK = 1e-4

    def rates(self, total, warmup=200):
        schedule = train.WarmupLinearDecay(
            self.PEAK, train.effective_warmup_steps(warmup, total), total)
        return schedule(tf.range(total)).numpy()

    @pytest.mark.parametrize("total, warmup", [(219, 21), (400, 40), (1000, 100),
                                               (4380, 200)])
    def test_peak_at_warmup_end_positive_until_the_last_step(self, total, warmup):
        assert train.effective_warmup_steps(200, total) == warmup
        rates = self.rates(total)
        assert rates[warmup - 1] == pytest.approx(self.PEAK, rel=1e-6)
        assert int(np.argmax(rates)) == warmup - 1
        assert rates[0] == pytest.approx(self.PEAK / warmup, rel=1e-5)
        assert np.all(np.diff(rates[:warmup]) > 0)  # Rises through warmup...
        assert np.all(np.diff(rates[warmup - 1:]) < 0)  # ...then falls every step.
        assert np.all(rates[:-1] > 0)
        assert rates[-1] == 0.0
        # Linear decay: halfway between the peak and the last step, half the peak.
        middle = (warmup - 1 + total - 1) / 2
        assert float(train.WarmupLinearDecay(self.PEAK, warmup, total)(middle)) == (
            pytest.approx(self.PEAK / 2, rel=1e-5))

    def test_without_warmup_the_first_step_has_the_peak(self):
        rates = self.rates(total=2, warmup=0)
        assert rates.tolist() == [pytest.approx(self.PEAK), 0.0]

    def test_steps_beyond_the_run_stay_at_zero(self):
        schedule = train.WarmupLinearDecay(self.PEAK, 10, 100)
        assert float(schedule(150)) == 0.0


class TestPlanWarmup:
    def test_says_when_warmup_is_shortened(self, capsys):
        assert train.plan_warmup(train.TrainingConfig(warmup_steps=200), 219) == 21
        err = capsys.readouterr().err
        assert "warmup shortened from 200 to 21 steps" in err and "219" in err
        assert len(err.strip().splitlines()) == 1

    def test_quiet_when_warmup_fits(self, capsys):
        assert train.plan_warmup(train.TrainingConfig(warmup_steps=200), 4380) == 200
        assert capsys.readouterr().err == ""

    @pytest.mark.parametrize("changes, total, message", [
        (dict(epochs=1), 1, "at least 2 are needed"),
        (dict(epochs=0), 0, "at least 2 are needed"),
        (dict(learning_rate=-1e-4), 100, "^learning_rate=-0.0001: "),
        (dict(head_learning_rate=float("nan")), 100, "^head_learning_rate=nan: "),
        (dict(learning_rate=0.0, head_learning_rate=0.0), 100,
         "^learning_rate and head_learning_rate are both 0"),
        (dict(warmup_steps=-1), 100, "^warmup_steps=-1: "),
    ])
    def test_refuses_runs_that_learn_nothing(self, changes, total, message):
        """In the library's words: its parameters, not the program's flags."""
        with pytest.raises(errors.InputError, match=message):
            train.plan_warmup(train.TrainingConfig(**changes), total)

    def test_warns_when_the_encoder_stays_frozen(self, capsys):
        train.plan_warmup(train.TrainingConfig(learning_rate=0.0, warmup_steps=5), 100)
        assert capsys.readouterr().err.strip() == (
            "warning: --learning_rate=0: the encoder weights stay frozen")


@pytest.mark.slow
def test_one_epoch_lowers_the_loss_and_logs_the_rates_used(tiny_encoder_dir, small_data_dirs,
                                                           tmp_path, capsys):
    """The issue's case: a one-epoch run with the default 200-step warmup used to keep the
    learning rate at 0 throughout. TensorBoard must log the rate each step was taken with."""
    config = train.TrainingConfig(batch_size=8, epochs=1)
    tf_keras.utils.set_random_seed(config.seed)  # as the command line: whatever ran before
    summary = train.train(small_data_dirs["train"], None, str(tmp_path / "run"), config,
                          tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                          progress=False)
    total = steps_per_epoch(tiny_encoder_dir, small_data_dirs["train"])
    assert summary["steps"] == total >= 10
    warmup = train.effective_warmup_steps(config.warmup_steps, total)
    assert f"warmup shortened from 200 to {warmup} steps" in capsys.readouterr().err
    logged = logged_scalars(tmp_path / "run" / "logs")
    losses = [logged["train/loss"][step] for step in range(1, total + 1)]
    # Untrained, the loss is about the log of the product of the three vocabularies' sizes
    # (9.9 for these 96 trees), whatever the batch; this run lowers it by 0.43 (seeds 1, 2).
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.2, losses
    for part, peak in (("encoder", config.learning_rate), ("heads", config.head_learning_rate)):
        schedule = train.WarmupLinearDecay(peak, warmup, total)
        expected = [float(schedule(step - 1)) for step in range(1, total + 1)]
        np.testing.assert_allclose(
            [logged[f"train/learning_rate/{part}"][step] for step in range(1, total + 1)],
            expected, rtol=1e-6, atol=0)
        assert expected[-1] == 0.0 and min(expected[:-1]) > 0


@pytest.mark.slow
def test_training_with_xla_runs_on_static_batches(tiny_encoder_dir, small_data_dirs, tmp_path):
    config = train.TrainingConfig(jit_compile=True, batch_size=8, epochs=1, warmup_steps=1)
    summary = train.train(small_data_dirs["train"], None, str(tmp_path / "xla"), config,
                          tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                          max_steps=2, progress=False)
    assert summary["steps"] == 2
    losses = logged_scalars(tmp_path / "xla" / "logs")["train/loss"]
    assert sorted(losses) == [1, 2] and all(np.isfinite(list(losses.values())))
    assert not (tmp_path / "xla" / "history.json").exists()  # No epoch ended: no dev scoring.


# In-process steps on the same batches from the same initial weights, for the XLA and
# bfloat16 paths (the TPU's) against the default one.
COMPARED_STEPS = 4
BF16_STEPS = 50


@pytest.fixture(scope="module")
def fixed_batches(tiny_encoder_dir, small_data_dirs):
    """Shuffled training batches of 8 sentences, all of one static shape (one XLA program)."""
    tokenizer = SubwordTokenizer(os.path.join(tiny_encoder_dir, "vocab.txt"), lower_case=True)
    data = input_pipeline.tokenize_examples(
        input_pipeline.read_examples(small_data_dirs["train"]), tokenizer).cache()
    config = input_pipeline.InputConfig(batch_size=8, bucket_lengths=(64,), static_shapes=True)
    dataset = input_pipeline.training_dataset(
        data, tokenizer, config, input_pipeline.summarize(data, config), seed=0)
    batches = [{k: v.numpy() for k, v in train.model_inputs(b).items()} for b in dataset]
    assert len(batches) >= 5
    return batches


def run_steps(encoder_dir, data_dir, batches, steps, initial_weights=None, **config):
    """Runs `steps` training steps (cycling over the batches) with a fresh Trainer."""
    policy = tf_keras.mixed_precision.global_policy()
    if config.get("mixed_precision", "none") != "none":
        tf_keras.mixed_precision.set_global_policy(f"mixed_{config['mixed_precision']}")
    try:
        vocabs = TagVocabularies.load(data_dir)
        pretrained = encoders.load_pretrained_encoder(encoder_dir)
        heads = HeadsConfig(len(vocabs.leaf), len(vocabs.internal), len(vocabs.pos), 0.0)
        model = train.build_tagger(train.TaggerSpec(pretrained.config, heads, 8),
                                   pretrained.encoder)
    finally:
        tf_keras.mixed_precision.set_global_policy(policy)
    if initial_weights is not None:
        model.set_weights(initial_weights)
    start = model.get_weights()
    trainer = train.Trainer(model, train.TrainingConfig(warmup_steps=2, **config),
                            total_steps=BF16_STEPS + 10, strategy=tf.distribute.get_strategy())
    losses, rates, weights = [], [], {}
    for step in range(1, steps + 1):
        losses.append(float(trainer.train_step(batches[(step - 1) % len(batches)])))
        rates.append(trainer.learning_rates())
        if step == COMPARED_STEPS:
            weights[step] = model.get_weights()
    return dict(start=start, losses=losses, rates=rates, weights=weights, trainer=trainer,
                model=model)


@pytest.fixture(scope="module")
def default_run(tiny_encoder_dir, small_data_dirs, fixed_batches):
    """The default path (no XLA, float32), the reference of the comparisons below."""
    return run_steps(tiny_encoder_dir, small_data_dirs["train"], fixed_batches, BF16_STEPS)


def xla_marked_calls(trainer, batch) -> list[str]:
    """The calls in the train step's graph that TensorFlow must compile with XLA."""
    graph = trainer.train_step.get_concrete_function(batch).graph
    return [op.name for op in graph.get_operations()
            if "_XlaMustCompile" in op.node_def.attr and op.get_attr("_XlaMustCompile")]


def test_xla_steps_match_the_default_path(tiny_encoder_dir, small_data_dirs, fixed_batches,
                                          default_run):
    xla = run_steps(tiny_encoder_dir, small_data_dirs["train"], fixed_batches, COMPARED_STEPS,
                    initial_weights=default_run["start"], jit_compile=True)
    assert xla_marked_calls(xla["trainer"], fixed_batches[0])  # The replica step is XLA's...
    assert not xla_marked_calls(default_run["trainer"], fixed_batches[0])  # ...by choice.
    # Same learning rates (float32 ulps; they are positive and change every step)...
    for part in ("encoder", "heads"):
        np.testing.assert_allclose([r[part] for r in xla["rates"]],
                                   [r[part] for r in default_run["rates"][:COMPARED_STEPS]],
                                   rtol=1e-6)
    assert len({r["encoder"] for r in xla["rates"]}) == COMPARED_STEPS
    # ...same losses and weights, up to float32 reordering: weights move by ~3e-3 in
    # these steps and differ by ~1e-8 between the paths; 1e-6 is the tolerance.
    np.testing.assert_allclose(xla["losses"], default_run["losses"][:COMPARED_STEPS],
                               rtol=1e-5)
    moved = max(np.max(np.abs(a - b)) for a, b in zip(xla["weights"][COMPARED_STEPS],
                                                      default_run["start"]))
    assert moved > 1e-3
    for a, b in zip(xla["weights"][COMPARED_STEPS], default_run["weights"][COMPARED_STEPS]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_pos_loss_weight_scales_the_pos_heads_share_of_the_loss(
        tiny_encoder_dir, small_data_dirs, fixed_batches, default_run):
    """The loss is linear in the weight, and at 0 the POS head gets no gradient."""
    runs = {weight: run_steps(tiny_encoder_dir, small_data_dirs["train"], fixed_batches, 2,
                              initial_weights=default_run["start"], weight_decay=0.0,
                              pos_loss_weight=weight)
            for weight in (0.0, 2.0)}
    default_loss = default_run["losses"][0]  # weight 1, from the same weights and batch
    pos_share = default_loss - runs[0.0]["losses"][0]
    assert pos_share > 0.1
    np.testing.assert_allclose(runs[2.0]["losses"][0], default_loss + pos_share, rtol=1e-5)
    model = runs[0.0]["model"]
    pos_head = {id(v) for v in model.pos_head.trainable_variables}
    start = dict(zip([id(v) for v in model.weights], runs[0.0]["start"]))
    for variable in model.weights:
        if id(variable) in pos_head:
            np.testing.assert_array_equal(variable.numpy(), start[id(variable)])
    others = [v for v in model.trainable_variables if id(v) not in pos_head]
    assert any(np.any(v.numpy() != start[id(v)]) for v in others)


def test_bfloat16_keeps_float32_variables_and_trains_like_float32(
        tiny_encoder_dir, small_data_dirs, fixed_batches, default_run):
    bf16 = run_steps(tiny_encoder_dir, small_data_dirs["train"], fixed_batches, BF16_STEPS,
                     initial_weights=default_run["start"], mixed_precision="bfloat16")
    model, trainer = bf16["model"], bf16["trainer"]
    assert model.encoder.compute_dtype == "bfloat16"  # Mixed precision is in effect...
    assert {v.dtype for v in model.variables} == {tf.float32}  # ...the weights stay float32,
    for optimizer in trainer.encoder_optimizers + [trainer.head_optimizer]:  # Adam's slots too.
        assert {v.dtype for v in optimizer.variables() if v.dtype.is_floating} == {tf.float32}
    assert tf_keras.mixed_precision.global_policy().name == "float32"  # Policy restored.
    first = np.mean(default_run["losses"][:5])
    float32_drop = first - np.mean(default_run["losses"][-5:])
    bf16_drop = first - np.mean(bf16["losses"][-5:])
    assert float32_drop > 1.0  # 50 steps do train (11.8 -> 9.8 with these batches)...
    # ...and bfloat16 lowers the loss as much, within 10% of float32's drop.
    assert abs(bf16_drop - float32_drop) < 0.1 * float32_drop, (bf16_drop, float32_drop)


@pytest.mark.slow
def test_an_mpnet_encoder_trains_in_bfloat16_and_exports_on_the_same_path(
        tiny_mpnet_dir, small_data_dirs, tmp_path):
    from tetra_tf.parser import Parser
    from tetra_tf.savedmodel import exporter as export
    from tetra_tf.training.model_dir import TaggerSpec

    model_dir = str(tmp_path / "run")
    config = train.TrainingConfig(batch_size=8, epochs=2, learning_rate=1e-3, warmup_steps=2,
                                  mixed_precision="bfloat16")
    # Seeded as the command line seeds it: the heads' start and the batches' order do not
    # depend on what this worker ran before.
    tf_keras.utils.set_random_seed(config.seed)
    summary = train.train(small_data_dirs["train"], small_data_dirs["dev"], model_dir, config,
                          tf.distribute.get_strategy(), encoder_path=tiny_mpnet_dir,
                          progress=False)
    losses = [entry["train_loss"] for entry in summary["history"]]
    # It learns: the second epoch's mean loss is well below the first's (by 0.50 at the
    # default seed; bfloat16's rounding moves that by a little from one machine to another).
    assert len(losses) == 2 and losses[1] < losses[0] - 0.3, losses
    spec = TaggerSpec.load(model_dir)
    assert (spec.encoder.model_type, spec.encoder.cls_token, spec.encoder.pad_token) == (
        "mpnet", "<s>", "<pad>")
    export_dir = str(tmp_path / "export" / "1")
    export.export(model_dir, export_dir)
    words = "The cat sat on the mat .".split()
    assert Parser(export_dir).parse(words).leaves() == words


def test_layer_decay_trains_each_layer_at_a_fraction_of_the_one_above(
        tiny_encoder_dir, small_data_dirs, fixed_batches, default_run):
    decay = 0.25
    decayed = run_steps(tiny_encoder_dir, small_data_dirs["train"], fixed_batches,
                        COMPARED_STEPS, initial_weights=default_run["start"], layer_decay=decay)
    model, trainer = decayed["model"], decayed["trainer"]
    groups = trainer.encoder_variable_groups
    assert len(groups) == 1 + len(model.encoder.transformer_layers)  # embeddings, layers
    grouped = [id(v) for group in groups for v in group]
    assert sorted(grouped) == sorted(id(v) for v in model.encoder.trainable_variables
                                     if "pooler" not in v.name)  # each exactly once
    rates = [float(tf.convert_to_tensor(o.learning_rate)) for o in trainer.encoder_optimizers]
    np.testing.assert_allclose(rates[:-1], [decay * rate for rate in rates[1:]], rtol=1e-6)
    assert rates[-1] == decayed["rates"][-1]["encoder"] > 0
    # Against the same start and batches without the decay, the top layer moves about as
    # far and the embeddings (decay² the rate, 1/16) far less.
    index = {id(v): i for i, v in enumerate(model.weights)}

    def moved(weights, group):
        return sum(float(np.abs(weights[index[id(v)]] - default_run["start"][index[id(v)]]).sum())
                   for v in group)
    ratios = [moved(decayed["weights"][COMPARED_STEPS], group)
              / moved(default_run["weights"][COMPARED_STEPS], group) for group in groups]
    assert ratios[-1] > 0.5, ratios
    assert ratios[0] < 0.25 * ratios[-1], ratios


def test_layer_decay_checkpoints_and_restores_every_layers_optimizer(
        tiny_encoder_dir, small_data_dirs, fixed_batches, tmp_path):
    trained = run_steps(tiny_encoder_dir, small_data_dirs["train"], fixed_batches, 2,
                        layer_decay=0.5)
    path = trained["trainer"].checkpoint().write(str(tmp_path / "ckpt"))
    fresh = run_steps(tiny_encoder_dir, small_data_dirs["train"], fixed_batches, 0,
                      layer_decay=0.5)
    fresh["trainer"].checkpoint().read(path).assert_existing_objects_matched()
    optimizers = [run["trainer"].encoder_optimizers for run in (trained, fresh)]
    assert len(optimizers[1]) == 3  # embeddings and two layers
    for saved, restored in zip(*optimizers):
        assert int(restored.iterations) == 2
        for a, b in zip(saved.variables(), restored.variables()):  # Adam's moments too
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(trained["model"].weights, fresh["model"].weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_training_scores_dev_and_keeps_the_best(trained_run, tiny_encoder_dir,
                                                small_data_dirs):
    model_dir = trained_run["model_dir"]  # conftest's run of the command line, with dev data
    history = json.loads(open(os.path.join(model_dir, "history.json")).read())
    assert [h["epoch"] for h in history] == list(range(1, TRAINED_RUN_EPOCHS + 1))
    best = json.loads(open(os.path.join(model_dir, "best", "best.json")).read())
    assert best["dev_f1"] == max(h["dev_f1"] for h in history)
    assert best["step"] == next(h["step"] for h in history if h["dev_f1"] == best["dev_f1"])
    last = tf.train.latest_checkpoint(os.path.join(model_dir, "ckpt"))
    assert tf.train.load_checkpoint(last).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == (
        TRAINED_RUN_EPOCHS * steps_per_epoch(tiny_encoder_dir, small_data_dirs["train"]))
    assert os.path.exists(os.path.join(model_dir, "best", "model.index"))


@pytest.mark.slow
def test_killed_run_resumes_with_step_and_optimizer_state(tiny_encoder_dir, small_data_dirs,
                                                          tmp_path):
    model_dir = tmp_path / "resume"
    command = train_command(tiny_encoder_dir, small_data_dirs, model_dir, "--epochs=30",
                            "--checkpoint_every_steps=3")
    process = subprocess.Popen(command, env=subprocess_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline and process.poll() is None:
            if tf.train.latest_checkpoint(str(model_dir / "ckpt")):
                break
            time.sleep(0.2)
        assert process.poll() is None, "training ended before it could be killed"
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    killed_at = tf.train.latest_checkpoint(str(model_dir / "ckpt"))
    step = int(killed_at.rsplit("-", 1)[1])
    assert step % steps_per_epoch(tiny_encoder_dir, small_data_dirs["train"]) != 0, (
        "the kill should land mid-epoch")
    saved = tf.train.load_checkpoint(killed_at)
    assert saved.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == step

    # The resumed half runs in this process: a new start of the same command line.
    result = run_cli(train.define_flags, train.main, *command[3:-2], "--epochs=30",
                     f"--max_steps={step + 2}", user_errors=(ValueError,))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from step {step}" in result.stderr
    resumed = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir / "ckpt")))
    assert resumed.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == step + 2
    iterations = [k for k in resumed.get_variable_to_shape_map()
                  if k.startswith("encoder_optimizer/") and "iteration" in k]
    assert iterations, "optimizer state is not in the checkpoint"
    assert resumed.get_tensor(iterations[0]) == step + 2  # Adam's own counter carried on.


@pytest.mark.slow
def test_two_multi_worker_processes_train_together(tiny_encoder_dir, small_data_dirs,
                                                   tmp_path):
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = []
    for index in range(2):
        env = subprocess_env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                       "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen(
            train_command(tiny_encoder_dir, small_data_dirs, tmp_path / "mw",
                          "--strategy=multi_worker", "--max_steps=3", "--epochs=1"),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=300))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
        assert "trained to step 3" in out
    assert tf.train.latest_checkpoint(str(tmp_path / "mw" / "ckpt")).endswith("-3")


# --------------------------------------------------------------------------------------
# Weight averaging, the layer mix, which weights are kept, several training directories


def test_weight_average_follows_its_ramped_decay_and_swaps_back():
    variable = tf.Variable([0.0, 0.0])
    average = train.WeightAverage([variable], decay=0.9)
    expected = np.zeros(2)
    for step, value in enumerate([1.0, 2.0, 3.0, 4.0, 5.0]):
        variable.assign([value, -value])
        average.update([variable], tf.constant(step, tf.int64))
        decay = min(0.9, (1 + step) / (10 + step))
        expected = decay * expected + (1 - decay) * np.array([value, -value])
    np.testing.assert_allclose(average.averages[0].numpy(), expected, rtol=1e-6)
    with average.swapped_in([variable]):  # The model holds the average inside the block...
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(variable.numpy(), [5.0, -5.0])  # ...its own weights after.


def checkpoint_tensors(prefix: str, part: str) -> dict[str, np.ndarray]:
    """The tensors of a checkpoint whose keys start with `part`, by key."""
    reader = tf.train.load_checkpoint(prefix)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if key.startswith(part)}


@pytest.fixture(scope="module")
def averaged_mixed_run(tiny_encoder_dir, small_data_dirs, tmp_path_factory):
    """Two epochs with an average of the weights, a mix of both layers, the last kept."""
    model_dir = str(tmp_path_factory.mktemp("averaged") / "run")
    config = train.TrainingConfig(batch_size=8, epochs=2, warmup_steps=2, learning_rate=1e-3,
                                  ema_decay=0.9, mixed_layers=2, keep="last")
    summary = train.train(small_data_dirs["train"], small_data_dirs["dev"], model_dir, config,
                          tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                          progress=False)
    return {"model_dir": model_dir, "summary": summary}


def test_kept_weights_are_the_average_and_score_as_reported(averaged_mixed_run,
                                                            small_data_dirs):
    model_dir = averaged_mixed_run["model_dir"]
    history = json.loads(open(os.path.join(model_dir, "history.json")).read())
    best = json.loads(open(os.path.join(model_dir, "best", "best.json")).read())
    assert [h["epoch"] for h in history] == [1, 2]
    assert best["epoch"] == 2  # --keep=last, whatever the dev F1 of epoch 1
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "ckpt"))
    kept, _ = train.model_dir_lib.load_tagger(model_dir, os.path.join(model_dir, "best", "model"))
    trained, _ = train.model_dir_lib.load_tagger(model_dir, latest)
    averages = checkpoint_tensors(latest, "weight_average/averages/")

    def averaged_variables(tagger):  # the Trainer's order: encoder (no pooler), then heads
        heads = {id(v) for v in tagger.head_variables}
        return ([v for v in tagger.trainable_variables
                 if id(v) not in heads and "pooler" not in v.name] + tagger.head_variables)

    kept_values = [v.numpy() for v in averaged_variables(kept)]
    trained_values = [v.numpy() for v in averaged_variables(trained)]
    assert len(averages) == len(kept_values) > 10
    # The kept model holds the averaged weights, which differ from the trained ones...
    for i, value in enumerate(kept_values):
        np.testing.assert_array_equal(
            value, averages[f"weight_average/averages/{i}/.ATTRIBUTES/VARIABLE_VALUE"])
    assert sum(not np.array_equal(k, t) for k, t in zip(kept_values, trained_values)) > 10
    # ...and score on dev as the run reported for the epoch it kept.
    scores = train.evaluate_model(model_dir, small_data_dirs["dev"])
    assert scores["f1"] == pytest.approx(best["dev_f1"], abs=1e-6)


def test_layer_mix_is_learned_and_saved_with_the_model(averaged_mixed_run):
    model_dir = averaged_mixed_run["model_dir"]
    spec = train.TaggerSpec.load(model_dir)
    assert spec.heads.mixed_layers == 2
    tagger, _ = train.model_dir_lib.load_tagger(model_dir,
                                                os.path.join(model_dir, "best", "model"))
    weights = tagger.layer_weights()
    assert weights.shape == (2,)
    # It started as an even mix with γ = 1: training moved it.
    assert not np.allclose(weights, [0.5, 0.5], atol=1e-4)


@pytest.mark.slow
def test_final_fit_trains_on_several_directories_and_keeps_the_last_epoch(
        tiny_encoder_dir, small_data_dirs, tmp_path):
    model_dir = str(tmp_path / "final")
    config = train.TrainingConfig(batch_size=8, epochs=1, warmup_steps=1)
    both = f"{small_data_dirs['train']},{small_data_dirs['dev']}"
    summary = train.train(both, None, model_dir, config, tf.distribute.get_strategy(),
                          encoder_path=tiny_encoder_dir, progress=False)
    tokenizer = SubwordTokenizer(os.path.join(tiny_encoder_dir, "vocab.txt"), lower_case=True)
    input_config = input_pipeline.InputConfig(batch_size=8)
    data = input_pipeline.tokenize_examples(
        input_pipeline.read_examples([small_data_dirs["train"], small_data_dirs["dev"]]),
        tokenizer)
    summary_both = input_pipeline.summarize(data, input_config)
    assert summary_both.num_examples == 96 + 24
    assert summary["steps"] == summary_both.steps_per_epoch(input_config)
    best = json.loads(open(os.path.join(model_dir, "best", "best.json")).read())
    assert best["epoch"] == 1 and "dev_f1" not in best
    runs = json.loads(open(os.path.join(model_dir, "training.json")).read())["runs"]
    assert runs[0]["train_data"].split(",") == [os.path.abspath(small_data_dirs["train"]),
                                                os.path.abspath(small_data_dirs["dev"])]
    assert runs[0]["dev_data"] is None
    # The export's card says what the weights were trained on and how they were kept (the
    # card export() writes, built without saving the SavedModel around it).
    from tetra_tf.contract import export_format
    from tetra_tf.savedmodel import exporter as export  # noqa: PLC0415
    from tetra_tf.training import model_card
    checkpoints = [export.resolve_checkpoint(model_dir)]
    card = model_card.build(checkpoints, export.build_module(checkpoints))
    assert card["scores"]["dev"] is None
    rendered = export_format.render_card(card)
    assert (f"- train data: {os.path.abspath(small_data_dirs['train'])} + "
            f"{os.path.abspath(small_data_dirs['dev'])}") in rendered
    assert "- kept weights: the last epoch (no dev data: nothing selected)" in rendered


def test_a_run_killed_before_its_first_checkpoint_starts_afresh(tiny_encoder_dir,
                                                                 small_data_dirs, tmp_path):
    config = train.TrainingConfig(batch_size=8)
    model_dir = str(tmp_path / "m")
    _, _, pretrained = train.prepare_model_dir(model_dir, small_data_dirs["train"],
                                               tiny_encoder_dir, config)
    assert pretrained is not None and os.path.isfile(os.path.join(model_dir,
                                                                  "tagger_config.json"))
    # No checkpoint yet: the pretrained encoder again, not the config's random weights.
    _, _, pretrained = train.prepare_model_dir(model_dir, small_data_dirs["train"],
                                               tiny_encoder_dir, config)
    assert pretrained is not None


@pytest.mark.slow
def test_resume_refuses_another_recipe_but_may_run_longer(tiny_encoder_dir, small_data_dirs,
                                                         tmp_path):
    model_dir = str(tmp_path / "m")
    began = train.TrainingConfig(batch_size=8, checkpoint_every_steps=1)
    train.train(small_data_dirs["train"], None, model_dir, began, tf.distribute.get_strategy(),
                encoder_path=tiny_encoder_dir, max_steps=1, progress=False)
    for changes, message in (({"ema_decay": 0.9}, "ema_decay=0.0 .this run: ema_decay=0.9"),
                             ({"mixed_layers": 2}, "mixed_layers=1"),
                             ({"learning_rate": 1e-4, "label_smoothing": 0.0},
                              "learning_rate=0.0002 label_smoothing=0.1 "
                              ".this run: learning_rate=0.0001 label_smoothing=0.0"),
                             ({"seed": 2}, "seed=1 .this run: seed=2")):
        config = dataclasses.replace(began, **changes)
        with pytest.raises(errors.InputError, match=f"was trained with {message}"):
            train.train(small_data_dirs["train"], None, model_dir, config,
                        tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                        max_steps=2, progress=False)
    longer = dataclasses.replace(began, epochs=began.epochs + 5, keep="best",
                                 checkpoint_every_steps=5)
    summary = train.train(small_data_dirs["train"], None, model_dir, longer,
                          tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                          max_steps=2, progress=False)
    assert summary["resumed_from_step"] == 1 and summary["steps"] == 2


class TestBadInput:
    def run(self, tiny_encoder_dir, train_dir, model_dir, dev_dir=None, encoder=None):
        return train.train(train_dir, dev_dir, str(model_dir), train.TrainingConfig(batch_size=8),
                           tf.distribute.get_strategy(),
                           encoder_path=encoder or tiny_encoder_dir, max_steps=1,
                           progress=False)

    def test_missing_records(self, tiny_encoder_dir, small_data_dirs, tmp_path):
        empty = tmp_path / "empty"
        empty.mkdir()
        for name in ("leaf_tags.txt", "internal_tags.txt", "pos_tags.txt"):
            (empty / name).write_text(
                open(os.path.join(small_data_dirs["train"], name)).read())
        with pytest.raises(errors.InputError, match="no TFRecord files"):
            self.run(tiny_encoder_dir, str(empty), tmp_path / "m")

    def test_empty_records(self, tiny_encoder_dir, small_data_dirs, tmp_path):
        empty = tmp_path / "empty"
        empty.mkdir()
        for name in ("leaf_tags.txt", "internal_tags.txt", "pos_tags.txt"):
            (empty / name).write_text(
                open(os.path.join(small_data_dirs["train"], name)).read())
        with tf.io.TFRecordWriter(str(empty / "records-00000-of-00001.tfrecord")):
            pass
        with pytest.raises(errors.InputError, match="holds no examples"):
            self.run(tiny_encoder_dir, str(empty), tmp_path / "m")

    def test_dev_converted_with_another_vocabulary(self, tiny_encoder_dir, small_data_dirs,
                                                   tmp_path):
        other = tmp_path / "dev_own_vocab"
        convert(os.path.join(small_data_dirs["dev"], "trees.txt"), other)
        with pytest.raises(errors.InputError, match="another tag vocabulary"):
            self.run(tiny_encoder_dir, small_data_dirs["train"], tmp_path / "m", str(other))

    def test_model_dir_of_another_vocabulary(self, tiny_encoder_dir, small_data_dirs, tmp_path):
        other = tmp_path / "dev_own_vocab"
        convert(os.path.join(small_data_dirs["dev"], "trees.txt"), other)
        train.prepare_model_dir(str(tmp_path / "m"), small_data_dirs["train"], tiny_encoder_dir,
                                train.TrainingConfig(batch_size=8))
        with pytest.raises(errors.InputError, match="another tag vocabulary"):
            self.run(tiny_encoder_dir, str(other), tmp_path / "m")

    def test_encoder_directory_missing_a_file(self, tiny_encoder_dir, small_data_dirs,
                                              tmp_path):
        broken = tmp_path / "encoder"
        broken.mkdir()
        for name in ("config.json", "model.safetensors"):
            os.symlink(os.path.join(tiny_encoder_dir, name), broken / name)
        with pytest.raises(FileNotFoundError, match="vocab.txt"):
            self.run(tiny_encoder_dir, small_data_dirs["train"], tmp_path / "m",
                     encoder=str(broken))

    @pytest.mark.parametrize("field, value, message", [
        ("ema_decay", 1.0, "must be in \\[0, 1\\)"),
        ("ema_decay", -0.5, "must be in \\[0, 1\\)"),
        ("mixed_layers", 0, "must be >= 1"),
        ("mixed_layers", 3, "the encoder has only 2 layers"),
        ("distillation_weight", 1.5, "must be in \\[0, 1\\]"),
        ("distillation_weight", 0.5, "holds no teacher log-probabilities"),
        ("label_smoothing", 1.0, "must be in \\[0, 1\\)"),
        ("label_smoothing", -0.1, "must be in \\[0, 1\\)"),
        ("pos_loss_weight", -0.5, "must be >= 0"),
        ("layer_decay", 0.0, "must be in \\(0, 1\\]"),
        ("layer_decay", 1.5, "must be in \\(0, 1\\]"),
    ])
    def test_recipe_out_of_range(self, tiny_encoder_dir, small_data_dirs, tmp_path, field,
                                 value, message):
        config = train.TrainingConfig(batch_size=8, **{field: value})
        with pytest.raises(errors.InputError, match=message):
            train.train(small_data_dirs["train"], None, str(tmp_path / "m"), config,
                        tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                        max_steps=1, progress=False)

    def test_command_line_reports_one_line(self, tiny_encoder_dir, small_data_dirs, tmp_path):
        """The library's error, in the program's words: its flags for the parameters."""
        nowhere = tmp_path / "nowhere"
        result = run_cli(train.define_flags, train.main,
                         *train_command(tiny_encoder_dir, {"train": str(nowhere)},
                                        tmp_path / "m")[3:], user_errors=(ValueError,),
                         flag_names=train.FLAG_NAMES)
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            f"error: --train_data: {nowhere} is not a directory (make one with "
            "tools/convert_ptb.py)"]
        result = run_cli(train.define_flags, train.main,
                         *train_command(tiny_encoder_dir, small_data_dirs, tmp_path / "m")[3:],
                         "--ema_decay=1.0", user_errors=(ValueError,),
                         flag_names=train.FLAG_NAMES)
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            "error: --ema_decay=1.0: must be in [0, 1) (0: no average)"]

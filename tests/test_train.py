"""Training: distribution strategies agree, XLA compiles, a killed run resumes, bad input."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import tetra_tf  # noqa: F401
import tensorflow as tf

from conftest import REPO_ROOT, convert
from tetra_tf import input_pipeline, train
from tetra_tf.tokenization import SubwordTokenizer

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


def run_env():
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_USE_LEGACY_KERAS="1",
               TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_CONFIG", None)
    return env


def test_mirrored_two_cpus_matches_default_strategy(tiny_encoder_dir, small_data_dirs,
                                                    tmp_path):
    out = tmp_path / "compare.json"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "tests", "train_worker.py"), "compare",
         tiny_encoder_dir, small_data_dirs["train"], str(out)],
        capture_output=True, text=True, env=run_env(), timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["replicas"] == 2
    np.testing.assert_allclose(found["single_losses"], found["mirrored_losses"], rtol=1e-5)
    assert found["max_weight_change"] > 1e-4  # The steps did move the weights...
    assert found["max_weight_difference"] < 1e-5  # ...identically under both strategies.


def test_train_step_compiles_with_xla(tiny_encoder_dir, small_data_dirs, tmp_path):
    config = train.TrainingConfig(jit_compile=True, batch_size=8, epochs=1, warmup_steps=1)
    summary = train.train(small_data_dirs["train"], None, str(tmp_path / "xla"), config,
                          tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                          max_steps=2, progress=False)
    assert summary["steps"] == 2
    losses = json.loads((tmp_path / "xla" / "history.json").read_text()) if (
        tmp_path / "xla" / "history.json").exists() else None
    assert losses is None  # No epoch finished: no dev scoring happened.


def test_training_scores_dev_and_keeps_the_best(tiny_encoder_dir, small_data_dirs, tmp_path):
    config = train.TrainingConfig(batch_size=8, epochs=2, warmup_steps=2)
    model_dir = tmp_path / "run"
    summary = train.train(small_data_dirs["train"], small_data_dirs["dev"], str(model_dir),
                          config, tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                          progress=False)
    history = json.loads((model_dir / "history.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2]
    assert all(0.0 <= h["dev_f1"] <= 100.0 for h in history)
    best = json.loads((model_dir / "best" / "best.json").read_text())
    assert best["dev_f1"] == max(h["dev_f1"] for h in history)
    assert tf.train.latest_checkpoint(str(model_dir / "ckpt"))
    assert os.path.exists(str(model_dir / "best" / "model.index"))
    assert summary["steps"] == 2 * steps_per_epoch(tiny_encoder_dir, small_data_dirs["train"])


def test_killed_run_resumes_with_step_and_optimizer_state(tiny_encoder_dir, small_data_dirs,
                                                          tmp_path):
    model_dir = tmp_path / "resume"
    command = train_command(tiny_encoder_dir, small_data_dirs, model_dir, "--epochs=30",
                            "--checkpoint_every_steps=3")
    process = subprocess.Popen(command, env=run_env(), stdout=subprocess.DEVNULL,
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

    result = subprocess.run(command[:-2] + ["--epochs=30", f"--max_steps={step + 2}"],
                            env=run_env(), capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from step {step}" in result.stderr
    resumed = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir / "ckpt")))
    assert resumed.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == step + 2
    iterations = [k for k in resumed.get_variable_to_shape_map()
                  if k.startswith("encoder_optimizer/") and "iteration" in k]
    assert iterations, "optimizer state is not in the checkpoint"
    assert resumed.get_tensor(iterations[0]) == step + 2  # Adam's own counter carried on.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_multi_worker_processes_train_together(tiny_encoder_dir, small_data_dirs,
                                                   tmp_path):
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = []
    for index in range(2):
        env = run_env()
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
        with pytest.raises(train.UsageError, match="no TFRecord files"):
            self.run(tiny_encoder_dir, str(empty), tmp_path / "m")

    def test_empty_records(self, tiny_encoder_dir, small_data_dirs, tmp_path):
        empty = tmp_path / "empty"
        empty.mkdir()
        for name in ("leaf_tags.txt", "internal_tags.txt", "pos_tags.txt"):
            (empty / name).write_text(
                open(os.path.join(small_data_dirs["train"], name)).read())
        with tf.io.TFRecordWriter(str(empty / "records-00000-of-00001.tfrecord")):
            pass
        with pytest.raises(train.UsageError, match="holds no examples"):
            self.run(tiny_encoder_dir, str(empty), tmp_path / "m")

    def test_dev_converted_with_another_vocabulary(self, tiny_encoder_dir, small_data_dirs,
                                                   tmp_path):
        other = tmp_path / "dev_own_vocab"
        convert([f"--input={os.path.join(small_data_dirs['dev'], 'trees.txt')}",
                 f"--output_dir={other}"])
        with pytest.raises(train.UsageError, match="another tag vocabulary"):
            self.run(tiny_encoder_dir, small_data_dirs["train"], tmp_path / "m", str(other))

    def test_model_dir_of_another_vocabulary(self, tiny_encoder_dir, small_data_dirs, tmp_path):
        other = tmp_path / "dev_own_vocab"
        convert([f"--input={os.path.join(small_data_dirs['dev'], 'trees.txt')}",
                 f"--output_dir={other}"])
        self.run(tiny_encoder_dir, small_data_dirs["train"], tmp_path / "m")
        with pytest.raises(train.UsageError, match="another tag vocabulary"):
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

    def test_command_line_reports_one_line(self, tiny_encoder_dir, small_data_dirs, tmp_path):
        result = subprocess.run(
            train_command(tiny_encoder_dir, {"train": str(tmp_path / "nowhere")},
                          tmp_path / "m"),
            env=run_env(), capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 2
        assert result.stderr.strip().startswith("error:")
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr

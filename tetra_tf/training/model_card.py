"""The model card: what an export is (encoder, data, tags, scores), stored inside it.

Training leaves provenance in its model directory (`training.json`: each run's command,
date, data and recipe; `evaluations.json`: `train --evaluate` results; best/best.json and
history.json: dev scores). The export gathers them, with the encoder's size and the tag
vocabularies, into ``assets.extra/model_card.json`` in the SavedModel (TF Serving ignores
assets.extra) plus a short ``model_card.md`` rendering. Reading a card back (`Parser(...).card`,
``python -m tetra_tf.parse --model_dir=DIR --describe``) is `tetra_tf.contract.export_format`'s.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Any

from tetra_tf import default_encoder
from tetra_tf.contract import export_format
from tetra_tf.training.model_dir import (BEST_CHECKPOINT, BEST_DIR, BEST_RECORD_FILE,
                                         EVALUATIONS_FILE, HISTORY_FILE, TRAINING_FILE, TaggerSpec,
                                         read_json, write_json)
from tetra_tf.version import __version__

SCORES_METRIC = ("EVALB F1 (COLLINS.prm), gold POS on the leaves; POS accuracy of the parser's "
                 "own tags")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------
# Provenance written during training


def record_training_run(model_dir: str, command: str | None, train_data: str,
                        dev_data: str | None, encoder: str | None, recipe: dict[str, Any],
                        train_sentences: int | None, resumed_from_step: int) -> None:
    """Appends this run (a fresh start or a resume) to the model directory's training.json."""
    path = os.path.join(model_dir, TRAINING_FILE)
    runs = (read_json(path) or {}).get("runs", [])

    runs.append({
        "command": command, "date": _now(), "tetra_tf_version": __version__,
        "train_data": ",".join(os.path.abspath(d) for d in train_data.split(",") if d),
        "dev_data": os.path.abspath(dev_data) if dev_data else None,
        "encoder": default_encoder.source(encoder), "recipe": recipe,
        "train_sentences": train_sentences, "resumed_from_step": resumed_from_step})
    write_json(path, {"runs": runs})


def checkpoint_step(model_dir: str, checkpoint: str) -> int | None:
    """The training step of a checkpoint: best/best.json's for best/model, N for ckpt-N."""
    if os.path.normpath(checkpoint) == os.path.normpath(os.path.join(model_dir, BEST_CHECKPOINT)):
        best = read_json(os.path.join(model_dir, BEST_DIR, BEST_RECORD_FILE)) or {}
        return best.get("step")
    tail = os.path.basename(checkpoint).rsplit("-", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None


def record_evaluation(model_dir: str, data_dir: str, scores: dict[str, Any]) -> None:
    """Saves a `train --evaluate` result (per data directory, latest kept) in evaluations.json."""
    path = os.path.join(model_dir, EVALUATIONS_FILE)
    evaluations = read_json(path) or {}
    data_dir = os.path.abspath(data_dir)
    evaluations[data_dir] = dict(
        scores, data=data_dir, date=_now(),
        step=checkpoint_step(model_dir, scores.get("checkpoint", "")))
    write_json(path, evaluations)


# --------------------------------------------------------------------------------------
# The card


def _split_name(data_dir: str | None) -> str | None:
    return os.path.basename(os.path.normpath(data_dir)) if data_dir else None


def _data_stats(data_dirs: str | None) -> dict[str, Any] | None:
    """Sentence and word counts of converted data directories (comma-joined; their
    stats.json), where present: one directory's, or the sums of several (a final fit)."""
    if not data_dirs:
        return None
    parts = [d for d in data_dirs.split(",") if d]
    stats = [read_json(os.path.join(d, "stats.json")) or {} for d in parts]
    result: dict[str, Any] = {"path": " + ".join(parts)}
    for key in ("input", "trees_written", "words"):
        values = [s[key] for s in stats if key in s]
        if len(values) == len(parts):
            result[key] = (" + ".join(map(str, values)) if key == "input"
                           else sum(values))
    licences = sorted({s["licence"] for s in stats if s.get("licence")})
    if licences:  # any part's licence binds the whole
        result["licence"] = "; ".join(licences)
    return result


def _kept_weights(run: dict[str, Any], kept_checkpoint: bool, step: int | None,
                  mixed_layers: int) -> str:
    """Which weights were exported, in words: the run's selection and averaging, or a
    rolling checkpoint's trained weights."""
    recipe = run.get("recipe") or {}
    if not kept_checkpoint:
        kept = f"a rolling checkpoint (step {step}): the trained weights, not selected"
        if recipe.get("ema_decay"):
            kept += " nor averaged"
    else:
        if run.get("dev_data") and recipe.get("keep", "best") == "best":
            kept = "the epoch with the best dev F1"
        elif run.get("dev_data"):
            kept = "the last epoch (dev F1 reported, not used to select)"
        else:
            kept = "the last epoch (no dev data: nothing selected)"
        if recipe.get("ema_decay"):
            kept += (f"; an exponential moving average of the weights "
                     f"(decay {recipe['ema_decay']})")
    if mixed_layers > 1:
        kept += f"; word features mix the encoder's last {mixed_layers} layers"
    return kept


def _member(model_dir: str, checkpoint: str) -> dict[str, Any]:
    """What a model directory records about one checkpoint: its training and its scores."""
    spec = TaggerSpec.load(model_dir)
    runs = (read_json(os.path.join(model_dir, TRAINING_FILE)) or {}).get("runs", [])
    first = runs[0] if runs else {}
    step = checkpoint_step(model_dir, checkpoint)

    dev = None
    best = read_json(os.path.join(model_dir, BEST_DIR, BEST_RECORD_FILE))
    history = read_json(os.path.join(model_dir, HISTORY_FILE)) or []
    for record in [best] + list(reversed(history)):
        if (record and step is not None and record.get("step") == step
                and record.get("dev_f1") is not None):
            dev = {"f1": record.get("dev_f1"), "pos_accuracy": record.get("dev_pos_accuracy"),
                   "epoch": record.get("epoch"), "step": step}
            break
    evaluations = []
    for result in (read_json(os.path.join(model_dir, EVALUATIONS_FILE)) or {}).values():
        if step is not None and result.get("step") == step:
            evaluations.append({
                "split": _split_name(result.get("data")), "data": result.get("data"),
                "sentences": result.get("sentences"), "f1": result.get("f1"),
                "f1_predicted_pos": result.get("f1_predicted_pos"),
                "pos_accuracy": result.get("pos_accuracy"), "date": result.get("date")})
    test = next((e for e in evaluations if e["split"] == "test"), None)
    return {
        "checkpoint": os.path.abspath(checkpoint),
        "step": step,
        "encoder_name": first.get("encoder"),
        "training": {
            "command": first.get("command"),
            "date": first.get("date"),
            "runs": len(runs),
            "train_data": _data_stats(first.get("train_data")),
            "dev_data": _data_stats(first.get("dev_data")),
            "train_sentences": first.get("train_sentences"),
            "recipe": first.get("recipe"),
            "kept_weights": _kept_weights(
                runs[-1], os.path.normpath(checkpoint) == os.path.normpath(
                    os.path.join(model_dir, BEST_CHECKPOINT)), step, spec.heads.mixed_layers),
        } if runs else None,
        "scores": {"dev": dev, "test": test, "evaluations": evaluations},
    }


def build(checkpoints: list[tuple[str, str]], module) -> dict[str, Any]:
    """Gathers the card of an export of (model_dir, checkpoint) pairs as `module`
    (ParserModule): one model's, or an ensemble's, whose members' records it lists and
    whose own scores are not known at export time (tools/eval_export.py measures them)."""

    spec = TaggerSpec.load(checkpoints[0][0])
    encoder = spec.encoder
    encoder_parameters = sum(int(v.shape.num_elements())
                             for e in module.encoders for v in e.variables)
    head_parameters = sum(int(v.shape.num_elements()) for v in module.head_variables)
    members = [_member(model_dir, checkpoint) for model_dir, checkpoint in checkpoints]
    card = {
        "format": export_format.CARD_FORMAT,
        "exported": _now(),
        "tetra_tf_version": __version__,
        "checkpoint": ",".join(m["checkpoint"] for m in members),
        "step": members[0]["step"] if len(members) == 1 else None,
        "encoder": {
            "name": members[0]["encoder_name"],
            "parameters": encoder_parameters,
            "compute_dtype": module.encoders[0].compute_dtype.name,
            "pack_length": module.pack_length,
            "layers": encoder.num_layers,
            "hidden_size": encoder.hidden_size,
            "attention_heads": encoder.num_attention_heads,
            "intermediate_size": encoder.intermediate_size,
            "max_sequence_length_subword_pieces": encoder.max_sequence_length,
            "wordpiece_vocabulary": encoder.vocab_size,
            "lower_case": encoder.do_lower_case,
            "model_type": encoder.model_type,
            "special_tokens": dataclasses.asdict(encoder.special_tokens),
        },
        "parameters": encoder_parameters + head_parameters,
        "tag_vocabularies": {
            "leaf": int(module.leaf_tags.shape[0]),
            "internal": int(module.internal_tags.shape[0]),
            "pos": int(module.pos_tags.shape[0]),
        },
        "max_stack_depth": spec.max_stack_depth,
        "training": members[0]["training"],
        "scores": {"metric": SCORES_METRIC, **members[0]["scores"]},
    }
    if len(members) > 1:
        card["training"] = None
        card["scores"] = {"metric": SCORES_METRIC, "dev": None, "test": None,
                          "evaluations": []}
        card["ensemble"] = {
            "combination": "the mean of the members' tag log-probabilities, then the decoder",
            "members": [{key: m[key] for key in ("checkpoint", "step", "training", "scores")}
                        for m in members],
        }
    return card


def write(export_dir: str, card: dict[str, Any]) -> str:
    """Writes the card (JSON and Markdown) into export_dir/assets.extra; returns the JSON path."""
    path = os.path.join(export_dir, export_format.CARD_FILE)
    write_json(path, card)
    with open(os.path.join(export_dir, export_format.CARD_MARKDOWN_FILE), "w",
              encoding="utf-8") as f:
        f.write(export_format.render_card(card))
    return path

#!/usr/bin/env python3
"""Packs an export as a model shipped inside tetra-tf (tetra_tf/packaged_models.py).

  python tools/pack_model.py --export_dir=models/student/1 --name=en_ptb_sample_sm \
      --version=1 --card=MODEL_CARD.md [--gold=data/ptb_sample/test/trees.txt] \
      [--output_dir=tetra_tf/models]

Writes OUTPUT_DIR/NAME: the export's files with float16 weights, the model card given
(MODEL_CARD.md, written by hand: data, teachers, recipe, F1, speed, size) and a manifest of
every file's SHA-256. The card must state the training data's licence as the export's own
card records it (the NLTK sample's: non-commercial use only), so that wherever the model is
offered, so is its licence. With --gold, the packed model (written out as a float32 export)
and the source export parse the gold trees' words: their trees are compared one by one and
both are scored (EVALB COLLINS.prm, gold POS), and packing fails if their F1 differ by more
than --max_f1_difference.

Commit a packaged model's files once, when final: every version stays in git's history.

Exit codes: 0 packed; 2 bad flags, a card without the licence, or trees that differ too
much; 1 any other failure.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from absl import flags

from tetra_tf import cli, packaged_models
from tetra_tf.contract import export_format
from tetra_tf.errors import InputError

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the program's flags (only when run, so that importing it defines none)."""
    flags.DEFINE_string("export_dir", None, "The float32 export to pack.")
    flags.DEFINE_string("name", None, "The packaged model's name (a bare word).")
    flags.DEFINE_string("version", None, "Its version (the written-out export's folder).")
    flags.DEFINE_string("card", None, "The model card to ship with it (Markdown).")
    flags.DEFINE_string("output_dir", packaged_models.PACKAGED_DIR,
                        "Where the packaged model's folder NAME goes.")
    flags.DEFINE_string("gold", None, "Gold trees, one per line: compare the packed model's "
                        "trees with the source export's on their words.")
    flags.DEFINE_float("max_f1_difference", 0.05, "With --gold: the most the two F1 may "
                       "differ by.")


def check_card(card_path: str, export_dir: str) -> None:
    """The card must repeat the licence of the data the export trained on.

    Raises:
      InputError: naming the licence the card lacks.
    """
    with open(card_path, encoding="utf-8") as f:
        card_text = f.read()
    card = export_format.read_card(export_dir) or {}
    trainings = [card.get("training") or {}] + [
        member.get("training") or {} for member in (card.get("ensemble") or {}).get(
            "members", [])]
    for training in trainings:
        licence = (training.get("train_data") or {}).get("licence")
        if licence and licence not in card_text:
            raise InputError(f"--card={card_path} does not state the training data's "
                             f"licence: {licence!r}")


def compare_trees(gold_path: str, source_export: str, packed_export: str) -> dict:
    """Parses the gold trees' words with both exports; counts equal trees, scores both."""
    import nltk  # pylint: disable=import-outside-toplevel

    from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel
    from tetra_tf.trees import evalb  # pylint: disable=import-outside-toplevel
    from tetra_tf.trees import scoring

    gold = [nltk.Tree.fromstring(line) for line in evalb.read_lines(gold_path) if line.strip()]
    words = [tree.leaves() for tree in gold]
    trees = {}
    for name, export in (("source", source_export), ("packed", packed_export)):
        trees[name] = Parser(export).parse_sents(words)
    same = sum(a == b for a, b in zip(trees["source"], trees["packed"]))
    f1 = {name: scoring.score_parses(gold, predicted).f1 for name, predicted in trees.items()}
    return {"sentences": len(gold), "same_trees": same, "f1": f1}


def main(argv) -> int:
    del argv
    cli.require("export_dir", "name", "version", "card")
    if not packaged_models.is_name(FLAGS.name) or FLAGS.name.startswith("."):
        raise cli.UsageError(f"--name={FLAGS.name}: a bare word that names no existing path")
    export_format.check(FLAGS.export_dir)
    check_card(FLAGS.card, FLAGS.export_dir)
    target = os.path.join(FLAGS.output_dir, FLAGS.name)
    record = packaged_models.pack(FLAGS.export_dir, FLAGS.name, FLAGS.version, target,
                                  extra_files={export_format.PACKAGED_CARD_FILE: FLAGS.card})
    size = sum(os.path.getsize(os.path.join(target, path)) for path in record["files"])
    print(f"packed {FLAGS.export_dir} as {FLAGS.name} version {FLAGS.version} in {target}: "
          f"{len(record['files'])} files, {size / 1e6:.1f} MB")
    if FLAGS.gold:
        with tempfile.TemporaryDirectory() as scratch:  # a fresh write-out, not a cached one
            packed_export = os.path.join(scratch, "1")
            packaged_models.write_export(FLAGS.name, packed_export, FLAGS.output_dir)
            result = compare_trees(FLAGS.gold, FLAGS.export_dir, packed_export)
        difference = abs(result["f1"]["packed"] - result["f1"]["source"])
        print(f"{result['same_trees']} of {result['sentences']} trees the same as the source "
              f"export's; F1 {result['f1']['packed']:.2f} packed, "
              f"{result['f1']['source']:.2f} source")
        if difference > FLAGS.max_f1_difference:
            shutil.rmtree(target)
            print(f"error: F1 differs by {difference:.2f} > {FLAGS.max_f1_difference}: "
                  f"{target} removed", file=sys.stderr)
            return cli.EXIT_USAGE
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)

"""The benchmarks' shared inputs: the test split's sentences, and the default model (the
bundled all-MiniLM-L6-v2 with random tag heads).

The model runs at the speed of a trained model (the heads are a sliver of the work), so
speed figures need no training run; trees from it are meaningless.
"""

from __future__ import annotations

import os
import shutil

from tetra_tf import train_extra  # noqa: F401  (first: Keras 2 before TensorFlow loads)
import tensorflow as tf

from tetra_tf.savedmodel import exporter as export
from tetra_tf.training import encoders
from tetra_tf.training.model import HeadsConfig
from tetra_tf.training.model_dir import (BEST_CHECKPOINT, ENCODER_VOCAB_FILE, VOCAB_DIR, TaggerSpec,
                                         build_tagger)
from tetra_tf.trees import tags as tags_lib
from tetra_tf.trees import treebank


def default_model_dir(directory: str) -> str:
    """Writes a model directory (tag vocabularies of the NLTK sample's train split,
    MiniLM's weights, random heads) into `directory`; returns it."""
    taggings = []
    for entry in treebank.read_nltk_sample("train"):
        if entry.tree is not None:
            tree = treebank.clean_tree(entry.tree)
            if len(tree):
                taggings.append(tags_lib.tree_to_tags(tree))
    vocabs = tags_lib.TagVocabularies.build(taggings)
    pretrained = encoders.load_pretrained_encoder(None)
    spec = TaggerSpec(pretrained.config,
                      HeadsConfig(len(vocabs.leaf), len(vocabs.internal), len(vocabs.pos)), 8)
    vocabs.save(os.path.join(directory, VOCAB_DIR))
    shutil.copyfile(pretrained.vocab_path,
                    os.path.join(directory, VOCAB_DIR, ENCODER_VOCAB_FILE))
    spec.save(directory)
    tagger = build_tagger(spec, pretrained.encoder)
    tf.train.Checkpoint(model=tagger).write(os.path.join(directory, BEST_CHECKPOINT))
    return directory


def default_export(scratch: str) -> str:
    """The default model written under `scratch` and exported to scratch/export/1."""
    model_dir = default_model_dir(os.path.join(scratch, "model"))
    export_dir = os.path.join(scratch, "export", "1")
    export.export(model_dir, export_dir)
    return export_dir


def test_split_sentences() -> list[list[str]]:
    """The words of the NLTK sample's test split (cleaned trees, file order)."""
    return split_sentences("test")


def split_sentences(split: str) -> list[list[str]]:
    """The words of one of the NLTK sample's splits (cleaned trees, file order)."""
    sentences = []
    for entry in treebank.read_nltk_sample(split):
        if entry.tree is not None:
            words = treebank.leaves(treebank.clean_tree(entry.tree))
            if words:
                sentences.append(words)
    return sentences

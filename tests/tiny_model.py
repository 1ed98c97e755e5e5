"""A tiny random tetra-tagger model directory, for the export, parser and parse tests.

It has train.py's layout (tagger_config.json, vocab/, best/model) but is built directly
with TaggerSpec and build_tagger instead of by training: a 2-layer BERT of width 32 over a
small WordPiece vocabulary written here, and tag vocabularies from a few trees.
"""

from __future__ import annotations

import os
import string

from tetra_tf import train_extra  # noqa: F401  (first: Keras 2 before TensorFlow loads)
import nltk
import tensorflow as tf
import tf_keras

from tetra_tf.training import encoders
from tetra_tf.training.model import HeadsConfig
from tetra_tf.training.model_dir import ENCODER_VOCAB_FILE, VOCAB_DIR, TaggerSpec, build_tagger
from tetra_tf.trees import tags as tags_lib

TREES = [
    "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))",
    "(TOP (S (NP (PRP She)) (VP (VBZ says) (SBAR (S (NP (PRP he) (RB even))"
    " (VP (VBD left) (ADVP (RB early)))))) (. .)))",
    "(TOP (FRAG (NP (NNP Mr.) (NNP Smith)) (. ?)))",
    "(TOP (S (S (VP (VBG Running))) (VP (VBZ is) (ADJP (JJ fun))) (. !)))",
    "(TOP (NP (NP (CD 3) (NNS dogs)) (, ,) (NP (CD 2) (NNS cats)) (CC and) (NP (DT a) (NN bird))))",
    "(TOP (S (-LRB- -LRB-) (NP (NNS Words)) (VP (VBD were) (VP (VBN quoted) (PP (IN in)"
    " (`` ``) (NP (NN text)) ('' '')))) (-RRB- -RRB-)))",
    "(TOP (X (X (SYM *))))",
]

_WORDS = ("the cat sat on mat she says he even left early mr smith running is fun dogs cats "
          "and a bird words were quoted in text").split()


# An MPNet's specials come first, as in all-mpnet-base-v2's vocabulary (BERT's follow).
MPNET_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def encoder_vocab(model_type: str = "bert") -> list[str]:
    """Special tokens, letters, digits, punctuation, their ## forms and a few words."""
    symbols = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = ((MPNET_SPECIALS if model_type == "mpnet" else [])
              + ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + symbols
              + ["##" + s for s in string.ascii_lowercase + string.digits] + list(_WORDS))
    return list(dict.fromkeys(pieces))


def make_model_dir(model_dir: str, max_stack_depth: int = 8, seed: int = 0,
                   max_sequence_length: int = 512, mixed_layers: int = 1,
                   num_layers: int = 2, internal_uses_next_word: bool = False,
                   model_type: str = "bert") -> TaggerSpec:
    """Writes a tiny random model directory; returns its spec (with mixed_layers 2: an
    uneven mix of the last two layers; with model_type "mpnet": an MPNet encoder, whose
    relative position bias is random too)."""
    taggings = [tags_lib.tree_to_tags(nltk.Tree.fromstring(t)) for t in TREES]
    vocabs = tags_lib.TagVocabularies.build(taggings)
    vocab_dir = os.path.join(model_dir, VOCAB_DIR)
    vocabs.save(vocab_dir)
    pieces = encoder_vocab(model_type)
    with open(os.path.join(vocab_dir, ENCODER_VOCAB_FILE), "w", encoding="utf-8") as f:
        f.writelines(p + "\n" for p in pieces)
    mpnet = dict(model_type="mpnet", type_vocab_size=0, relative_attention_num_buckets=32,
                 norm_epsilon=1e-5, cls_token="<s>", sep_token="</s>", pad_token="<pad>",
                 unk_token="[UNK]") if model_type == "mpnet" else {}
    spec = TaggerSpec(
        encoders.EncoderConfig(vocab_size=len(pieces), hidden_size=32, num_layers=num_layers,
                               num_attention_heads=2, intermediate_size=64,
                               max_sequence_length=max_sequence_length, **mpnet),
        HeadsConfig(len(vocabs.leaf), len(vocabs.internal), len(vocabs.pos),
                    mixed_layers=mixed_layers, internal_uses_next_word=internal_uses_next_word),
        max_stack_depth)
    spec.save(model_dir)
    tf_keras.utils.set_random_seed(seed)
    tagger = build_tagger(spec)
    if model_type == "mpnet":  # tf-models initializes the bias with stddev 0.02: visible
        bias = tagger.encoder._relative_position_bias._relative_attention_bias
        bias.assign(tf.random.normal(bias.shape, stddev=2.0, seed=seed))
    # Random heads give near-uniform tags; larger weights make decoding less trivial.
    for variable in tagger.head_variables:
        variable.assign(variable * 50.0)
    if tagger.scalar_mix is not None:
        tagger.scalar_mix.layer_logits.assign([0.7, -0.4][:mixed_layers])
        tagger.scalar_mix.gamma.assign(1.5)
    tf.train.Checkpoint(model=tagger).write(os.path.join(model_dir, "best", "model"))
    return spec

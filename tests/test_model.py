"""The tagger model: shapes, masking, and that every encoder weight trains."""

import numpy as np
import pytest

import tensorflow as tf

from tetra_tf.data import input_pipeline, records
from tetra_tf.data.tokenization import SubwordTokenizer
from tetra_tf.training import encoders, model_dir
from tetra_tf.training import trainer as train
from tetra_tf.training import model as model_lib
from tetra_tf.training.model import HeadsConfig, tagging_loss_terms
from tetra_tf.trees.tags import TagVocabularies


@pytest.fixture(scope="module")
def batch(small_data_dirs, tiny_encoder_dir):
    pretrained = encoders.load_pretrained_encoder(tiny_encoder_dir)
    tokenizer = SubwordTokenizer(pretrained.vocab_path, lower_case=True)
    data = input_pipeline.tokenize_examples(
        input_pipeline.read_examples(small_data_dirs["train"]), tokenizer)
    config = input_pipeline.InputConfig(batch_size=4)
    summary = input_pipeline.summarize(data, config)
    dataset = input_pipeline.training_dataset(data, tokenizer, config, summary, seed=0)
    return next(iter(dataset.map(train.model_inputs)))


def make_model(encoder_dir, data_dir, **heads_options):
    vocabs = TagVocabularies.load(data_dir)
    pretrained = encoders.load_pretrained_encoder(encoder_dir)
    heads = HeadsConfig(len(vocabs.leaf), len(vocabs.internal), len(vocabs.pos), 0.0,
                        **heads_options)
    spec = model_dir.TaggerSpec(pretrained.config, heads, 8)
    return model_dir.build_tagger(spec, pretrained.encoder), spec


def test_outputs_have_one_row_per_word(batch, tiny_encoder_dir, small_data_dirs):
    model, spec = make_model(tiny_encoder_dir, small_data_dirs["train"])
    outputs = model({k: batch[k] for k in train.MODEL_INPUTS})
    batch_size, max_words = batch["word_end_positions"].shape
    assert outputs["leaf_logits"].shape == (batch_size, max_words, spec.heads.num_leaf_tags)
    assert outputs["internal_logits"].shape == (batch_size, max_words,
                                                spec.heads.num_internal_tags)
    assert outputs["pos_logits"].shape == (batch_size, max_words, spec.heads.num_pos_tags)


def test_word_features_come_from_each_words_last_subword(batch, tiny_encoder_dir,
                                                         small_data_dirs):
    model, _ = make_model(tiny_encoder_dir, small_data_dirs["train"])
    inputs = {k: batch[k] for k in train.MODEL_INPUTS}
    features = model.word_features(inputs).numpy()
    flat = {k: tf.reshape(inputs[k], [-1, inputs[k].shape[-1]]) for k in train.ENCODER_INPUTS}
    sequence = model.encoder(flat)["sequence_output"].numpy()
    positions = batch["word_end_positions"].numpy()
    for row in range(positions.shape[0]):
        n = int(batch["num_words"][row])
        np.testing.assert_allclose(features[row, :n], sequence[row, positions[row, :n]],
                                   atol=1e-6)


@pytest.mark.parametrize("uses_next_word", [False, True])
def test_internal_tags_see_the_next_word_only_when_asked(tiny_encoder_dir, small_data_dirs,
                                                         uses_next_word):
    model, _ = make_model(tiny_encoder_dir, small_data_dirs["train"],
                          internal_uses_next_word=uses_next_word)
    features = np.random.default_rng(0).normal(size=(2, 4, 32)).astype(np.float32)
    changed = features.copy()
    changed[0, 2] += 1.0  # the third word of the first sentence
    before, after = model.head_logits(features), model.head_logits(changed)

    def differs(key):  # per (sentence, word)
        return np.any(before[key].numpy() != after[key].numpy(), axis=-1)
    expected = np.zeros((2, 4), bool)
    expected[0, 2] = True
    np.testing.assert_array_equal(differs("leaf_logits"), expected)
    # The fencepost before that word (after word 2) sees it only with the option.
    expected[0, 1] = uses_next_word
    np.testing.assert_array_equal(differs("internal_logits"), expected)


def test_loss_ignores_padding_and_the_last_fencepost(batch):
    labels = {k: batch[k] for k in ("leaf_tag_ids", "internal_tag_ids", "pos_tag_ids")}
    n = batch["num_words"].numpy()
    assert np.all(labels["internal_tag_ids"].numpy()[np.arange(len(n)), n - 1] == -1)
    shape = labels["leaf_tag_ids"].shape
    rng = np.random.default_rng(0)
    outputs = {key: tf.constant(rng.normal(size=shape + (7,)), tf.float32)
               for key in ("leaf_logits", "internal_logits", "pos_logits")}
    labels = {k: tf.minimum(v, 6) for k, v in labels.items()}
    terms = tagging_loss_terms(outputs, labels)
    # Scramble every logit where the label is -1: the loss must not move.
    scrambled = {}
    for key, label_key in (("leaf_logits", "leaf_tag_ids"),
                           ("internal_logits", "internal_tag_ids"),
                           ("pos_logits", "pos_tag_ids")):
        masked = (labels[label_key].numpy() < 0)[..., None]
        noise = rng.normal(size=outputs[key].shape) * 100
        scrambled[key] = tf.constant(np.where(masked, noise, outputs[key].numpy()), tf.float32)
    again = tagging_loss_terms(scrambled, labels)
    for key in terms:
        np.testing.assert_allclose(terms[key][0], again[key][0], rtol=1e-6)
        assert terms[key][1] == again[key][1]
    assert terms["leaf_tag_ids"][1] == n.sum()
    assert terms["internal_tag_ids"][1] == (n - 1).sum()


def labels_and_random_logits(batch, seed: int, num_tags: int = 7):
    """The batch's gold tag ids capped below num_tags, and random logits over num_tags."""
    labels = {k: tf.minimum(batch[k], num_tags - 1) for k in records.TAG_ID_FEATURES}
    rng = np.random.default_rng(seed)
    shape = labels[records.LEAF_TAG_IDS].shape + (num_tags,)
    outputs = {key: tf.constant(rng.normal(size=shape), tf.float32)
               for key in ("leaf_logits", "internal_logits", "pos_logits")}
    return labels, outputs


def test_distillation_loss_mixes_gold_and_teacher_cross_entropies(batch):
    """(1 − w) · CE(gold) + w · CE(teacher), over the same tokens as the gold loss."""
    labels, outputs = labels_and_random_logits(batch, seed=1)
    shape = outputs["leaf_logits"].shape
    gold = tagging_loss_terms(outputs, labels)
    # A teacher sure of the gold tags teaches the gold loss itself.
    sure = dict(labels)
    for key, name in records.TEACHER_LOG_PROBS.items():
        one_hot = tf.one_hot(tf.maximum(labels[key], 0), 7).numpy()
        sure[name] = tf.constant(np.where(one_hot > 0, 0.0, -1e9), tf.float32)
    for key, (loss_sum, count) in tagging_loss_terms(outputs, sure, 1.0).items():
        np.testing.assert_allclose(loss_sum, gold[key][0], rtol=1e-5)
        assert count == gold[key][1]
    # A uniform teacher at weight w: its cross-entropy is the mean of −log-softmax.
    uniform = dict(labels, **{name: tf.fill(shape, float(-np.log(7)))
                              for name in records.TEACHER_LOG_PROBS.values()})
    mixed = tagging_loss_terms(outputs, uniform, 0.25)
    for key, name in records.TEACHER_LOG_PROBS.items():
        mask = (labels[key].numpy() >= 0)
        log_probs = tf.nn.log_softmax(outputs[model_lib.LOGIT_KEYS[key]]).numpy()
        soft = (-log_probs.mean(-1) * mask).sum()
        np.testing.assert_allclose(mixed[key][0], 0.75 * gold[key][0] + 0.25 * soft, rtol=1e-5)


def test_label_smoothing_mixes_gold_and_uniform_cross_entropies(batch):
    """(1 − ε) · CE(gold) + ε · CE(uniform), over the gold loss's tokens, per head."""
    labels, outputs = labels_and_random_logits(batch, seed=2)
    gold = tagging_loss_terms(outputs, labels)
    smoothed = tagging_loss_terms(outputs, labels, label_smoothing=0.1)
    for key in records.TAG_ID_FEATURES:
        mask = labels[key].numpy() >= 0
        log_probs = tf.nn.log_softmax(outputs[model_lib.LOGIT_KEYS[key]]).numpy()
        uniform = (-log_probs.mean(-1) * mask).sum()
        assert smoothed[key][1] == gold[key][1]
        np.testing.assert_allclose(smoothed[key][0], 0.9 * gold[key][0] + 0.1 * uniform,
                                   rtol=1e-5)
        assert abs(float(smoothed[key][0]) - float(gold[key][0])) > 1e-3


def test_every_encoder_variable_trains(batch, tiny_encoder_dir, small_data_dirs):
    """A tf_keras encoder inside a Keras 3 model would train only 2 of its variables."""
    model, _ = make_model(tiny_encoder_dir, small_data_dirs["train"])
    encoder_variables = model.encoder.trainable_variables
    assert len(encoder_variables) == len(model.encoder.variables)
    assert len(model.trainable_variables) == len(encoder_variables) + 6
    trainer = train.Trainer(model, train.TrainingConfig(warmup_steps=0, weight_decay=0.0),
                            total_steps=10, strategy=tf.distribute.get_strategy())
    trained = trainer.encoder_variables + trainer.head_variables
    pooler = [v for v in model.trainable_variables if "pooler_transform" in v.name]
    assert len(trained) + len(pooler) == len(model.trainable_variables) and len(pooler) == 2
    before = [v.numpy().copy() for v in trained]
    trainer.train_step(batch)
    unchanged = [v.name for v, old in zip(trained, before) if np.array_equal(v.numpy(), old)]
    # Attention key biases get no gradient from any loss: they shift all of a query's
    # logits equally, which softmax ignores.
    key_biases = [name for name in unchanged if "self_attention/key/bias" in name]
    assert unchanged == key_biases, f"not updated by a train step: {unchanged}"
    assert len(key_biases) == model.encoder.get_config()["num_layers"]

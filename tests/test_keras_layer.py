"""The export as a layer of a tf_keras model (docs/guides/export.md: the Keras layer)."""

import pytest

import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # noqa: F401  (the tokenizer's ops)
import tf_keras

from tetra_tf.parser import Parser

SENTENCES = ["The cat sat on the mat .", "Hi", "-LRB- 1\\/2 -RRB- `` quoted ''"]


pytestmark = pytest.mark.slow  # saves and reloads a Keras model around the export


def test_export_as_a_keras_layer_saves_and_loads(tiny_export_dir, tmp_path):
    # The export guide's example, verbatim.
    sentences = tf_keras.Input(shape=(), dtype=tf.string, name="sentences")
    trees = hub.KerasLayer(tiny_export_dir, signature="serving_default",
                           output_key="tree", name="tree")(sentences)
    num_words = tf_keras.layers.Lambda(lambda s: tf.strings.split(s).row_lengths(),
                                       name="num_words")(sentences)
    model = tf_keras.Model(sentences, {"tree": trees, "num_words": num_words})

    expected = [r.bracketed for r in
                Parser(tiny_export_dir).parse_each([s.split() for s in SENTENCES])]
    outputs = model(tf.constant(SENTENCES))
    assert [t.decode() for t in outputs["tree"].numpy()] == expected
    assert outputs["num_words"].numpy().tolist() == [len(s.split()) for s in SENTENCES]

    path = str(tmp_path / "keras_model")
    model.save(path)
    loaded = tf_keras.models.load_model(path, custom_objects={"KerasLayer": hub.KerasLayer})
    again = loaded(tf.constant(SENTENCES))
    assert [t.decode() for t in again["tree"].numpy()] == expected
    # The Keras model's own SavedModel serves without Keras, too.
    serve = tf.saved_model.load(path).signatures["serving_default"]
    served = serve(sentences=tf.constant(SENTENCES))
    assert [t.decode() for t in served["tree"].numpy()] == expected
    assert served["num_words"].numpy().tolist() == [len(s.split()) for s in SENTENCES]

"""Training (the ``[train]`` extra): encoders, the Keras tagger, model directories and
cards, distillation data and the trainer.

Importing this package checks the extra and selects Keras 2 before TensorFlow loads
(`tetra_tf.train_extra`); the runtime never imports it.
"""

from tetra_tf import train_extra  # noqa: F401  (first: the extra, then Keras 2)

"""The SavedModel: a trained tagger's encoder, heads, decoders and tree writer as one
``tf.Module`` with a ``tf.function`` per signature, written with its limits and warm-up.

Built from training code (the ``[train]`` extra); read by `tetra_tf.Parser` and the servers,
which never import it.
"""

from tetra_tf import train_extra  # noqa: F401  (first: the extra, then Keras 2)

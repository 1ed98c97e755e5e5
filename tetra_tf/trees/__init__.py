"""Trees and tags: Penn Treebank reading, tetra-tags, EVALB scoring and drawings (nltk,
no TensorFlow).
"""

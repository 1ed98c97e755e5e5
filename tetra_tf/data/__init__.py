"""Treebank → TFRecords and back into batches: the record schema, WordPiece tokenization,
the conversion program's library and the training input pipeline.
"""

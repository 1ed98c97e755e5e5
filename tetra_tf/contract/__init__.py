"""The sentence contract and the export's format: what a sentence, a limit, a result and
an export are, for every way in (no TensorFlow).
"""

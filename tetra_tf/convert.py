"""Converts Penn Treebank trees to tetra-tag TFRecords, tag vocabularies and gold trees.

The program behind tools/convert_ptb.py (also `python -m tetra_tf.convert`):

  python tools/convert_ptb.py --input=PATH_OR_GLOB --output_dir=DIR [--stats=FILE]
      [--vocab_from=DIR] [--num_shards=N]
  python tools/convert_ptb.py --nltk_sample=train|dev|test --output_dir=DIR ...

Input: a file, a directory (all its files, sorted) or a glob; raw .mrg files or one tree
per line. Each tree is cleaned (no -NONE- elements, no function tags, a TOP root), converted
to tetra-tags and checked to convert back to the identical tree. Malformed trees and trees
that fail that check are reported on stderr with file and line and skipped; every tree
read is either written or counted as skipped.

Output in DIR: records-SSSSS-of-NNNNN.tfrecord (tf.train.Example, see tetra_tf/data/records.py),
leaf_tags.txt, internal_tags.txt and pos_tags.txt (the tag vocabularies: built from this
data, or copied from --vocab_from), and trees.txt (the cleaned gold trees written to the
records, one per line, in the same order).

Exit codes: 0 on success (and for --help); 2 for a usage or input error (no input, both --input and
--nltk_sample, input matching no file, NLTK sample not found, bad --vocab_from, output
directory not writable); 1 for any other failure, or when no tree could be written.
"""

from tetra_tf import _moved
from tetra_tf.data import convert

__getattr__ = _moved.forward(__name__, convert)

if __name__ == "__main__":
    convert.run_program()

"""EVALB-equivalent bracket scorer (Sekine & Collins), in Python.

Usage: python -m tetra_tf.evalb GOLD PRED [--params FILE] [--per_sentence]

GOLD and PRED hold one tree per line; line i of PRED is scored against line i of GOLD,
exactly as EVALB does, parameter file semantics included (DEBUG, MAX_ERROR, CUTOFF_LEN,
LABELED, DELETE_LABEL, DELETE_LABEL_FOR_LENGTH, QUOTE_LABEL, EQ_LABEL, EQ_WORD). Without
--params the settings of the standard COLLINS.prm are used. Prints EVALB's summary blocks
("-- All --" and "-- len<=CUTOFF_LEN --"); --per_sentence also prints EVALB's
per-sentence table first.

Sentences EVALB cannot score are reported on stderr, one line each naming the line number,
and counted as EVALB counts them: a PRED line without words (blank) is a skip sentence; a
line that cannot be read (unbalanced brackets, a bracket with more than two elements, a
word outside a bracket), a length mismatch or a word mismatch makes an error sentence.

Exit codes:
  0  scored (error and skip sentences, if any, are counted in the summary)
  1  internal failure
  2  usage error, unreadable GOLD/PRED/parameter file
  3  stopped, as EVALB does, after more than MAX_ERROR errors; no summary
  4  GOLD and PRED have different numbers of lines; the summary covers the lines EVALB
     reads (it stops at the end of the shorter PRED file)
"""

from tetra_tf import _moved
from tetra_tf.trees import evalb

__getattr__ = _moved.forward(__name__, evalb)

if __name__ == "__main__":
    evalb.run_program()

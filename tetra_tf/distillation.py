r"""k-fold distillation data: training folds, and each fold labelled by teachers that never saw it.

A student learns from its teachers' tag distributions as well as from the gold tags
(`python -m tetra_tf.train --distillation_weight=W`). A teacher is confident and right on
the sentences it trained on, so its distribution there teaches little: each fold is
labelled by teachers trained on the other folds only.

  python -m tetra_tf.distillation --data=data/ptb_sample/train --folds=2 --output_dir=D
      # D/fold0, D/fold1: the training records in 2 contiguous folds
  python -m tetra_tf.train --train_data=D/fold1 --model_dir=T0 ...   # teacher of fold 0
  python -m tetra_tf.distillation --data=D/fold0 --teachers=T0 --output_dir=D/fold0_taught
  ... (and so for fold 1)
  python -m tetra_tf.train --train_data=D/fold0_taught,D/fold1_taught \
      --distillation_weight=0.5 --model_dir=STUDENT ...

With several --teachers (e.g. seeds), their log-probabilities are averaged and
renormalized, as an ensemble export averages them. Output directories hold the records
(records.TEACHER_LOG_PROBS added to each sentence, same order and shards), the tag
vocabularies, trees.txt, and records.TEACHER_FILE naming the teachers.

Exit codes: 0 done; 2 bad flags or input (one line on stderr); 1 any other failure.
"""

from tetra_tf import _moved
from tetra_tf.training import distillation

__getattr__ = _moved.forward(__name__, distillation)

if __name__ == "__main__":
    distillation.run_program()

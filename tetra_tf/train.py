r"""Trains the tetra-tagger on TFRecords from tools/convert_ptb.py, with tf.distribute.

  python -m tetra_tf.train --train_data=data/ptb_sample/train --dev_data=data/ptb_sample/dev \
      --model_dir=runs/minilm [--tpu=NAME | --strategy=default|mirrored|multi_worker]
  python -m tetra_tf.train --model_dir=runs/minilm --evaluate=data/ptb_sample/test

The model directory holds everything needed to resume and to export:
  tagger_config.json   encoder and heads configuration, max_stack_depth
  vocab/               tag vocabularies and the encoder's wordpiece vocabulary
  ckpt/                rolling checkpoints (model, optimizers, step) for automatic resume
  best/                the kept weights (the last epoch, or the best dev F1: --keep), best.json
  logs/                TensorBoard summaries
  training.json        each run's command, date, data and recipe (for the export's model card)
  evaluations.json     --evaluate results per data directory (for the model card)
Run the same command again after a kill and training continues from the last checkpoint.

Exit codes: 0 done; 2 bad flags or input (one line on stderr); 1 any other failure.
"""

from tetra_tf import _moved
from tetra_tf.training import trainer

__getattr__ = _moved.forward(__name__, trainer)

if __name__ == "__main__":
    trainer.run_program()

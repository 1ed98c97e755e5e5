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

.PHONY: install test data

install:
	$(PYTHON) -m pip install -e ".[dev]"

test:
	$(PYTHON) -m pytest -q tests

# TFRecords, tag vocabularies and gold trees for the NLTK sample's fixed splits.
data:
	$(PYTHON) tools/convert_ptb.py --nltk_sample=train --output_dir=$(DATA_DIR)/train --stats=$(DATA_DIR)/train/stats.json
	$(PYTHON) tools/convert_ptb.py --nltk_sample=dev --output_dir=$(DATA_DIR)/dev --vocab_from=$(DATA_DIR)/train --stats=$(DATA_DIR)/dev/stats.json
	$(PYTHON) tools/convert_ptb.py --nltk_sample=test --output_dir=$(DATA_DIR)/test --vocab_from=$(DATA_DIR)/train --stats=$(DATA_DIR)/test/stats.json

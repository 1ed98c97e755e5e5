"""The reference implementation's parsing pipeline, end to end, for side-by-side speed comparison.

Reproduces the kind of pipeline BASELINES.md measured for the reference (tetra_tag.py):

1. tokenization: `transformers.BertTokenizerFast` on the pre-split words (PTB escapes such as
   -LRB- mapped to text first), `is_split_into_words=True`, padded per batch, and each word's
   last subword found from `word_ids()`;
2. encoder: `transformers.BertModel` (all-MiniLM-L6-v2 by default) in PyTorch, eval mode,
   `torch.inference_mode()`, 2 threads; one random linear head (hidden → internal + leaf tag
   scores) on each word's last subword; log-softmax per tag kind on the CPU;
3. decoding: per sentence, the reference's NumPy beam search (bench/reference_decoder.py);
4. trees: per sentence, an nltk.Tree from the tags (`tetra_tf.trees.tags.tags_to_tree`).

The head is random (tag vocabularies from --vocab_dir, by default the converted NLTK-sample
training split, else synthetic ones of 40 leaf and 85 internal tags): the speed is a trained
model's. Batches are formed after sorting by length (characters of the joined words, as
bench/throughput.py does) with --sort_by_length, else in file order; sorting is not timed.
Everything is warmed up on all batches first; each figure is the best of --repeats passes,
and end to end and encoder-only runs alternate per batch so that load from other processes
skews both alike.

This process must never import TensorFlow (transformers after TensorFlow crashes here), so
TensorFlow code runs it through `ReferenceProcess`, this script in a subprocess timing
passes on demand (--passes_on_demand); importing this module loads neither torch nor
transformers.

Usage: python bench/reference_pipeline.py --sentences=FILE [--batch_size=64]
    [--sort_by_length] [--repeats=3] [--encoder_only] [--threads=2] [--max_stack_depth=8]
    [--vocab_dir=DIR] [--model_dir=DIR] [--passes_on_demand]
FILE: one pre-tokenized sentence per line, words separated by spaces.
Prints one JSON line: sentences, words, seconds (best end-to-end pass), sents_per_s, a
per-stage breakdown of that pass, decoder_us_per_word, and with --encoder_only the
encoder-only figures (tokenization + model forward).
Exit codes: 0 success, 1 failure, 2 usage or input error (e.g. missing or empty FILE).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Sequence

REPO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT_PATH = os.path.abspath(__file__)
sys.path.insert(0, REPO_ROOT)

from bench.reference_decoder import reference_beam_search  # noqa: E402  (NumPy only)

DEFAULT_VOCAB_DIR = os.path.join(REPO_ROOT, "data", "ptb", "train")
SYNTHETIC_LEAF_TAGS = 40
SYNTHETIC_INTERNAL_TAGS = 85
POS_PLACEHOLDER = "XX"

# Whole-token PTB escapes (as tetra_tf.data.tokenization, which cannot be imported without TF).
PTB_TOKEN_ESCAPES = {
    "-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
    "``": '"', "''": '"', "`": "'",
}


def unescape_ptb_token(token: str) -> str:
    """Returns the text a PTB token stands for (``-LRB-`` → ``(``, ``1\\/2`` → ``1/2``)."""
    if token in PTB_TOKEN_ESCAPES:
        return PTB_TOKEN_ESCAPES[token]
    return token.replace("\\/", "/").replace("\\*", "*")


def write_sentences_file(sentences: Sequence[Sequence[str]], path: str) -> None:
    """Writes pre-tokenized sentences, one per line, words separated by spaces."""
    with open(path, "w", encoding="utf-8") as f:
        for words in sentences:
            f.write(" ".join(words) + "\n")


def read_sentences_file(path: str) -> list[list[str]]:
    """Reads a file written by `write_sentences_file` (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        return [line.split() for line in f if line.strip()]


class ReferenceProcess:
    """The reference pipeline in a child process that times end-to-end passes on demand.

    So that a caller can alternate its own passes with the reference's: a shared machine's
    speed drifts by 10-30% within minutes, and alternating passes (each side's best) see
    the same moments, where two runs one after the other do not. Use as a context manager.
    """

    def __init__(self, sentences_file: str, batch_size: int = 64, sort: bool = True,
                 threads: int = 2, max_stack_depth: int = 8, vocab_dir: str | None = None):
        """Starts the child and waits until it has loaded and warmed up on every batch.

        Raises:
          RuntimeError: if the child fails to start; the message holds its stderr's end.
        """
        command = [sys.executable, SCRIPT_PATH, f"--sentences={sentences_file}",
                   f"--batch_size={batch_size}", f"--threads={threads}",
                   f"--max_stack_depth={max_stack_depth}", "--passes_on_demand",
                   "--sort_by_length" if sort else "--nosort_by_length"]
        if vocab_dir is not None:
            command.append(f"--vocab_dir={vocab_dir}")
        env = dict(os.environ, HF_HUB_OFFLINE="1", USE_TF="0", USE_TORCH="1")
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=self._stderr, text=True, env=env)
        self._read()

    def timed_pass(self) -> float:
        """Seconds of one end-to-end pass over all batches (the child's own clock)."""
        self._child.stdin.write("pass\n")
        self._child.stdin.flush()
        return float(self._read()["seconds"])

    def _read(self) -> dict:
        line = self._child.stdout.readline()
        if not line:
            self._child.wait()
            self._stderr.seek(0)
            raise RuntimeError(f"reference pipeline failed (exit {self._child.returncode}): "
                               f"{self._stderr.read()[-2000:]}")
        return json.loads(line)

    def close(self) -> None:
        if self._child.stdin and not self._child.stdin.closed:
            self._child.stdin.close()
        self._child.wait()
        self._stderr.close()

    def __enter__(self) -> "ReferenceProcess":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def load_tag_vocabularies(vocab_dir: str | None) -> tuple[list[str], list[str]]:
    """(leaf tags, internal tags) from `vocab_dir`, or synthetic ones if it is empty/None."""
    if vocab_dir:
        with open(os.path.join(vocab_dir, "leaf_tags.txt"), encoding="utf-8") as f:
            leaf_tags = [line.rstrip("\n") for line in f if line.strip()]
        with open(os.path.join(vocab_dir, "internal_tags.txt"), encoding="utf-8") as f:
            internal_tags = [line.rstrip("\n") for line in f if line.strip()]
        return leaf_tags, internal_tags
    labels = ["NP", "VP", "PP", "S", "SBAR", "ADJP", "ADVP", "S+VP", "NP+QP"]
    leaf_tags = [f"{'lr'[i % 2]}/{labels[i % len(labels)]}" if i >= 2 else "lr"[i]
                 for i in range(SYNTHETIC_LEAF_TAGS)]
    internal_tags = [f"{'LR'[i % 2]}/{labels[i % len(labels)]}" if i >= 2 else "LR"[i]
                     for i in range(SYNTHETIC_INTERNAL_TAGS)]
    return leaf_tags, internal_tags


class ReferencePipeline:
    """Tokenizer, PyTorch encoder + random head, per-sentence decoder and tree building.

    Needs torch and transformers (imported here, not at module level).
    """

    def __init__(self, model_dir: str, leaf_tags: Sequence[str], internal_tags: Sequence[str],
                 max_stack_depth: int = 8, seed: int = 0):
        import numpy as np
        import torch
        import transformers

        from tetra_tf.trees import tags as tags_lib

        self._np, self._torch, self._tags_lib = np, torch, tags_lib
        self.tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)
        self.model = transformers.BertModel.from_pretrained(model_dir).eval()
        torch.manual_seed(seed)
        self.leaf_tags, self.internal_tags = list(leaf_tags), list(internal_tags)
        # One head over the combined vocabulary (internal tags, then leaf tags), as in the
        # reference.
        self.head = torch.nn.Linear(self.model.config.hidden_size,
                                    len(self.internal_tags) + len(self.leaf_tags)).eval()
        self.leaf_directions = np.array(
            [0 if tags_lib.tag_direction(t) == tags_lib.LEAF_LEFT else 1 for t in leaf_tags])
        self.internal_directions = np.array(
            [0 if tags_lib.tag_direction(t) == tags_lib.INTERNAL_LEFT else 1
             for t in internal_tags])
        self.max_stack_depth = max_stack_depth

    def tokenize(self, batch: Sequence[Sequence[str]]):
        """Returns the padded encoding and, per sentence, each word's last subword position."""
        encoding = self.tokenizer([[unescape_ptb_token(w) for w in words] for words in batch],
                                  is_split_into_words=True, padding=True,
                                  return_tensors="pt")
        word_end_positions = []
        for row, words in enumerate(batch):
            ends = [0] * len(words)
            for position, word_id in enumerate(encoding.word_ids(row)):
                if word_id is not None:
                    ends[word_id] = position
            for i in range(1, len(words)):  # a word with no subwords: the previous word's end
                ends[i] = ends[i] or ends[i - 1]
            word_end_positions.append(ends)
        return encoding, word_end_positions

    def forward(self, encoding):
        """The encoder's last hidden states, [batch, subwords, hidden]."""
        return self.model(**encoding).last_hidden_state

    def tag_log_probs(self, hidden, word_end_positions):
        """(leaf, internal) log-probabilities as NumPy, [batch, words, NL] and [.., NI]."""
        torch = self._torch
        width = max(len(ends) for ends in word_end_positions)
        positions = torch.tensor([ends + [0] * (width - len(ends))
                                  for ends in word_end_positions])
        rows = torch.arange(len(word_end_positions))[:, None]
        logits = self.head(hidden[rows, positions])
        num_internal = len(self.internal_tags)
        internal = torch.log_softmax(logits[..., :num_internal], dim=-1)
        leaf = torch.log_softmax(logits[..., num_internal:], dim=-1)
        return leaf.numpy(), internal.numpy()

    def decode(self, leaf_scores, internal_scores) -> tuple[list[str], list[str]]:
        """One sentence's best leaf and internal tags."""
        _, leaf_ids, internal_ids = reference_beam_search(
            leaf_scores, internal_scores, self.leaf_directions, self.internal_directions,
            self.max_stack_depth)
        return ([self.leaf_tags[i] for i in leaf_ids],
                [self.internal_tags[i] for i in internal_ids])

    def parse_batch(self, batch: Sequence[Sequence[str]], timings: dict | None = None) -> list:
        """Parses a batch of pre-split sentences into nltk.Trees.

        Args:
          batch: the sentences' words.
          timings: if given, seconds per stage (tokenize, encoder, decode, trees) are added.
        """
        clock = [time.perf_counter()]

        def lap(stage):
            now = time.perf_counter()
            if timings is not None:
                timings[stage] = timings.get(stage, 0.0) + now - clock[0]
            clock[0] = now

        with self._torch.inference_mode():
            encoding, word_end_positions = self.tokenize(batch)
            lap("tokenize")
            leaf, internal = self.tag_log_probs(self.forward(encoding), word_end_positions)
            lap("encoder")
        decoded = [self.decode(leaf[row, :len(words)], internal[row, :len(words)])
                   for row, words in enumerate(batch)]
        lap("decode")
        trees = [self._tags_lib.tags_to_tree(words, [POS_PLACEHOLDER] * len(words), *tags)
                 for words, tags in zip(batch, decoded)]
        lap("trees")
        return trees

    def encode_batch(self, batch: Sequence[Sequence[str]]):
        """Encoder only: tokenization and the model forward pass."""
        with self._torch.inference_mode():
            return self.forward(self.tokenize(batch)[0])


def make_batches(sentences: list[list[str]], batch_size: int,
                 sort: bool) -> list[list[list[str]]]:
    """Batches in file order, or after sorting by characters (as bench/throughput.py)."""
    if sort:
        sentences = sorted(sentences, key=lambda words: len(" ".join(words)))
    return [sentences[i:i + batch_size] for i in range(0, len(sentences), batch_size)]


def warm_up(pipeline: ReferencePipeline, batches, encoder_only: bool) -> None:
    for batch in batches:
        pipeline.parse_batch(batch)
        if encoder_only:
            pipeline.encode_batch(batch)


def measure(pipeline: ReferencePipeline, batches, repeats: int, encoder_only: bool) -> dict:
    """Best-of-`repeats` seconds end to end (with its stage breakdown) and encoder-only."""
    warm_up(pipeline, batches, encoder_only)
    best = {"seconds": float("inf"), "encoder_only_seconds": float("inf")}
    for _ in range(repeats):
        timings: dict = {}
        end_to_end = encoder = 0.0
        for batch in batches:
            start = time.perf_counter()
            pipeline.parse_batch(batch, timings)
            end_to_end += time.perf_counter() - start
            if encoder_only:
                start = time.perf_counter()
                pipeline.encode_batch(batch)
                encoder += time.perf_counter() - start
        if end_to_end < best["seconds"]:
            best["seconds"], best["breakdown_seconds"] = end_to_end, timings
        if encoder_only:
            best["encoder_only_seconds"] = min(best["encoder_only_seconds"], encoder)
    return best


def _define_flags():
    # Defined only when run as a script, so that importing this module from another absl
    # program (bench/throughput.py) does not clash with its flags.
    from absl import flags

    flags.DEFINE_string("sentences", None, "File of pre-tokenized sentences, one per line.")
    flags.DEFINE_integer("batch_size", 64, "Sentences per batch.")
    flags.DEFINE_bool("sort_by_length", False, "Batch after sorting by length.")
    flags.DEFINE_integer("repeats", 3, "Timed passes; the best is reported.")
    flags.DEFINE_bool("encoder_only", False, "Also time tokenization + model forward alone.")
    flags.DEFINE_integer("threads", 2, "torch intra-op threads.")
    flags.DEFINE_integer("max_stack_depth", 8,
                         "The decoder's depth cap (8 as ours; the reference's recipe used 12).")
    flags.DEFINE_string("vocab_dir", DEFAULT_VOCAB_DIR,
                        "Directory with leaf_tags.txt and internal_tags.txt ('' or missing: "
                        f"synthetic {SYNTHETIC_LEAF_TAGS} leaf + {SYNTHETIC_INTERNAL_TAGS} "
                        "internal tags).")
    flags.DEFINE_string("model_dir", None,
                        "HF BERT model directory (default: the bundled all-MiniLM-L6-v2).")
    flags.DEFINE_bool("passes_on_demand", False,
                      "After loading and warming up, print a JSON line {\"ready\": true}, then "
                      "time one end-to-end pass per line read from stdin and print "
                      "{\"seconds\": s} for each, until stdin closes (`ReferenceProcess`).")
    return flags.FLAGS


def main(argv, flag_values) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    fv = flag_values
    if not fv.sentences:
        print("error: --sentences=FILE is required", file=sys.stderr)
        return 2
    if fv.batch_size < 1 or fv.repeats < 1 or fv.threads < 1 or fv.max_stack_depth < 1:
        print("error: batch_size, repeats, threads and max_stack_depth must be ≥ 1",
              file=sys.stderr)
        return 2
    try:
        sentences = read_sentences_file(fv.sentences)
    except OSError as e:
        print(f"error: cannot read --sentences: {e}", file=sys.stderr)
        return 2
    if not sentences:
        print(f"error: {fv.sentences} holds no sentences", file=sys.stderr)
        return 2
    vocab_dir = fv.vocab_dir
    if vocab_dir and not os.path.isfile(os.path.join(vocab_dir, "leaf_tags.txt")):
        if vocab_dir != DEFAULT_VOCAB_DIR:
            print(f"error: no leaf_tags.txt in --vocab_dir={vocab_dir}", file=sys.stderr)
            return 2
        vocab_dir = None

    import torch
    import transformers

    if "tensorflow" in sys.modules:
        print("error: TensorFlow got imported into the reference process", file=sys.stderr)
        return 1
    torch.set_num_threads(fv.threads)
    model_dir = fv.model_dir
    if model_dir is None:
        from tetra_tf import default_encoder  # no TensorFlow

        model_dir = default_encoder.encoder_dir()
    leaf_tags, internal_tags = load_tag_vocabularies(vocab_dir)
    pipeline = ReferencePipeline(model_dir, leaf_tags, internal_tags, fv.max_stack_depth)
    batches = make_batches(sentences, fv.batch_size, fv.sort_by_length)
    if fv.passes_on_demand:
        warm_up(pipeline, batches, encoder_only=False)
        print(json.dumps({"ready": True}), flush=True)
        for _ in sys.stdin:
            start = time.perf_counter()
            for batch in batches:
                pipeline.parse_batch(batch)
            print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
        return 0
    best = measure(pipeline, batches, fv.repeats, fv.encoder_only)

    num_sentences = len(sentences)
    num_words = sum(len(words) for words in sentences)
    breakdown = best["breakdown_seconds"]
    # Subwords with and without padding: how much of the encoder's work the batching wastes.
    encodings = [pipeline.tokenize(batch)[0]["attention_mask"] for batch in batches]
    subwords = sum(int(mask.sum()) for mask in encodings)
    padded_subwords = sum(mask.numel() for mask in encodings)
    report = {
        "pipeline": "reference (HF fast tokenizer + PyTorch BertModel + per-sentence numpy "
                    "decoder + nltk trees)",
        "sentences": num_sentences,
        "words": num_words,
        "subwords": subwords,
        "padded_subwords": padded_subwords,
        "batch_size": fv.batch_size,
        "sorted_by_length": fv.sort_by_length,
        "repeats": fv.repeats,
        "threads": fv.threads,
        "max_stack_depth": fv.max_stack_depth,
        "leaf_tags": len(leaf_tags),
        "internal_tags": len(internal_tags),
        "seconds": round(best["seconds"], 4),
        "sents_per_s": round(num_sentences / best["seconds"], 1),
        "breakdown_seconds": {k: round(v, 4) for k, v in breakdown.items()},
        "decoder_us_per_word": round(1e6 * breakdown["decode"] / num_words, 1),
        "outside_encoder_share": round(1 - breakdown["encoder"] / best["seconds"], 3),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    if fv.encoder_only:
        report["encoder_only_seconds"] = round(best["encoder_only_seconds"], 4)
        report["encoder_only_sents_per_s"] = round(
            num_sentences / best["encoder_only_seconds"], 1)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("USE_TF", "0")
    os.environ.setdefault("USE_TORCH", "1")
    from absl import app

    _FLAGS = _define_flags()
    app.run(lambda argv: main(argv, _FLAGS))

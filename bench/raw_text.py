#!/usr/bin/env python3
"""Raw text in: the NLTK sample's sentences written back as plain text and parsed as text.

  python bench/raw_text.py --export_dir=models/tetra/1 [--split=test] [--batch_size=64]

Each gold tree's leaves are detokenized by NLTK's TreebankWordDetokenizer (brackets as
written: "(", not -LRB-), the way a user would have typed the sentence. Printed side by
side, from one run:

* sentences: each detokenized sentence through `Parser.parse_text(split_sentences=False)`:
  the share whose tokens equal the gold leaves, and bracket F1 (EVALB COLLINS.prm, gold
  POS) over those sentences, against F1 of the same sentences given pre-tokenized
  (`Parser.parse_sents` on the gold leaves): the difference is what raw text costs;
* paragraphs: each source file's sentences joined by a space into one document, through
  `Parser.parse_texts`: the share of sentences found with exactly their own tokens;
* the graph: when the export has the ``parse_text`` signature, the share of documents whose
  sentences, tokens, offsets and trees equal the host's.

Exit codes: 0 measured; 1 failure; 2 usage error.
"""

from __future__ import annotations

import collections
import sys

from absl import flags

from tetra_tf import cli
from tetra_tf.contract import sentences

FLAGS = flags.FLAGS
_BRACKETS = {escape: bracket for bracket, escape in sentences.PTB_BRACKET_ESCAPES.items()}


def gold_and_raw(split: str):
    """(file, gold tree, raw text) per tree of a sample split (cleaned as for training)."""
    from nltk.tokenize.treebank import TreebankWordDetokenizer

    from tetra_tf.trees import treebank

    detokenizer = TreebankWordDetokenizer()
    for entry in treebank.read_nltk_sample(split):
        if entry.tree is None:
            continue
        tree = treebank.clean_tree(entry.tree)
        # Brackets as written; quotes stay `` and '' (the detokenizer writes them as " by
        # side).
        words = [_BRACKETS.get(leaf, leaf) for leaf in tree.leaves()]
        yield entry.source, tree, detokenizer.detokenize(words, convert_parentheses=False)


def graph_agreement(parser, documents: list[str], host) -> tuple[int, int]:
    """(documents whose graph output equals the host's, documents), in batches of 16."""
    import tensorflow as tf

    signature = parser.model.signatures.get("parse_text")
    if signature is None:
        return 0, 0
    same = 0
    for first in range(0, len(documents), 16):
        outputs = {k: v.numpy() for k, v in signature(
            text=tf.constant(documents[first:first + 16])).items()}
        for row, expected in enumerate(host[first:first + 16]):
            got = []
            for s in range(outputs["num_sentences"][row]):
                n = outputs["num_words"][row, s]
                got.append((int(outputs["sentence_starts"][row, s]),
                            int(outputs["sentence_ends"][row, s]),
                            [w.decode() for w in outputs["words"][row, s, :n]],
                            outputs["word_starts"][row, s, :n].tolist(),
                            outputs["word_ends"][row, s, :n].tolist(),
                            outputs["tree"][row, s].decode()))
            want = [(x.start, x.end, x.words, [t.start for t in x.tokens],
                     [t.end for t in x.tokens], getattr(x.result, "bracketed", None))
                    for x in expected]
            same += got == want
    return same, len(documents)


def main(argv) -> int:
    del argv
    cli.require("export_dir")
    from tetra_tf.parser import Parser
    from tetra_tf.trees import scoring

    items = list(gold_and_raw(FLAGS.split))
    parser = Parser(FLAGS.export_dir)
    gold_trees = [tree for _, tree, _ in items]
    raw_texts = [raw for _, _, raw in items]

    pretokenized = parser.parse_sents([tree.leaves() for tree in gold_trees],
                                      FLAGS.batch_size)
    as_text = [document[0] for document in parser.parse_texts(
        raw_texts, split_sentences=False, batch_size=FLAGS.batch_size)]
    matched = [i for i, sentence in enumerate(as_text)
               if sentence.words == gold_trees[i].leaves()
               and not isinstance(sentence.result, sentences.SentenceError)]
    gold_matched = [gold_trees[i] for i in matched]
    f1_text = scoring.score_parses(gold_matched, [as_text[i].result.tree for i in matched])
    f1_words = scoring.score_parses(gold_matched, [pretokenized[i] for i in matched])
    f1_all = scoring.score_parses(gold_trees, pretokenized)

    by_file = collections.defaultdict(list)
    for index, (source, _, _) in enumerate(items):
        by_file[source].append(index)
    documents = [" ".join(raw_texts[i] for i in indices) for indices in by_file.values()]
    parsed_documents = parser.parse_texts(documents, batch_size=FLAGS.batch_size)
    found = sum(len(document) for document in parsed_documents)
    exact = 0
    for indices, document in zip(by_file.values(), parsed_documents):
        got = collections.Counter(tuple(sentence.words) for sentence in document)
        for i in indices:
            leaves = tuple(gold_trees[i].leaves())
            if got[leaves]:
                got[leaves] -= 1
                exact += 1
    same, checked = graph_agreement(parser, documents, parsed_documents)

    total = len(items)
    print(f"{FLAGS.split} split of the NLTK sample, {total} sentences, {FLAGS.export_dir}")
    print(f"sentences as raw text: tokens equal the gold leaves on {len(matched)} of {total} "
          f"({100 * len(matched) / total:.1f}%)")
    print(f"  F1 (gold POS) on those {len(matched)}: raw text "
          f"{f1_text.evalb_gold_pos.fscore:.2f}, pre-tokenized "
          f"{f1_words.evalb_gold_pos.fscore:.2f} (difference "
          f"{f1_text.evalb_gold_pos.fscore - f1_words.evalb_gold_pos.fscore:+.2f}); "
          f"pre-tokenized on all {total}: {f1_all.evalb_gold_pos.fscore:.2f}")
    print(f"paragraphs ({len(documents)} files, sentences joined by a space): {found} "
          f"sentences found for {total}; {exact} ({100 * exact / total:.1f}%) with exactly "
          "a gold sentence's tokens")
    if checked:
        print(f"graph (parse_text signature) equals the host on {same} of {checked} documents")
    else:
        print("graph: the export has no parse_text signature (exported before it)")
    return 0


if __name__ == "__main__":
    flags.DEFINE_string("export_dir", None, "The exported SavedModel (models/tetra/1).")
    flags.DEFINE_enum("split", "test", ["train", "dev", "test"], "The NLTK sample's split.")
    flags.DEFINE_integer("batch_size", 64, "Sentences per model call.", lower_bound=1)
    cli.run(main)

"""The input pipeline: evaluation yields every sentence once in bucket order, and packing
is traced once per shape however many datasets map it."""

import collections

import pytest

from tetra_tf.data import input_pipeline, records
from tetra_tf.data.tokenization import SubwordTokenizer

# Narrow buckets: the 96 training trees spread over them but leave the first (one piece)
# empty, and the longest sentences overflow the last, so evaluation also yields windows.
BUCKETS = (3, 16, 24, 32, 48)


@pytest.fixture(scope="module")
def tokenized(small_data_dirs, tiny_encoder_dir):
    tokenizer = SubwordTokenizer(f"{tiny_encoder_dir}/vocab.txt", lower_case=True)
    data = input_pipeline.tokenize_examples(
        input_pipeline.read_examples(small_data_dirs["train"]), tokenizer).cache()
    return data, tokenizer


def _trees(data) -> list[str]:
    return [example[records.TREE].decode("utf-8") for example in data.as_numpy_iterator()]


@pytest.mark.parametrize("static_shapes", [False, True])
def test_evaluation_yields_every_sentence_once_shortest_buckets_first(tokenized,
                                                                      static_shapes):
    data, tokenizer = tokenized
    config = input_pipeline.InputConfig(batch_size=8, bucket_lengths=BUCKETS,
                                        static_shapes=static_shapes)
    summary = input_pipeline.summarize(data, config)
    assert summary.too_long > 0 and summary.bucket_sizes[0] == 0
    seen, widths = [], []
    for batch in input_pipeline.evaluation_batches(data, tokenizer, config, summary):
        rows = batch["num_words"] > 0
        seen += [tree.decode("utf-8") for tree in batch[records.TREE][rows]]
        widths.append(batch["input_word_ids"].shape[-1])
        if static_shapes and batch["input_word_ids"].shape[1] == 1:  # not windowed
            assert len(batch["num_words"]) == config.batch_size
    assert collections.Counter(seen) == collections.Counter(_trees(data))
    assert widths == sorted(widths)
    used = [length for length, size in zip(BUCKETS, summary.bucket_sizes) if size]
    assert sorted(set(widths)) == used  # windowed sentences take the last bucket's width


@pytest.mark.slow
def test_packing_is_traced_once_per_shape_across_epochs(tokenized, monkeypatch):
    data, tokenizer = tokenized
    traced = []
    pack = input_pipeline._pack_example

    def counting_pack(example, tokenizer, seq_length, max_words, num_windows):
        traced.append((seq_length, max_words, num_windows))
        return pack(example, tokenizer, seq_length, max_words, num_windows)

    monkeypatch.setattr(input_pipeline, "_pack_example", counting_pack)
    input_pipeline._packer.cache_clear()
    config = input_pipeline.InputConfig(batch_size=8, bucket_lengths=BUCKETS)
    summary = input_pipeline.summarize(data, config)
    for epoch in range(3):
        for _ in input_pipeline.training_dataset(data, tokenizer, config, summary, seed=epoch):
            pass
        for _ in input_pipeline.evaluation_batches(data, tokenizer, config, summary):
            pass
    input_pipeline._packer.cache_clear()
    used = [length for length, size in zip(BUCKETS, summary.bucket_sizes) if size]
    # One trace per bucket in use (shared by training and evaluation), one for windows.
    assert sorted(traced, key=str) == sorted(
        [(n, n - 2, 1) for n in used] + [(BUCKETS[-1], None, None)], key=str)

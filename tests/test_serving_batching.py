"""Tests for the server's cross-request batching (tetra_tf.serving.batching): TF Serving's
batching parameters, the scheduler, merging and splitting outputs."""

import concurrent.futures
import os
import threading
import time

import numpy as np
import pytest

from tetra_tf.contract import export_format
from tetra_tf.serving import batching


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 60.0

# TF Serving's documented examples (tensorflow_serving/batching/README.md): its CPU
# starting point, and allowed_batch_sizes with pad_variable_length_inputs.
_TF_SERVING_EXAMPLES = {
    """max_batch_size { value: 128 }
batch_timeout_micros { value: 0 }
max_enqueued_batches { value: 1000000 }
num_batch_threads { value: 8 }
""": dict(max_batch_size=128, batch_timeout_micros=0, max_enqueued_batches=1_000_000,
          num_batch_threads=8, allowed_batch_sizes=()),
    """max_batch_size { value: 32 }
batch_timeout_micros { value: 1000 }
num_batch_threads { value: 4 }
allowed_batch_sizes: 8
allowed_batch_sizes: 16
allowed_batch_sizes: 32
pad_variable_length_inputs: { value: true }
""": dict(max_batch_size=32, batch_timeout_micros=1000, max_enqueued_batches=10,
          num_batch_threads=4, allowed_batch_sizes=(8, 16, 32)),
}


@pytest.mark.parametrize("text", sorted(_TF_SERVING_EXAMPLES))
def test_batching_parameters_parse_tf_serving_examples(text):
    params = batching.parse_batching_parameters(text)
    for name, value in _TF_SERVING_EXAMPLES[text].items():
        assert getattr(params, name) == value, name


def test_shipped_batching_parameters_parse():
    params = batching.read_batching_parameters(
        os.path.join(REPO_ROOT, "serving", "batching_parameters.txt"))
    assert params.max_batch_size >= 16 and params.num_batch_threads >= 1


@pytest.mark.parametrize("text, message", [
    ("max_batch_size { value: 0 }", "positive"),
    ("max_batch_siz { value: 8 }", "no field named"),
    ("max_batch_size: 8", 'Expected "{"'),
    ("max_batch_size { value: 8 } allowed_batch_sizes: 4", "must equal max_batch_size"),
    ("max_batch_size { value: 8 } allowed_batch_sizes: 8 allowed_batch_sizes: 4",
     "increasing"),
    # Accepted and silently dropped before: refused by name.
    ('thread_pool_name { value: "shared" }', "thread_pool_name is not supported"),
    ("pad_variable_length_inputs { value: false }", "pad_variable_length_inputs is not"),
])
def test_batching_parameters_errors(text, message):
    with pytest.raises(batching.BatchingParametersError, match=message):
        batching.parse_batching_parameters(text)


def test_split_outputs_cuts_each_request_to_its_own_width():
    # Two requests merged: rows of 2 and 3 words, the batch padded to 3.
    outputs = {"words": np.array([[b"a", b"b", b""], [b"c", b"d", b"e"]], dtype=object),
               "num_words": np.array([2, 3], np.int32)}
    first, second = batching.split_outputs(outputs, [1, 1], [2, 3], 3)
    assert first["words"].tolist() == [[b"a", b"b"]] and first["num_words"].tolist() == [2]
    assert second["words"].tolist() == [[b"c", b"d", b"e"]]
    joined = batching.join_outputs([first, second], 3)
    assert joined["words"].tolist() == outputs["words"].tolist()


def test_split_outputs_cuts_counted_outputs_to_each_requests_own_count():
    # parse_marginals: constituent probabilities padded with 0 to the batch's most.
    outputs = {"constituent_marginals": np.array([[0.5, 0, 0], [0.9, 0.8, 0.7],
                                                  [0.6, 0.4, 0]], np.float32),
               "num_constituents": np.array([1, 3, 2], np.int32)}
    first, second = batching.split_outputs(outputs, [1, 2], [None, None], None)
    assert first["constituent_marginals"].tolist() == [[0.5]]
    assert second["constituent_marginals"].shape == (2, 3)
    joined = batching.join_outputs([first, second], None)
    np.testing.assert_array_equal(joined["constituent_marginals"],
                                  outputs["constituent_marginals"])


def test_outputs_wide_by_count_or_by_k_are_never_cut_to_a_requests_words():
    # A merged batch whose longest sentence has 8 words, as many as parse_k_best's trees
    # and as the second row's constituents: only the word-wide output is cut to 3 words.
    k = export_format.K_BEST
    outputs = {"words": np.array([[b"a", b"b", b"c"] + [b""] * (k - 3), [b"w"] * k],
                                 dtype=object),
               "k_best_trees": np.array([[b"t"] * k, [b"u"] * k], dtype=object),
               "constituent_marginals": np.array([[0.5] * 4 + [0] * (k - 4), [0.9] * k],
                                                 np.float32),
               "num_constituents": np.array([4, k], np.int32)}
    first, second = batching.split_outputs(outputs, [1, 1], [3, k], k)
    assert first["words"].shape == (1, 3) and first["k_best_trees"].shape == (1, k)
    assert first["constituent_marginals"].tolist() == [[0.5] * 4]  # its own 4, not 3
    # A split request's slices join padded to their largest count, not to its words.
    joined = batching.join_outputs([first, {**second, "constituent_marginals":
                                            second["constituent_marginals"][:, :5]}], 20)
    assert joined["words"].shape == (2, 20)
    assert joined["constituent_marginals"].shape == (2, 5)


def test_join_outputs_pads_a_texts_slices_to_their_largest_shape():
    # A request of texts split in two slices: [texts, sentences, words] of other shapes.
    first = {"words": np.array([[[b"a", b"b"]]], dtype=object),
             "num_words": np.array([[2]], np.int32), "score": np.array([[-1.5]], np.float32)}
    second = {"words": np.array([[[b"c"], [b"d"]]], dtype=object),
              "num_words": np.array([[1, 1]], np.int32),
              "score": np.array([[-0.5, -2.0]], np.float32)}
    joined = batching.join_outputs([first, second], None)
    assert joined["words"].tolist() == [[[b"a", b"b"], [b"", b""]], [[b"c", b""], [b"d", b""]]]
    assert joined["num_words"].tolist() == [[2, -1], [1, 1]]
    assert joined["score"].tolist() == [[-1.5, 0.0], [-0.5, -2.0]]


def _recording_scheduler(params, holding_payload, answer=lambda payload: payload):
    """A scheduler whose batches are recorded as (payloads, thread name); the batch that
    starts with holding_payload waits for the returned event before it finishes."""
    release = threading.Event()
    batches = []

    def run_batch(tasks):
        batches.append(([t.payload for t in tasks], threading.current_thread().name))
        if tasks[0].payload == holding_payload:
            release.wait(TIMEOUT_S)
        for task in tasks:
            task.finish(answer(task.payload))

    return batching.BatchScheduler(params, run_batch, name="test-batch"), batches, release


def _wait_until(condition):
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_with_a_timeout_an_idle_scheduler_runs_a_request_at_once_a_busy_one_gathers():
    """A batch timeout delays nobody at an idle server; under load, requests that arrive
    within the timeout of each other run as one batch."""
    timeout_s = 0.5
    params = batching.BatchingParameters(max_batch_size=8, batch_timeout_micros=int(
        timeout_s * 1e6), max_enqueued_batches=4, num_batch_threads=2)
    scheduler, batches, release = _recording_scheduler(params, "busy")

    def submit_and_wait(payload):
        task = batching.Task("key", 1, 0, payload)
        scheduler.submit(task)
        return task.wait(), threading.current_thread().name

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        lone, lone_thread = pool.submit(submit_and_wait, "lone").result()
        # Idle: it ran at once on the caller's own thread (the inline path never waits
        # for the timeout), not on a batch thread after it.
        assert batches[0] == (["lone"], lone_thread)
        busy = pool.submit(submit_and_wait, "busy")  # Idle again: inline, holds a slot.
        _wait_until(lambda: len(batches) == 2)
        # A batch runs and a slot is free: these wait for the timeout, then run together.
        started = time.monotonic()
        gathered = [pool.submit(submit_and_wait, name) for name in ("a", "b")]
        assert sorted(future.result()[0] for future in gathered) == ["a", "b"]
        # A lower bound the timeout itself guarantees (load only adds to it).
        assert time.monotonic() - started >= timeout_s * 0.9
        release.set()
        assert busy.result()[0] == "busy"
    scheduler.stop()
    assert sorted(batches[2][0]) == ["a", "b"] and batches[2][1].startswith("test-batch")


def test_slices_of_a_split_request_run_side_by_side_on_the_batch_threads():
    """Submitted with inline=False (as BatchingRunner submits a split request's slices),
    tasks at an idle scheduler go to the batch threads, which run them at once, instead
    of one after another on the caller's thread."""
    params = batching.BatchingParameters(max_batch_size=1, batch_timeout_micros=0,
                                         max_enqueued_batches=4, num_batch_threads=2)
    running = threading.Barrier(3)  # Both slices must be running at the same time.

    def run_batch(tasks):
        running.wait(TIMEOUT_S)
        for task in tasks:
            task.finish((task.payload, threading.current_thread().name))

    scheduler = batching.BatchScheduler(params, run_batch, name="test-batch")
    tasks = [batching.Task("key", 1, 0, name) for name in ("first", "second")]
    for task in tasks:
        scheduler.submit(task, inline=False)  # Returns at once: nothing runs inline.
    running.wait(TIMEOUT_S)
    results = [task.wait() for task in tasks]
    scheduler.stop()
    assert [payload for payload, _ in results] == ["first", "second"]
    assert all(thread.startswith("test-batch") for _, thread in results)
    assert results[0][1] != results[1][1]


def test_scheduler_merges_waiting_tasks_and_runs_a_lone_one_inline():
    params = batching.BatchingParameters(max_batch_size=4, batch_timeout_micros=0,
                                         max_enqueued_batches=2, num_batch_threads=1)
    scheduler, batches, release = _recording_scheduler(params, "first", str.upper)

    def submit_and_wait(payload):
        task = batching.Task("key", 1, 0, payload)
        scheduler.submit(task)
        return task.wait(), threading.current_thread().name

    with concurrent.futures.ThreadPoolExecutor(max_workers=9) as pool:
        first = pool.submit(submit_and_wait, "first")  # Alone: runs inline, holds the slot.
        _wait_until(lambda: len(batches) == 1)
        others = [pool.submit(submit_and_wait, name) for name in "abcdefgh"]
        _wait_until(lambda: scheduler.queued_rows() == 8)  # Two full batches wait...
        with pytest.raises(batching.QueueFullError):  # ...so the queue is full.
            scheduler.submit(batching.Task("key", 1, 0, "refused"))
        release.set()
        assert first.result()[0] == "FIRST"
        results = [future.result() for future in others]
    scheduler.stop()
    assert batches[0] == (["first"], first.result()[1])  # On the caller's own thread.
    assert [result for result, _ in results] == list("ABCDEFGH")
    assert sorted(len(payloads) for payloads, _ in batches[1:]) == [4, 4]
    assert sorted(p for payloads, _ in batches[1:] for p in payloads) == list("abcdefgh")
    assert all(thread.startswith("test-batch") for _, thread in batches[1:])


def test_constrained_requests_of_different_widths_merge_padded_with_no_constraints():
    """parse_constrained's constraint inputs are padded as the export pads them (−1 spans,
    "" labels and parts of speech) when requests of different widths share a model call."""
    import types

    from tetra_tf.serving.runners import BatchingRunner

    calls = []

    def call(signature_name, inputs):
        calls.append((signature_name, inputs))
        return {"forced": (inputs["forced_spans"][:, :, 0] >= 0).sum(axis=1),
                "labels": np.array([b"|".join(row) for row in inputs["forced_labels"]],
                                   dtype=object)}

    model = types.SimpleNamespace(call=call)
    runner = BatchingRunner(batching.BatchingParameters(max_batch_size=8), ("words",))
    requests = [
        {"sentences": np.array([b"a b c"], dtype=object),
         "forced_spans": np.array([[[0, 1], [0, 2]]], np.int32),
         "forced_labels": np.array([[b"NP", b""]], dtype=object),
         "forbidden_spans": np.array([[[-1, -1]]], np.int32),
         "given_pos_tags": np.array([[b"DT", b"", b""]], dtype=object)},
        {"sentences": np.array([b"d e"], dtype=object),
         "forced_spans": np.array([[[1, 1]]], np.int32),
         "forced_labels": np.array([[b"VP"]], dtype=object),
         "forbidden_spans": np.array([[[0, 1], [-1, -1]]], np.int32),
         "given_pos_tags": np.array([[b""]], dtype=object)},
    ]
    tasks = [batching.Task(("parse_constrained",), 1, 0, (inputs, None)) for inputs in requests]
    runner._run_batch(model, tasks)  # pylint: disable=protected-access
    ((signature_name, merged),) = calls
    assert signature_name == "parse_constrained"
    assert merged["forced_spans"].tolist() == [[[0, 1], [0, 2]], [[1, 1], [-1, -1]]]
    assert merged["forced_labels"].tolist() == [[b"NP", b""], [b"VP", b""]]
    assert merged["forbidden_spans"].tolist() == [[[-1, -1], [-1, -1]], [[0, 1], [-1, -1]]]
    assert merged["given_pos_tags"].tolist() == [[b"DT", b"", b""], [b"", b"", b""]]
    assert [task.wait()["forced"].tolist() for task in tasks] == [[2], [1]]


def test_allowed_batch_sizes_pad_calls_except_of_signatures_bounded_by_rows():
    """A call is padded with copies of its first row up to an allowed batch size, but not a
    parse_constrained or parse_span_marginals call, whose bounds count sentences: padding
    could take a request that fits over them (and it would be refused even alone)."""
    import types

    from tetra_tf.serving.runners import BatchingRunner

    rows_called = []

    def call(signature_name, inputs):
        rows_called.append((signature_name, len(inputs["sentences"])))
        return {"num_words": np.array([len(s.split()) for s in inputs["sentences"]])}

    model = types.SimpleNamespace(call=call)
    runner = BatchingRunner(batching.BatchingParameters(max_batch_size=8,
                                                        allowed_batch_sizes=(4, 8)),
                            ("words",))
    sentences = np.array([b"a b c", b"d e"], dtype=object)
    signatures = ("serving_default", export_format.PARSE_CONSTRAINED_SIGNATURE,
                  export_format.PARSE_SPAN_MARGINALS_SIGNATURE)
    assert set(signatures[1:]) == set(export_format.ROW_BOUNDED_SIGNATURES)
    for signature_name in signatures:
        task = batching.Task((signature_name,), 2, 0, ({"sentences": sentences}, None))
        runner._run_batch(model, [task])  # pylint: disable=protected-access
        assert task.wait()["num_words"].tolist() == [3, 2]  # padding rows cut off
    assert rows_called == [("serving_default", 4)] + [(name, 2) for name in signatures[1:]]

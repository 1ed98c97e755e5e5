"""Time and peak memory of the worst requests the limits allow, next to an ordinary one.

Each request goes through the SavedModel alone (its ``serving_default`` signature, in this
process: what plain TF Serving runs) and through serving/server.py (started here as a
subprocess on 127.0.0.1, a free port; one request at a time). Requests:

* ordinary: one test-split sentence of the NLTK sample (about 25 words);
* max words: one sentence of 1,000 ordinary words (the server's --max_words_per_sentence);
* max pieces: 4 sentences of 1,000 words of "!!!!!!!!" (8 pieces each): 32,000 pieces,
  just under the graph's max_pieces_per_call (32,768);
* punctuation: one sentence of 24 words of 40,000 '!' each (960 KB: under the server's
  1 MiB body limit); every word is cut to max_pieces_per_word (8) pieces;
* CJK: one sentence of 24 words of 13,000 CJK characters each (936 KB of UTF-8).

Printed per request: words, seconds (best of --repeats; of at least 5 for the cheap
ordinary request, whose time is the baseline), seconds per word, the ratio of
that to the ordinary request's seconds per word (the figure to watch; goal ≤ 10×), and the
peak resident memory above the level before the request (sampled every 2 ms from /proc).
A request the server refuses shows its HTTP status.

The model: --export_dir (e.g. models/tetra/1, a trained export), or by default the
bundled all-MiniLM-L6-v2 with random tag heads, exported to a temporary directory (the
cost is a trained model's).

Usage: python bench/hostile.py [--export_dir=DIR] [--repeats=2] [--noserver]
Exit codes: 0 success, 1 failure, 2 usage error.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

from tetra_tf import train_extra  # noqa: E402,F401  (first: Keras 2 before TensorFlow loads)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402

from tetra_tf.contract import export_format  # noqa: E402
from tetra_tf.contract.export_format import saved_model_file  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401

from tetra_tf.data import tokenization  # noqa: E402
from bench.minilm_model import default_export, test_split_sentences  # noqa: E402

_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "An exported SavedModel (BASE/VERSION).")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Timed runs per request; the best is reported.")
_SERVER = flags.DEFINE_bool("server", True, "Also send the requests through serving/server.py.")

MODEL_NAME = "tetra"
SERVER_START_TIMEOUT_S = 300
REQUEST_TIMEOUT_S = 600


def requests() -> list[tuple[str, list[str]]]:
    """(name, sentences) of each request; the first is the ordinary one."""
    test = test_split_sentences()
    ordinary = next(s for s in test if 24 <= len(s) <= 26)
    pool = [w for s in test for w in s]
    return [
        ("ordinary", [" ".join(ordinary)]),
        ("max words (1 x 1,000)", [" ".join(pool[:1000])]),
        ("max pieces (4 x 1,000 x 8)", [" ".join(["!" * 8] * 1000)] * 4),
        ("punctuation (24 x 40 KB)", [" ".join(["!" * 40_000] * 24)]),
        ("CJK (24 x 39 KB)", [" ".join(["\u6771" * 13_000] * 24)]),
    ]


class PeakRss:
    """Samples a process's resident memory every 2 ms between start() and stop()."""

    def __init__(self, pid: int | str = "self"):
        self._path = f"/proc/{pid}/statm"
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._stop = threading.Event()
        self.base = self.peak = 0

    def rss(self) -> int:
        with open(self._path, encoding="ascii") as f:
            return int(f.read().split()[1]) * self._page

    def __enter__(self):
        self.base = self.peak = self.rss()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self.rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())

    @property
    def delta_mb(self) -> float:
        return (self.peak - self.base) / 2**20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, sentences: list[str]) -> tuple[int, dict]:
    body = json.dumps({"inputs": {"sentences": sentences}}, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/models/{MODEL_NAME}:predict", data=body,
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, {"error": e.read()[:200].decode("utf-8", "replace")}


def measure(call, pid, repeats: int) -> tuple[float, float, str]:
    """(best seconds, peak RSS above the start of the first run in MB, status)."""
    best, peak, status = float("inf"), 0.0, "ok"
    for _ in range(repeats):
        with PeakRss(pid) as rss:
            start = time.perf_counter()
            status = call()
            best = min(best, time.perf_counter() - start)
        peak = max(peak, rss.delta_mb)
        if status != "ok":
            break
    return best, peak, status


def words_in(sentences: list[str]) -> int:
    return sum(len(s.split()) for s in sentences)


def report(title: str, rows: list[tuple[str, int, float, float, str]]) -> None:
    print(f"\n{title}")
    print(f"{'request':30s} {'words':>6s} {'seconds':>8s} {'ms/word':>8s} {'ratio':>7s} "
          f"{'peak MB':>8s}  status")
    ordinary = rows[0][2] / rows[0][1]
    for name, words, seconds, peak, status in rows:
        per_word = seconds / words
        print(f"{name:30s} {words:6d} {seconds:8.3f} {1000 * per_word:8.2f} "
              f"{per_word / ordinary:6.1f}x {peak:8.0f}  {status}")


def run_saved_model(export_dir: str, cases, repeats: int):
    model = tf.saved_model.load(export_dir)
    serve = model.signatures[export_format.SERVING_SIGNATURE]
    serve(sentences=tf.constant(["warm up ."]))
    rows = []
    for name, sentences in cases:
        def call(sentences=sentences):
            try:
                serve(sentences=tf.constant(sentences))["tree"].numpy()
            except tf.errors.InvalidArgumentError as e:
                return "InvalidArgument: " + str(e).splitlines()[0][:80]
            return "ok"
        seconds, peak, status = measure(call, "self", repeats if rows else max(repeats, 5))
        rows.append((name, words_in(sentences), seconds, peak, status))
    return rows


def run_server(export_dir: str, cases, repeats: int):
    base = tempfile.mkdtemp(prefix="hostile-serve-")
    os.symlink(os.path.abspath(export_dir), os.path.join(base, "1"))
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "serving", "server.py"),
         f"--model_base_path={base}", f"--model_name={MODEL_NAME}",
         f"--rest_api_port={port}", "--max_words_per_sentence=1000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server.py exited with {process.returncode}")
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/v1/models/{MODEL_NAME}", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("server.py did not come up") from None
                time.sleep(0.5)
        post(port, ["warm up ."])
        rows = []
        for name, sentences in cases:
            def call(sentences=sentences):
                code, _ = post(port, sentences)
                return "ok" if code == 200 else f"HTTP {code}"
            seconds, peak, status = measure(call, process.pid,
                                            repeats if rows else max(repeats, 5))
            rows.append((name, words_in(sentences), seconds, peak, status))
        return rows
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(base, ignore_errors=True)


def main(argv) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {' '.join(argv[1:])}", file=sys.stderr)
        return 2
    logging.set_verbosity(logging.ERROR)
    temporary = None
    export_dir = _EXPORT_DIR.value
    try:
        if export_dir is None:
            temporary = tempfile.mkdtemp(prefix="hostile-")
            export_dir = default_export(temporary)
            print("model: all-MiniLM-L6-v2 with random heads (exported to a temporary dir)")
        elif saved_model_file(export_dir) is None:
            print(f"error: {export_dir} holds no SavedModel", file=sys.stderr)
            return 2
        else:
            print(f"model: {export_dir}")
        print(f"limits: max_pieces_per_word {tokenization.MAX_PIECES_PER_WORD}, "
              f"max_pieces_per_call {tokenization.MAX_PIECES_PER_CALL}; "
              f"{os.cpu_count()} CPUs; best of {_REPEATS.value}")
        cases = requests()
        report("SavedModel alone (serving_default, in process):",
               run_saved_model(export_dir, cases, _REPEATS.value))
        if _SERVER.value:
            report("serving/server.py (subprocess, one request at a time):",
                   run_server(export_dir, cases, _REPEATS.value))
    finally:
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
    return 0


if __name__ == "__main__":
    app.run(main)

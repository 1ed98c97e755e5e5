"""Load test of serving/server.py: closed-loop clients, batching off and on, REST and gRPC.

One run, against the local server on one export:

* serving/server.py without batching (TensorFlow's default threads) and with
  --enable_batching (serving/batching_parameters.txt and, as that file asks,
  --tensorflow_intra_op_parallelism=1; --intra_op_parallelism changes it), each answering
  1, 8 and 32 concurrent closed-loop clients over REST (keep-alive HTTP/1.1,
  `{"instances": [sentence]}`; the answer holds every output) and over TF Serving's gRPC
  API (PredictionServiceStub.Predict, asking only for the `tree` output with
  `output_filter`, as a client that reads only trees would; TF Serving's REST API has no
  such filter). Every client sends one sentence per request, drawn in turn from the NLTK
  sample's test split (wsj_0180-0199), --requests per configuration. The clients share
  the server's cores, so they do as little as a client can: each sentence's request is
  built once and replayed (REST on a plain keep-alive socket, its JSON answer decoded
  whole; gRPC on the official stub, reading the tree from the answer's TensorProto), and
  the load generator's own CPU per request is printed (`client ms`). Each server first
  answers every sentence once, untimed (TensorFlow sets up its kernels per new shape on
  first use).
* the offline ceiling: `tetra_tf.Parser` at batch 64 over the same sentences, two
  batches' model calls at once (its default; `parse_each`, keeping the graph's tree strings
  without building nltk.Tree objects, so a slightly higher ceiling than `parse_sents`).

The speed of a shared machine drifts by 10-15% within minutes, so a ceiling and a load
run taken at different moments compare unlike moments. So each configuration's requests
are sent in --rounds chunks, the configurations taking turns, with one offline pass
(the servers idle) before the first chunk, between every two chunks and after the last.
A configuration's throughput (its requests over its chunks' time) is compared with the
ceiling of the passes just before and just after its chunks (their sentences over their
time): the same estimator for both, over the same stretch of the run. Each chunk starts
its clients afresh: each sends one untimed request first (connecting), then the clock
starts with all of them sending at once; a closed loop's ramp and tail thus come once per
chunk. The passes printed before the first and after the last load are for reference;
the table, printed at the end, uses the passes next to each configuration's chunks.

Both servers run side by side (the one not under load idles), so batching's cost to a
lone request is also measured free of drift: one client sends each of the first 100
sentences to the two servers in turn (REST and gRPC). Before the servers start, the same
comparison runs in this process without HTTP: the server's predict path direct and
through the batching runner, request by request.

Prints sentences per second and p50/p95/p99 latency (milliseconds, as the clients see
it) per configuration, each throughput next to its ceiling ("x ceiling"), the server's mean
sentences per model call during the configuration's chunks (from its Prometheus
metrics: how well batching merged the clients' requests), and the two
goals: with batching, 32 clients reach >= 0.8x the ceiling; at 1 client, batching costs
<= 10% latency (p50 with / without, from the alternating comparison). Every answer is
checked against the offline trees (mismatches are counted; merged batches can differ
from offline ones only in float round-off, i.e. a near-tie tag).

The export: --export_dir, else models/tetra/1 (`make export`) when it exists, else the bundled
all-MiniLM-L6-v2 encoder with random tag heads (exported to a temporary directory; same
speed as a trained model).

Usage: python bench/serving_load.py [--export_dir=DIR] [--requests=N] [--rounds=N]
    [--clients=1,8,32] [--apis=rest,grpc] [--batching=off,on]
    [--batching_parameters_file=FILE] [--intra_op_parallelism=N]
Exit codes: 0 done, 1 failure (e.g. the server did not start), 2 usage error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tetra_tf import train_extra  # noqa: E402,F401  (first: Keras 2 before TensorFlow loads)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from tetra_tf.contract import export_format  # noqa: E402

DEFAULT_EXPORT = os.path.join(REPO_ROOT, "models", "tetra", "1")
BATCH_SIZE_METRIC = "tetra_serving_batch_size"
SERVER_SCRIPT = os.path.join(REPO_ROOT, "serving", "server.py")
BATCHING_FILE = os.path.join(REPO_ROOT, "serving", "batching_parameters.txt")
MODEL_NAME = "tetra"
STARTUP_TIMEOUT_S = 300.0
OFFLINE_BATCH_SIZE = 64
ALTERNATING_REQUESTS = 100  # Per server, in the 1-client comparison.
IN_PROCESS_REQUESTS = 120  # Per path, in the in-process comparison.
GOAL_CLIENTS = 32  # The throughput goal's load: >= 0.8x the offline ceiling.


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring (python -c 'help(...)') or docs/benchmarks.md.")
    parser.add_argument("--export_dir", default=None,
                        help=f"SavedModel to serve (default: {DEFAULT_EXPORT} if it exists, "
                        "else MiniLM with random heads)")
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per configuration, split over its --rounds chunks "
                        "(default: 50x the clients, at least 100)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="chunks each configuration's requests are sent in, the "
                        "configurations taking turns, each chunk between two single "
                        "offline ceiling passes (default 4; each chunk needs at least as "
                        "many requests as clients)")
    parser.add_argument("--clients", default="1,8,32",
                        help="comma-separated concurrent clients (default 1,8,32)")
    parser.add_argument("--apis", default="rest,grpc", help="rest, grpc or both")
    parser.add_argument("--batching", default="off,on",
                        help="server runs: off (no batching), on, or off,on (default)")
    parser.add_argument("--batching_parameters_file", default=BATCHING_FILE,
                        help="for the batching-on server (default: the shipped one)")
    parser.add_argument("--intra_op_parallelism", type=int, default=1,
                        help="the batching server's --tensorflow_intra_op_parallelism "
                        "(default 1, as batching_parameters.txt asks; 0: TensorFlow's "
                        "default, which the server without batching keeps)")
    args = parser.parse_args(argv)
    if args.intra_op_parallelism < 0:
        parser.error("--intra_op_parallelism must be 0 or more")
    try:
        args.clients = list(dict.fromkeys(int(c) for c in args.clients.split(",")))
        if not args.clients or min(args.clients) < 1:
            raise ValueError
    except ValueError:
        parser.error("--clients must be positive integers, e.g. 1,8,32")
    args.apis = list(dict.fromkeys(args.apis.split(",")))
    if not set(args.apis) <= {"rest", "grpc"}:
        parser.error("--apis takes rest, grpc or rest,grpc")
    args.batching = list(dict.fromkeys(args.batching.split(",")))  # Each mode once.
    if not args.batching or not set(args.batching) <= {"off", "on"}:
        parser.error("--batching takes off, on or off,on")
    if args.requests is not None and args.requests < 1:
        parser.error("--requests must be positive")
    if args.rounds < 1:
        parser.error("--rounds must be positive")
    for clients in args.clients:
        if requests_per_configuration(args, clients) < args.rounds * clients:
            parser.error(f"{clients} client(s) need at least {args.rounds * clients} requests "
                         f"(--requests): each of the {args.rounds} chunks (--rounds) needs "
                         "at least one request per client")
    return args


def requests_per_configuration(args: argparse.Namespace, clients: int) -> int:
    """--requests, else 50 per client and at least 100."""
    return args.requests or max(100, 50 * clients)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """serving/server.py on free ports, as a subprocess (base path: a link to the export)."""

    def __init__(self, export_dir: str, scratch: str, batching: str | None,
                 intra_op_parallelism: int = 0) -> None:
        base = os.path.join(scratch, "base" + ("-batching" if batching else ""))
        os.makedirs(base, exist_ok=True)
        os.symlink(os.path.abspath(export_dir), os.path.join(base, "1"))
        self.rest_port, self.grpc_port = _free_port(), _free_port()
        flags = [f"--model_base_path={base}", f"--model_name={MODEL_NAME}",
                 f"--rest_api_port={self.rest_port}", f"--port={self.grpc_port}",
                 "--file_system_poll_wait_seconds=0", "--max_batch_size=64",
                 f"--tensorflow_intra_op_parallelism={intra_op_parallelism}"]
        if batching:
            flags += ["--enable_batching", f"--batching_parameters_file={batching}"]
        self.log_path = os.path.join(scratch, "server" + ("-batching" if batching else "")
                                     + ".log")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen([sys.executable, SERVER_SCRIPT, *flags],
                                        stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}; see "
                                   f"{self.log_path}")
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.rest_port,
                                                        timeout=5)
                connection.request("GET", f"/v1/models/{MODEL_NAME}")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready in {STARTUP_TIMEOUT_S:.0f} s")
            time.sleep(0.5)

    def close(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def batch_size_totals(port: int) -> tuple[float, float]:
    """(rows, model calls) the server has run so far, from its Prometheus metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    from tetra_tf.serving.rest import METRICS_PATH

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", METRICS_PATH)
        text = connection.getresponse().read().decode("utf-8")
    finally:
        connection.close()
    totals = {"_sum": 0.0, "_count": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == BATCH_SIZE_METRIC:
            for sample in family.samples:
                for suffix in totals:
                    if sample.name == BATCH_SIZE_METRIC + suffix:
                        totals[suffix] += sample.value
    return totals["_sum"], totals["_count"]


# The load generator shares the server's two cores, so its clients do as little as a
# client can: each sentence's request is built once and replayed, and only the tree is
# read from an answer (REST still decodes the whole JSON answer). Each configuration's
# line prints the load generator's own CPU per request (`client ms`).


def _rest_client(port: int) -> "callable":
    """A keep-alive HTTP/1.1 client on one socket: POSTs `{"instances": [sentence]}` and
    reads the answer by its Content-Length (the server always sends one)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    requests: dict[tuple[str, str], bytes] = {}
    pending = bytearray()

    def read_until(marker: bytes) -> bytes:
        while (end := pending.find(marker)) < 0:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            pending.extend(chunk)
        data = bytes(pending[:end])
        del pending[:end + len(marker)]
        return data

    def read_exactly(size: int) -> bytes:
        while len(pending) < size:
            chunk = sock.recv(max(65536, size - len(pending)))
            if not chunk:
                raise RuntimeError("the server closed the connection")
            pending.extend(chunk)
        data = bytes(pending[:size])
        del pending[:size]
        return data

    def parse(sentence: str) -> str:
        request = requests.get((MODEL_NAME, sentence))
        if request is None:
            body = json.dumps({"instances": [sentence]}).encode("utf-8")
            request = requests[MODEL_NAME, sentence] = (
                f"POST /v1/models/{MODEL_NAME}:predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode("ascii") + body
        sock.sendall(request)
        status_line, *header_lines = read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in
                   (line.partition(":") for line in header_lines)}
        if "content-length" not in headers:
            raise RuntimeError(f"an answer without Content-Length: {status_line!r}")
        body = read_exactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            raise RuntimeError(f"the server closes the connection: {status_line!r} {body[:200]!r}")
        status = int(status_line.split()[1])
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
        return json.loads(body)["predictions"][0]["tree"]

    parse.close = sock.close
    return parse


def _grpc_client(channel) -> "callable":
    """PredictionServiceStub.Predict asking only for the `tree` output."""
    from tensorflow.core.framework import tensor_pb2, types_pb2
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    requests: dict[tuple[str, str], predict_pb2.PredictRequest] = {}

    def parse(sentence: str) -> str:
        request = requests.get((MODEL_NAME, sentence))
        if request is None:
            request = requests[MODEL_NAME, sentence] = predict_pb2.PredictRequest()
            request.model_spec.name = MODEL_NAME
            request.model_spec.signature_name = export_format.SERVING_SIGNATURE
            request.inputs["sentences"].CopyFrom(tensor_pb2.TensorProto(
                dtype=types_pb2.DT_STRING, string_val=[sentence.encode("utf-8")]))
            request.inputs["sentences"].tensor_shape.dim.add(size=1)
            request.output_filter.append("tree")  # All this client reads.
        response = stub.Predict(request, 120.0)
        return response.outputs["tree"].string_val[0].decode("utf-8")

    return parse


def run_load(make_client, sentences: list[str], expected: dict[str, str], clients: int,
             requests: int, first: int = 0) -> dict:
    """Closed loop: `clients` threads send requests until `requests` have been sent.

    Request i sends sentences[(first + i) % len(sentences)]. Returns the wall time, each
    request's latency (ms), the requests' count, the answers that differ from `expected`
    and this process's CPU time meanwhile (the load generator's own cost).
    """
    lock = threading.Lock()
    next_index = [0]
    latencies: list[float] = []
    mismatches = [0]

    def client_loop(client_id: int) -> None:
        parse = None
        try:
            try:
                parse = make_client()
                parse(sentences[client_id % len(sentences)])  # Connect, warm up: untimed.
            except BaseException:
                barrier.abort()  # The others, and the timer, stop waiting.
                raise
            barrier.wait()
            while True:
                with lock:
                    index = next_index[0]
                    if index >= requests:
                        return
                    next_index[0] += 1
                sentence = sentences[(first + index) % len(sentences)]
                started = time.perf_counter()
                tree = parse(sentence)
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    mismatches[0] += tree != expected[sentence]
        finally:
            if hasattr(parse, "close"):
                parse.close()

    barrier = threading.Barrier(clients + 1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        futures = [pool.submit(client_loop, i) for i in range(clients)]
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            for future in futures:
                if future.exception() and not isinstance(future.exception(),
                                                         threading.BrokenBarrierError):
                    raise future.exception() from None
            raise
        started, cpu_started = time.perf_counter(), _process_cpu_seconds()
        for future in futures:
            future.result()
        wall = time.perf_counter() - started
        cpu = _process_cpu_seconds() - cpu_started
    return {"seconds": wall, "latencies_ms": [1e3 * t for t in latencies],
            "requests": len(latencies), "mismatches": mismatches[0], "client_cpu_seconds": cpu}


def _process_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def alternate_one_client(parsers: dict[str, "callable"], sentences: list[str],
                         expected: dict[str, str], requests: int) -> dict[str, float]:
    """One client sending each sentence to every server in turn (the order flips each
    time); returns each server's p50 latency in ms, and the mismatches."""
    latencies: dict[str, list[float]] = {name: [] for name in parsers}
    mismatches = 0
    names = list(parsers)
    for name in names:  # Connect, untimed.
        parsers[name](sentences[0])
    for i in range(requests):
        sentence = sentences[i % len(sentences)]
        for name in (names if i % 2 else names[::-1]):
            started = time.perf_counter()
            tree = parsers[name](sentence)
            latencies[name].append(time.perf_counter() - started)
            mismatches += tree != expected[sentence]
    result = {name: float(np.percentile(values, 50)) * 1e3
              for name, values in latencies.items()}
    result["mismatches"] = mismatches
    return result


def in_process_comparison(export_dir: str, batching_parameters_file: str,
                          sentences: list[str], expected: dict[str, str]) -> dict[str, float]:
    """The server's predict path in this process, direct and through the batching runner,
    one request at a time, alternating: each one's p50 latency in ms, and the mismatches."""
    # pylint: disable=import-outside-toplevel
    from tetra_tf.serving import batching, rest
    from tetra_tf.serving.admission import Limits
    from tetra_tf.serving.manager import ModelManager
    from tetra_tf.serving.predictor import Predictor
    from tetra_tf.serving.runners import BatchingRunner, DirectRunner
    from tetra_tf.serving.servable import ServedModel

    served = ServedModel(MODEL_NAME, 1, export_dir)
    manager = ModelManager(served)
    batched = BatchingRunner(batching.read_batching_parameters(batching_parameters_file),
                             Limits().word_inputs)

    def in_process(runner) -> "callable":
        predictor = Predictor(manager, runner)

        def parse(sentence: str) -> str:
            body = json.dumps({"instances": [sentence]}).encode()
            return rest.predict_json(predictor, MODEL_NAME, None, body)[0][
                "predictions"][0]["tree"]
        return parse

    parsers = {"direct": in_process(DirectRunner()), "batching": in_process(batched)}
    for sentence in sentences[:30]:  # Warm-up, untimed.
        parsers["direct"](sentence)
    try:
        return alternate_one_client(parsers, sentences, expected, IN_PROCESS_REQUESTS)
    finally:
        batched.unload(served)


def main(argv: list[str]) -> int:
    args = _parse_args(argv)
    from bench import minilm_model  # pylint: disable=import-outside-toplevel  (loads TF)
    from tetra_tf import cpu  # pylint: disable=import-outside-toplevel
    from tetra_tf.parser import DEFAULT_CONCURRENT_CALLS  # pylint: disable=C0415

    # The ceiling's Parser gets the pools a Parser sizes in a new process, even when the
    # default export is written (with TensorFlow) before it.
    cpu.share_cores(DEFAULT_CONCURRENT_CALLS)

    try:
        word_lists = minilm_model.test_split_sentences()
    except Exception as e:  # noqa: BLE001 - one line
        print(f"serving_load.py: error: cannot read the NLTK sample's test split: {e}",
              file=sys.stderr)
        return 2
    export_dir = args.export_dir or (DEFAULT_EXPORT if os.path.isdir(DEFAULT_EXPORT)
                                     else None)
    from tetra_tf.contract.export_format import saved_model_file  # pylint: disable=C0415

    if args.export_dir and saved_model_file(args.export_dir) is None:
        print(f"serving_load.py: error: no saved_model.pb in {args.export_dir}",
              file=sys.stderr)
        return 2
    scratch = tempfile.mkdtemp(prefix="serving_load_")
    try:
        if export_dir is None:
            print("exporting MiniLM with random heads (no trained export found) ...",
                  flush=True)
            export_dir = minilm_model.default_export(scratch)
        return _run(args, export_dir, word_lists, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(args: argparse.Namespace, export_dir: str, word_lists: list[list[str]],
         scratch: str) -> int:
    import grpc
    from tetra_tf.parser import Parser

    rng = random.Random(0)
    sentences = [" ".join(words) for words in word_lists]
    rng.shuffle(sentences)
    print(f"export: {export_dir}; {len(sentences)} test-split sentences "
          f"({sum(len(s.split()) for s in sentences) / len(sentences):.1f} words on average)")

    # The offline ceiling: single passes over all the sentences, one before the first load
    # chunk, one between every two chunks (the servers idle) and one after the last.
    parser = Parser(export_dir)
    split = [s.split() for s in sentences]
    parser.parse_each(split[:OFFLINE_BATCH_SIZE], batch_size=OFFLINE_BATCH_SIZE)

    def ceiling_pass() -> tuple[float, list[str]]:
        """Seconds for one pass of Parser.parse_each over the sentences, and trees."""
        started = time.perf_counter()
        results = parser.parse_each(split, batch_size=OFFLINE_BATCH_SIZE)
        elapsed = time.perf_counter() - started
        return elapsed, [result.bracketed for result in results]

    first_pass, offline_trees = ceiling_pass()
    expected = dict(zip(sentences, offline_trees))
    print(f"offline ceiling before: Parser.parse_each, batch {OFFLINE_BATCH_SIZE}, "
          f"{parser.concurrent_calls} calls at once: "
          f"{len(sentences) / first_pass:.1f} sents/s, one pass (load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; the ratios below use the "
          "passes next to each configuration's chunks)\n", flush=True)

    # Batching's own cost at 1 client, without HTTP and without load drift between the
    # two servers' runs: the server's predict path in this process, direct and through
    # the batching runner, alternating request by request on the same sentences.
    p50 = in_process_comparison(export_dir, args.batching_parameters_file, sentences,
                                expected)
    print(f"in process, 1 request at a time, alternating ({IN_PROCESS_REQUESTS} each): p50 "
          f"direct {p50['direct']:.1f} ms, through the batching runner "
          f"{p50['batching']:.1f} ms = {p50['batching'] / p50['direct']:.2f} (mismatches "
          f"{p50['mismatches']})\n", flush=True)

    # Both servers run from the start (the one not under load sits idle), so that the
    # 1-client latencies can also be compared request by request, free of drift.
    servers: dict[str, Server] = {}
    channels = []

    def client_factory(server: Server, api: str) -> "callable":
        if api == "rest":
            return lambda: _rest_client(server.rest_port)
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        channels.append(channel)
        return lambda: _grpc_client(channel)

    configs = [(mode, api, clients) for mode in args.batching for api in args.apis
               for clients in args.clients]
    totals = {config: {"seconds": 0.0, "latencies_ms": [], "requests": 0, "mismatches": 0,
                       "ceiling_seconds": 0.0, "ceiling_passes": 0, "rows": 0.0,
                       "model_calls": 0.0, "client_cpu_seconds": 0.0} for config in configs}
    try:
        for mode in args.batching:
            server = Server(export_dir, scratch,
                            args.batching_parameters_file if mode == "on" else None,
                            args.intra_op_parallelism if mode == "on" else 0)
            servers[mode] = server
            # Warm-up, untimed: every sentence once (TensorFlow sets up kernels per new
            # shape, i.e. per sentence length, on first use), 8 clients over REST.
            run_load(client_factory(server, "rest"), sentences, expected, 8, len(sentences))
        clients_of = {(mode, api): client_factory(servers[mode], api)
                      for mode in args.batching for api in args.apis}

        # Each configuration's requests go in --rounds chunks, the configurations taking
        # turns, every chunk between two ceiling passes; each configuration is compared
        # with the passes next to its own chunks.
        previous_pass, _ = ceiling_pass()
        for round_index in range(args.rounds):
            for config in configs:
                mode, api, clients = config
                requests = requests_per_configuration(args, clients)
                chunk = (requests * (round_index + 1) // args.rounds
                         - requests * round_index // args.rounds)
                rows_before, calls_before = batch_size_totals(servers[mode].rest_port)
                result = run_load(clients_of[(mode, api)], sentences, expected, clients,
                                  chunk, first=requests * round_index // args.rounds)
                rows_after, calls_after = batch_size_totals(servers[mode].rest_port)
                next_pass, _ = ceiling_pass()
                total = totals[config]
                total["rows"] += rows_after - rows_before
                total["model_calls"] += calls_after - calls_before
                for key in ("seconds", "requests", "mismatches", "client_cpu_seconds"):
                    total[key] += result[key]
                total["latencies_ms"] += result["latencies_ms"]
                total["ceiling_seconds"] += previous_pass + next_pass
                total["ceiling_passes"] += 2
                previous_pass = next_pass
            print(f"round {round_index + 1} of {args.rounds} done", flush=True)

        alternating = {}
        if set(servers) == {"off", "on"}:
            print(f"\n1 client, one request to each server in turn (the first "
                  f"{ALTERNATING_REQUESTS} sentences, each to both):", flush=True)
            for api in args.apis:
                alternating[api] = alternate_one_client(
                    {mode: client_factory(server, api)() for mode, server in servers.items()},
                    sentences, expected, ALTERNATING_REQUESTS)
                p50 = alternating[api]
                print(f"  {api}: p50 without batching {p50['off']:.1f} ms, with "
                      f"{p50['on']:.1f} ms (mismatches {p50['mismatches']})", flush=True)
    finally:
        for channel in channels:
            channel.close()
        for server in servers.values():
            server.close()

    last_pass, _ = ceiling_pass()
    print(f"offline ceiling after: {len(sentences) / last_pass:.1f} sents/s, one pass (load "
          f"average {os.getloadavg()[0]:.1f}; not in the ratios)\n")

    rows = []
    print(f"{'batching':8} {'api':4} {'clients':>7} {'requests':>8} {'sents/s':>8} "
          f"{'ceiling':>8} {'x ceiling':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
          f"{'mismatch':>8} {'rows/call':>9} {'client ms':>9}")
    for (mode, api, clients), total in totals.items():
        ms = np.array(total["latencies_ms"])
        row = {"batching": mode, "api": api, "clients": clients,
               "requests": total["requests"], "mismatches": total["mismatches"],
               "sents_per_s": total["requests"] / total["seconds"],
               "ceiling": total["ceiling_passes"] * len(sentences) / total["ceiling_seconds"],
               "p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)),
               "p99": float(np.percentile(ms, 99))}
        rows.append(row)
        print(f"{mode:8} {api:4} {clients:>7} {row['requests']:>8} "
              f"{row['sents_per_s']:>8.1f} {row['ceiling']:>8.1f} "
              f"{row['sents_per_s'] / row['ceiling']:>9.2f} "
              f"{row['p50']:>8.1f} {row['p95']:>8.1f} {row['p99']:>8.1f} "
              f"{row['mismatches']:>8} {total['rows'] / max(total['model_calls'], 1):>9.1f} "
              f"{1e3 * total['client_cpu_seconds'] / max(total['requests'], 1):>9.2f}")
    print(f"(each configuration's requests sent in {args.rounds} chunks, taking turns with "
          "the others; its ceiling: the offline passes just before and just after its "
          "chunks; rows/call: the server's mean sentences per model call during them; "
          "client ms: the load generator's own CPU per request, on the same cores)")

    def find(batching: str, api: str, clients: int) -> dict | None:
        return next((r for r in rows if (r["batching"], r["api"], r["clients"]) ==
                     (batching, api, clients)), None)

    print()
    for api in args.apis:
        on = find("on", api, GOAL_CLIENTS)
        if on:
            ratio = on["sents_per_s"] / on["ceiling"]
            print(f"goal {api}: batching, {GOAL_CLIENTS} clients: "
                  f"{on['sents_per_s']:.1f} sents/s = {ratio:.2f}x the offline ceiling "
                  f"({on['ceiling']:.1f}); goal >= 0.80: "
                  f"{'met' if ratio >= 0.8 else 'NOT met'}")
        if api in alternating:
            p50 = alternating[api]
            ratio = p50["on"] / p50["off"]
            print(f"goal {api}: 1 client p50 latency with / without batching, requests "
                  f"alternating between the servers: {p50['on']:.1f} / {p50['off']:.1f} ms "
                  f"= {ratio:.2f}; goal <= 1.10: {'met' if ratio <= 1.10 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

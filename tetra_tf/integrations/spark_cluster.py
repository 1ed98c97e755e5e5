"""A Spark standalone cluster on this machine: a master and workers on 127.0.0.1, each a JVM
in its own process group, for trying `python -m tetra_tf.spark_parse`, the tests and
bench/spark.py. Needs pyspark and a Java runtime; no TensorFlow.
"""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any


class LocalCluster:
    """A Spark standalone master and `workers` workers on 127.0.0.1, each a separate JVM
    started with pyspark's bundled ``spark-class`` in its own process group; `stop` ends
    those groups (the workers' executors and Python workers with them).

    For trying the CLI, the tests and bench/spark.py on one machine; needs pyspark and a
    Java runtime. A context manager: leaving the ``with`` block calls `stop`.

    Example:
        ```python
        from pyspark.sql import SparkSession
        from tetra_tf.integrations.spark_cluster import LocalCluster

        with LocalCluster("/tmp/cluster", workers=2, cores=1) as cluster:
            session = SparkSession.builder.master(cluster.url).getOrCreate()
            ...
        ```

    Attributes:
      url: the master's URL (spark://127.0.0.1:PORT).
      work_dir: the workers' folder: app-*/N/stderr holds each executor's (and its Python
        workers') stderr.
      pids: the started processes' ids.
    """

    def __init__(self, root: str, workers: int = 2, cores: int = 1, memory: str = "2g",
                 timeout: float = 120, env: dict[str, str] | None = None,
                 wait: bool = True):
        """Starts the master; with wait, also `wait` (else the caller calls it later).

        Args:
          root: a folder for the cluster's files (made if missing): each process's log
            (``master.log``, ``workerN.log``), Spark's logs and the workers' work_dir.
          workers: how many workers to start (default 2).
          cores: cores each worker offers (default 1).
          memory: memory each worker offers, in Spark's notation (default ``"2g"``).
          timeout: seconds each process may take to come up (default 120).
          env: variables added to the processes' environment (e.g. PYTHONPATH), over
            os.environ and the ones set here (SPARK_HOME, SPARK_LOCAL_IP, PYSPARK_PYTHON, ...).
          wait: also wait for the master, start the workers and wait for them (`wait`) before
            returning (default True); False lets the caller do other work first.

        Raises:
          RuntimeError: with wait, as `wait`.
        """
        import pyspark  # pylint: disable=import-outside-toplevel

        self.root, self.timeout = root, timeout
        os.makedirs(root, exist_ok=True)
        self._processes: list[Any] = []
        self._pids: list[int] = []
        self._logs: list[str] = []
        spark_home = os.path.dirname(pyspark.__file__)
        self._spark_class = os.path.join(spark_home, "bin", "spark-class")
        self.work_dir = os.path.join(root, "work")
        self._env = dict(os.environ, SPARK_HOME=spark_home, SPARK_LOCAL_IP="127.0.0.1",
                         PYSPARK_PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="3",
                         SPARK_LOG_DIR=os.path.join(root, "logs"), **(env or {}))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"spark://127.0.0.1:{port}"
        self._port, self._workers, self._cores, self._memory = port, workers, cores, memory
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(port), "--webui-port", "0")
        if wait:
            self.wait()

    def wait(self) -> None:
        """Waits for the master, starts the workers, waits for them to register.

        Call it once, after the constructor with ``wait=False``.

        Raises:
          RuntimeError: a process exited or did not come up within the timeout (the
            cluster is stopped).
        """
        try:
            self._wait(0, "I have been elected leader")
            for i in range(self._workers):
                self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                            "--host", "127.0.0.1", "--cores", str(self._cores), "--memory",
                            self._memory, "--webui-port", "0", "--work-dir", self.work_dir)
            for i in range(self._workers):
                self._wait(1 + i, "Successfully registered with master")
        except BaseException:
            self.stop()
            raise

    @property
    def pids(self) -> list[int]:
        """The started processes' ids (master first, then the workers), each its own process
        group's leader."""
        return list(self._pids)

    def _start(self, name: str, *args: str) -> None:
        log = os.path.join(self.root, f"{name}.log")
        with open(log, "wb") as out:
            self._processes.append(subprocess.Popen(
                [self._spark_class, *args], stdout=out, stderr=subprocess.STDOUT,
                env=self._env, start_new_session=True))
        self._pids.append(self._processes[-1].pid)
        self._logs.append(log)

    def _wait(self, index: int, text: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with open(self._logs[index], encoding="utf-8", errors="replace") as f:
                if text in f.read():
                    return
            if self._processes[index].poll() is not None:
                break
            time.sleep(0.25)
        with open(self._logs[index], encoding="utf-8", errors="replace") as f:
            tail = " | ".join(f.read().strip().splitlines()[-5:])
        raise RuntimeError(f"{os.path.basename(self._logs[index])}: no {text!r} within "
                           f"{self.timeout:.0f} s: {tail[-1500:]}")

    def stop(self) -> None:
        """Ends each started process group (the JVM, its executors and their Python workers):
        SIGTERM, then SIGKILL for what is left after 20 s.

        Safe to call more than once (a later call has nothing to end).
        """
        groups = [process.pid for process in reversed(self._processes)]
        for group in groups:
            _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for process in self._processes:
                process.poll()  # reaps a leader that exited (a zombie still counts)
            if not any(_signal_group(group, 0) for group in groups):
                break
            time.sleep(0.2)
        for group in groups:
            _signal_group(group, signal.SIGKILL)
        for process in self._processes:
            process.wait(timeout=10)
        self._processes.clear()

    def worker_stderr(self) -> str:
        """The executors' stderr logs, concatenated: where the Python workers' messages go.

        Returns:
          The text of every ``work_dir/app-*/*/stderr``, in path order ("" if none), e.g.
          to find `tetra_tf.integrations.spark.get_parser`'s "loaded the parser" lines.
        """
        text = ""
        for path in sorted(glob.glob(os.path.join(self.work_dir, "app-*", "*", "stderr"))):
            with open(path, encoding="utf-8", errors="replace") as f:
                text += f.read()
        return text

    def __enter__(self) -> "LocalCluster":
        """Returns the cluster itself."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Stops the cluster (`stop`); an exception is not suppressed."""
        self.stop()


def _signal_group(group: int, signal_number: int) -> bool:
    """Sends a signal to a process group; whether it still had a process."""
    try:
        os.killpg(group, signal_number)
        return True
    except ProcessLookupError:
        return False

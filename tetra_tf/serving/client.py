"""A small client for the parser behind TF Serving's REST API (or serving/server.py).

```sh
python serving/client.py --server=http://127.0.0.1:8501 --model_name=tetra \\
    "The cat sat ." "Another sentence ."
python serving/client.py < sentences.txt      # one pre-tokenized sentence per line
```

Prints one PTB bracketed tree per sentence, one per line, in input order. Sentences are
space-separated, pre-tokenized words; they are sent in row format ({"instances": [...]})
in batches of --batch_size. From Python:

```python
from tetra_tf.serving.client import parse

trees = parse(["The cat sat ."], server="http://127.0.0.1:8501", model_name="tetra")
```

The client itself (`parse`, `predict`) uses only the standard library (urllib); the
command line uses tetra_tf.cli.

Exit codes: 0 on success; 2 for a usage or input error (no sentences, an empty sentence, a
request the server rejected with a 4xx error); 1 for any other failure (server unreachable,
a 5xx error, a response without trees).
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Sequence

from tetra_tf.contract import export_format

DEFAULT_SERVER = "http://127.0.0.1:8501"
DEFAULT_MODEL_NAME = "tetra"


class ServingError(RuntimeError):
    """A failed request: the server's {"error": ...} message, or why there was no answer.

    Args:
      message: what failed, with the server's error text when it sent one.
      status: the HTTP status code, or None when no HTTP response came back.

    Attributes:
      status: the HTTP status code, or None when no HTTP response came back.

    Example:
        ```python
        try:
            parse(["The cat sat ."], server="http://127.0.0.1:8501")
        except ServingError as e:
            if e.status is None:
                ...   # the server could not be reached (or did not answer in time)
            elif e.is_client_error:
                ...   # the request was refused (HTTP 4xx), e.g. a sentence over the limits
        ```
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def is_client_error(self) -> bool:
        """True when the server rejected the request itself (HTTP 4xx)."""
        return self.status is not None and 400 <= self.status < 500


def _model_url(server: str, model_name: str, version: int | None = None) -> str:
    if not server.startswith(("http://", "https://")):
        server = "http://" + server
    url = f"{server.rstrip('/')}/v1/models/{urllib.parse.quote(model_name, safe='')}"
    return url if version is None else f"{url}/versions/{int(version)}"


def _request_json(url: str, payload: Any | None, timeout_s: float) -> Any:
    """GETs (payload None) or POSTs JSON to url; returns the decoded JSON answer."""
    data = None if payload is None else json.dumps(payload, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(
        url, data=data, method="GET" if data is None else "POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as e:
        raise ServingError(f"HTTP {e.code} from {url}: {_error_message(e.read())}",
                           e.code) from e
    except urllib.error.URLError as e:
        raise ServingError(f"cannot reach {url}: {e.reason}") from e
    except (TimeoutError, OSError) as e:
        raise ServingError(f"no answer from {url}: {e}") from e
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ServingError(f"{url} answered with something that is not JSON: {e}") from e


def _error_message(body: bytes) -> str:
    try:
        return str(json.loads(body.decode("utf-8"))["error"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        text = body.decode("utf-8", errors="replace").strip()
        return text[:300] or "(empty body)"


def predict(instances: Sequence[Any], server: str = DEFAULT_SERVER,
            model_name: str = DEFAULT_MODEL_NAME, version: int | None = None,
            signature_name: str | None = None, timeout_s: float = 120.0) -> list[Any]:
    """Sends one row-format predict request; returns its "predictions" list.

    Args:
      instances: the request's instances: sentences (strings) for `serving_default`, or
        objects such as ``{"words": [...], "num_words": 4}`` for `parse_words`.
      server: the REST address, e.g. http://127.0.0.1:8501 (``http://`` is added if
        missing).
      model_name: the served model's name.
      version: a model version to ask for; None: the one served by default.
      signature_name: the signature; None: the server's default (`serving_default`).
      timeout_s: the request's timeout in seconds.

    Returns:
      One prediction per instance, in order: a dict of the signature's outputs (``tree``,
      ``score``, ``pos_tags``, ...).

    Raises:
      ServingError: the request failed or the answer has no predictions for every instance.

    Example:
        ```python
        prediction = predict(["The cat sat ."])[0]
        prediction["tree"], prediction["score"]
        ```
    """
    payload: dict[str, Any] = {"instances": list(instances)}
    if signature_name:
        payload["signature_name"] = signature_name
    url = _model_url(server, model_name, version) + ":predict"
    answer = _request_json(url, payload, timeout_s)
    predictions = answer.get("predictions") if isinstance(answer, dict) else None
    if not isinstance(predictions, list) or len(predictions) != len(instances):
        raise ServingError(f"{url}: expected {len(instances)} predictions, got "
                           f"{json.dumps(answer)[:200]}")
    return predictions


def model_status(server: str = DEFAULT_SERVER, model_name: str = DEFAULT_MODEL_NAME,
                 timeout_s: float = 10.0) -> dict[str, Any]:
    """The model's status (GET /v1/models/NAME), as TF Serving answers it.

    Args:
      server: the REST address.
      model_name: the served model's name.
      timeout_s: the request's timeout in seconds.

    Returns:
      The decoded JSON, e.g. ``{"model_version_status": [{"version": "1", "state":
      "AVAILABLE", ...}]}``.

    Raises:
      ServingError: the request failed.

    Example:
        ```python
        model_status()["model_version_status"][0]["state"]   # 'AVAILABLE'
        ```
    """
    return _request_json(_model_url(server, model_name), None, timeout_s)


def parse(sentences: list[str], server: str = DEFAULT_SERVER,
          model_name: str = DEFAULT_MODEL_NAME, batch_size: int = 32,
          timeout_s: float = 120.0) -> list[str]:
    """Parses pre-tokenized sentences (words separated by spaces) into PTB bracketed trees.

    Args:
      sentences: the sentences; each needs at least one word.
      server: the REST address, e.g. http://127.0.0.1:8501.
      model_name: the served model's name.
      batch_size: sentences per request.
      timeout_s: per-request timeout in seconds.

    Returns:
      One tree string per sentence, in order.

    Raises:
      ValueError: a sentence is not a string or has no words, or batch_size < 1.
      ServingError: a request failed (see ServingError.status).

    Example:
        ```python
        parse(["The cat sat on the mat .", "Hello !"])
        # ['(TOP (S (NP (DT The) (NNP cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))',
        #  '(TOP (ADVP (INTJ (NN Hello)) (. !)))']
        ```
    """
    if isinstance(sentences, str):
        raise ValueError("sentences must be a list of strings, not one string")
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise ValueError(f"sentence {index} is a {type(sentence).__name__}, not a string")
        if not sentence.split():
            raise ValueError(f"sentence {index} is empty (no words)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    trees: list[str] = []
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start:start + batch_size]
        predictions = predict(batch, server, model_name, timeout_s=timeout_s)
        for index, prediction in enumerate(predictions):
            tree = (prediction.get(export_format.TREE_OUTPUT) if isinstance(prediction, dict)
                    else None)
            if not isinstance(tree, str):
                raise ServingError(f"prediction {start + index} has no "
                                   f"{export_format.TREE_OUTPUT!r} string output: "
                                   f"{json.dumps(prediction)[:200]}")
            trees.append(tree)
    return trees


def run_cli() -> None:
    """The command line (serving/client.py): flags, then sentences as arguments or stdin.

    Exits 0 after printing one tree per sentence; 2 for a usage or input error or a 4xx
    answer; 1 for an unreachable server, a 5xx answer or an answer without trees.
    """
    from absl import flags

    from tetra_tf import cli

    flags.DEFINE_string("server", DEFAULT_SERVER, "REST address of the model server.")
    flags.DEFINE_string("model_name", DEFAULT_MODEL_NAME, "Served model name.")
    flags.DEFINE_integer("batch_size", 32, "Sentences per request.", lower_bound=1)
    flags.DEFINE_float("timeout_s", 120.0, "Per-request timeout in seconds.", lower_bound=0.1)

    def main(argv: list[str]) -> int:
        sentences = argv[1:]
        if not sentences:
            if sys.stdin.isatty():
                raise cli.UsageError("no sentences (give them as arguments or on stdin, one "
                                     "per line)")
            sentences = [line.rstrip("\n") for line in sys.stdin]
        if not sentences:
            raise cli.UsageError("no sentences on stdin")
        flag_values = flags.FLAGS
        try:
            trees = parse(sentences, server=flag_values.server,
                          model_name=flag_values.model_name,
                          batch_size=flag_values.batch_size, timeout_s=flag_values.timeout_s)
        except ServingError as e:
            if e.is_client_error:
                raise cli.UsageError(str(e)) from None
            print(f"error: {e}", file=sys.stderr)
            return cli.EXIT_FAILURE
        for tree in trees:
            print(tree)
        return cli.EXIT_OK

    cli.run(main, user_errors=(ValueError,), takes_arguments=True)


if __name__ == "__main__":
    run_cli()

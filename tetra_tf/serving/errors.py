"""What a refused request carries: an HTTP status, TF Serving's status code, a one-line message."""

from __future__ import annotations

import re
from typing import Any, Mapping


class RequestError(Exception):
    """A request that cannot be served; becomes {"error": message} with this HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# TF Serving's status codes (gRPC's) for the HTTP statuses this server answers.
STATUS_CODES = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 413: "RESOURCE_EXHAUSTED",
                500: "INTERNAL", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE"}


# A SignatureDef's method_name for each of TF Serving's inference methods.
INFERENCE_METHOD_NAMES = {"classify": "tensorflow/serving/classify",
                          "regress": "tensorflow/serving/regress"}


def inference_refusal(method: str, signature_name: str,
                      signature_defs: Mapping[str, Any]) -> RequestError:
    """The answer to Classify or Regress (`method` "classify" or "regress") on a served
    version, whose signatures this server runs through predict only.

    As TF Serving with --enable_signature_method_name_check: an unknown signature, or one
    whose method_name is not the method's, is INVALID_ARGUMENT (400); a real
    classification or regression signature is UNIMPLEMENTED (501) here.
    """
    name = signature_name or "serving_default"
    signature_def = signature_defs.get(name)
    if signature_def is None:
        return RequestError(f"No signature was found with the name: {log_safe(name, 100)}")
    expected = INFERENCE_METHOD_NAMES[method]
    if signature_def.method_name != expected:
        kind = "classification" if method == "classify" else "regression"
        return RequestError(f"Expected {kind} signature method_name to be {expected}. "
                            f"Was: {signature_def.method_name}")
    return RequestError(f"Unimplemented: signature {log_safe(name, 100)} is a {method} "
                        "signature; this server runs predict signatures only", 501)


def log_safe(text: str, max_chars: int = 300) -> str:
    """Request data made safe for one log line: control characters and non-ASCII
    escaped (so a %0a in a path cannot start a new line), long text cut."""
    escaped = text.encode("ascii", "backslashreplace").decode("ascii")
    escaped = re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", escaped)
    return escaped if len(escaped) <= max_chars else escaped[:max_chars] + "...(cut)"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"

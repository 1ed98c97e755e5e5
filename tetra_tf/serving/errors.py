"""What a refused request carries: an HTTP status, TF Serving's status code, a one-line message."""

from __future__ import annotations

import re


class RequestError(Exception):
    """A request that cannot be served; becomes {"error": message} with this HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# TF Serving's status codes (gRPC's) for the HTTP statuses this server answers.
STATUS_CODES = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "INVALID_ARGUMENT",
                413: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
                503: "UNAVAILABLE"}


def log_safe(text: str, max_chars: int = 300) -> str:
    """Request data made safe for one log line: control characters and non-ASCII
    escaped (so a %0a in a path cannot start a new line), long text cut."""
    escaped = text.encode("ascii", "backslashreplace").decode("ascii")
    escaped = re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", escaped)
    return escaped if len(escaped) <= max_chars else escaped[:max_chars] + "...(cut)"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"

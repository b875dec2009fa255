"""How results are shown: aligned tables for people, JSON for scripts, progress on stderr.

Tables go to stdout with a header row, columns padded to their widest cell (as Kafka's tools
print them); a missing value is ``-``. JSON output is one document per command (or one object per
line for record streams), with bytes as UTF-8 text where they are valid UTF-8 and base64
otherwise (the ``*_encoding`` field then says ``base64``). Progress lines are written to stderr
only when it is a terminal, so pipes and logs never see them.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

__all__ = ["Progress", "bytes_field", "cell", "print_json", "print_table"]


def cell(value: Any) -> str:
    """A table cell: ``-`` for None, the text otherwise."""
    return "-" if value is None else str(value)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None) -> None:
    """Columns padded to the widest cell, separated by two spaces; nothing but the header when
    there are no rows."""
    stream = out if out is not None else sys.stdout
    text_rows = [[cell(value) for value in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for index, value in enumerate(row):
            widths[index] = max(widths[index], len(value))
    for row in [list(headers), *text_rows]:
        line = "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True))
        stream.write(line.rstrip() + "\n")


def print_json(document: Any, out: TextIO | None = None, *, compact: bool = False) -> None:
    stream = out if out is not None else sys.stdout
    if compact:
        stream.write(json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n")
    else:
        stream.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def bytes_field(value: bytes | None) -> tuple[str | None, str | None]:
    """(text, encoding) of a key, value or header value for JSON: ``(text, None)`` when it is
    UTF-8, ``(base64, "base64")`` when not, ``(None, None)`` for null."""
    if value is None:
        return None, None
    try:
        return bytes(value).decode("utf-8"), None
    except UnicodeDecodeError:
        return base64.b64encode(value).decode("ascii"), "base64"


class Progress:
    """``label: done/total`` rewritten in place on stderr, at most every ``interval`` seconds,
    when stderr is a terminal; silent otherwise."""

    def __init__(self, label: str, total: int | None = None, *, interval: float = 0.2) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._interval = interval
        self._shown_at = 0.0
        self._enabled = sys.stderr.isatty()
        self._dirty = False

    def advance(self, count: int = 1) -> None:
        self.done += count
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._shown_at >= self._interval:
            self._shown_at = now
            self._show()

    def _show(self) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        sys.stderr.write(f"\r{self.label}: {self.done}{of}")
        sys.stderr.flush()
        self._dirty = True

    def close(self) -> None:
        """Show the final count and end the line (only if anything was shown)."""
        if self._enabled and self._dirty:
            self._show()
            sys.stderr.write("\n")
            sys.stderr.flush()

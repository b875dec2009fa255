"""Regular expressions that clients send the broker, matched in linear time.

Kafka evaluates client-supplied patterns (ListTransactions' ``TransactionalIdPattern``, KIP-848's
regular-expression subscriptions) with RE2 (re2j): no backreferences or lookaround, and no
pattern can make a match take longer than linear time in the input. Python's ``re`` backtracks,
so a 32-character id matched against ``(a+)+`` would hold the event loop for minutes; every pattern a
client sends goes through here instead. Matching is whole-string, as Java's ``Matcher.matches``.
"""

from __future__ import annotations

from typing import Any

import re2

__all__ = ["InvalidPatternError", "LinearPattern", "compile_client_pattern"]

#: RE2's memory budget per compiled pattern: a pathological pattern fails to compile instead of
#: growing the broker's memory.
_MAX_PATTERN_MEMORY = 8 << 20


class InvalidPatternError(ValueError):
    """The pattern is not an RE2 regular expression (INVALID_REGULAR_EXPRESSION)."""


class LinearPattern:
    """A compiled client pattern; ``matches(text)`` is a whole-string match."""

    __slots__ = ("_regexp", "source")

    def __init__(self, source: str, regexp: Any) -> None:
        self.source = source
        self._regexp = regexp

    def matches(self, text: str) -> bool:
        return self._regexp.fullmatch(text) is not None

    def __repr__(self) -> str:
        return f"LinearPattern({self.source!r})"


def compile_client_pattern(source: str) -> LinearPattern:
    """Compile ``source`` with RE2's syntax; raises InvalidPatternError naming what is wrong."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _MAX_PATTERN_MEMORY
    try:
        return LinearPattern(source, re2.compile(source, options))
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        reason = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
        raise InvalidPatternError(f"invalid regular expression {source!r}: {reason}") from None

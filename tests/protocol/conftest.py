"""Shared helpers for the ``sdk.protocol`` tests.

The tests build messages from the classes' own field tables (``FIELDS``), so every message and
version is exercised without a hand-written example per API. The seeded ``random`` builder here
serves the oracle and fuzz tests (reproducible, cheap); the hypothesis strategies live in
``test_roundtrip.py``, the one module that shrinks failures.

Helpers are handed to tests as fixtures because the suite runs with ``--import-mode=importlib``,
under which test modules cannot import one another.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from sdk.protocol.messages import FieldSpec, Message

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
# Multi-byte UTF-8 (2, 3 and 4 bytes) next to ASCII, so lengths are byte counts, not characters.
TEXT_ALPHABET = "aZ09-_.é€😀"


def random_value(f: FieldSpec, version: int, rng: random.Random, max_items: int) -> Any:
    """One value of the field's element type."""
    t = f.type
    if f.struct is not None:
        return random_message(f.struct, version, rng, max_items)
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return rng.choice((lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi)))
    if t == "bool":
        return rng.random() < 0.5
    if t == "float64":
        return rng.choice((0.0, -1.5, 1e300, rng.uniform(-1e9, 1e9)))
    if t == "string":
        return "".join(rng.choice(TEXT_ALPHABET) for _ in range(rng.randint(0, 8)))
    if t in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 12))
    if t == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    raise AssertionError(f"no generator for field type {t!r}")


def random_message(
    cls: type[Message], version: int, rng: random.Random, max_items: int = 2
) -> Message:
    """A message valid in ``version``: absent fields keep their defaults, nulls only where allowed."""
    msg = cls()
    for f in cls.FIELDS:
        if not f.present_in(version):
            continue
        if f.nullable_in(version) and rng.random() < 0.2:
            value: Any = None
        elif f.array:
            value = [random_value(f, version, rng, max_items) for _ in range(rng.randint(0, max_items))]
        else:
            value = random_value(f, version, rng, max_items)
        setattr(msg, f.name, value)
    return msg


def assert_same(expected: Message, actual: Message, path: str = "") -> None:
    """Field-by-field equality that names the first difference, including unknown tags.

    ``Message.__eq__`` ignores ``unknown_tags`` and lets a ``memoryview`` equal ``bytes``; this
    checks both explicitly so a failure says where the two trees part.
    """
    path = path or type(expected).__qualname__
    assert type(actual) is type(expected), f"{path}: {type(actual)} is not {type(expected)}"
    for f in expected.FIELDS:
        want, got = getattr(expected, f.name), getattr(actual, f.name)
        where = f"{path}.{f.name}"
        if f.struct is not None and want is not None and got is not None:
            if f.array:
                assert len(got) == len(want), f"{where}: {len(got)} items, expected {len(want)}"
                for i, (w, g) in enumerate(zip(want, got, strict=True)):
                    assert_same(w, g, f"{where}[{i}]")
            else:
                assert_same(want, got, where)
        elif f.type == "records" and want is not None and got is not None:
            assert isinstance(got, memoryview), f"{where}: records decoded as {type(got)}"
            assert bytes(got) == bytes(want), where
        else:
            assert got == want, f"{where}: {got!r} != {want!r}"
    assert (actual.unknown_tags or None) == (expected.unknown_tags or None), f"{path}.unknown_tags"


@pytest.fixture(scope="session")
def make_message() -> Callable[..., Message]:
    """``make_message(cls, version, seed_or_rng, max_items=2)``: a random valid message."""

    def make(cls: type[Message], version: int, seed: int | random.Random, max_items: int = 2) -> Message:
        rng = seed if isinstance(seed, random.Random) else random.Random(seed)
        return random_message(cls, version, rng, max_items)

    return make


@pytest.fixture(scope="session")
def same() -> Callable[[Message, Message], None]:
    """``same(expected, actual)``: the deep comparison of ``assert_same``."""
    return assert_same

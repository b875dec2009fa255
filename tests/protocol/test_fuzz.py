"""Malformed input: random bytes and damaged valid encodings, for every request and response.

The broker decodes whatever a socket hands it, so the decoders promise one exception type,
``DecodeError`` (plus ``UnsupportedVersionError`` from ``decode_request`` for a key or version it
does not serve), bounded time, and allocation bounded by the input, never by a length field.
Mutations are seeded, so a failure names a reproducible (seed, mutation) pair.
"""

from __future__ import annotations

import random
import struct
import time
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.protocol.codec import (
    decode,
    decode_request,
    decode_response,
    encode,
    encode_request,
    encode_response,
)
from sdk.protocol.errors import DecodeError, UnsupportedVersionError
from sdk.protocol.messages import MESSAGE_CLASSES, REQUESTS, RESPONSES, Message

MUTATIONS_PER_SEED = 100
SEEDS = (1, 2)
#: CPU seconds (this thread's, so a busy machine's preemptions do not count); any single decode of
#: tiny input that takes longer counts as a hang.
SLOW = 0.5
#: A slow decode is timed again this many times in all before it counts as a hang: decoding is
#: deterministic, so a hang in the decoder repeats on every attempt, while a one-off cost charged
#: to the thread (a garbage collection, page faults on a loaded machine) does not.
TIMING_ATTEMPTS = 3


def _sample_versions(cls: type[Message]) -> list[int]:
    """Oldest, first flexible and newest: the three layouts a message can have."""
    lo, hi = cls.VALID_VERSIONS
    picks = {lo, hi}
    if cls.FLEXIBLE_FROM is not None and lo <= cls.FLEXIBLE_FROM <= hi:
        picks.add(cls.FLEXIBLE_FROM)
    return sorted(picks)


API_MESSAGES = sorted(name for name, cls in MESSAGE_CLASSES.items() if cls.KIND in ("request", "response"))
DAMAGE = (
    "flip", "flips", "truncate", "insert", "delete", "int32_max", "int16_max", "minus", "varint", "random",
)
HUGE_VARINTS = (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x7f", b"\xff" * 10, b"\x80\x80\x80\x80\x08")


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One damaged copy of ``data`` and the name of the damage."""
    buf = bytearray(data)
    at = rng.randrange(len(buf) + 1)
    op = rng.choice(DAMAGE)
    if op == "flip" and buf:
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    elif op == "flips" and buf:
        for _ in range(rng.randint(2, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif op == "truncate":
        del buf[at:]
    elif op == "insert":
        buf[at:at] = rng.randbytes(rng.randint(1, 6))
    elif op == "delete":
        del buf[at : at + rng.randint(1, 6)]
    elif op == "int32_max":  # an array, bytes or records length that claims 2 GiB
        buf[at : at + 4] = b"\x7f\xff\xff\xff"
    elif op == "int16_max":  # a string length of 32767
        buf[at : at + 2] = b"\x7f\xff"
    elif op == "minus":  # -2: below the null marker
        buf[at : at + 4] = b"\xff\xff\xff\xfe"
    elif op == "varint":  # a compact length or tag count far beyond the data, or over-long
        width = rng.choice((0, 1, 5))
        buf[at : at + width] = rng.choice(HUGE_VARINTS)
    else:
        buf = bytearray(rng.randbytes(rng.randint(0, 64)))
    return op, bytes(buf)


def _expect_clean(call: Callable[[], object], allowed: tuple[type[Exception], ...], label: str) -> None:
    timings: list[float] = []
    for _ in range(TIMING_ATTEMPTS):
        start = time.thread_time()
        try:
            call()
        except allowed:
            pass
        except Exception as exc:  # anything else escaping is the bug this module looks for
            raise AssertionError(f"{label}: {type(exc).__name__}: {exc}") from exc
        timings.append(time.thread_time() - start)
        if timings[-1] < SLOW:
            return
    raise AssertionError(f"{label}: every decode took over {SLOW}s: {[round(t, 2) for t in timings]}")


def _fastest_failing_decode(cls: type[Message], body: bytes, version: int) -> tuple[float, DecodeError]:
    """The least CPU time of up to ``TIMING_ATTEMPTS`` decodes of ``body`` (stopping at the first
    under ``SLOW``: a hang repeats, a one-off cost charged to the thread does not) and the error."""
    fastest = float("inf")
    for _ in range(TIMING_ATTEMPTS):
        start = time.thread_time()
        with pytest.raises(DecodeError) as info:
            decode(cls, body, version)
        fastest = min(fastest, time.thread_time() - start)
        if fastest < SLOW:
            break
    return fastest, info.value


@pytest.mark.parametrize("name", API_MESSAGES)
def test_decode_damaged_bodies(name: str, make_message: Callable[..., Message]) -> None:
    cls = MESSAGE_CLASSES[name]
    for version in _sample_versions(cls):
        for seed in SEEDS:
            rng = random.Random(f"{name}/{version}/{seed}")
            valid = encode(make_message(cls, version, rng), version)
            for i in range(MUTATIONS_PER_SEED):
                op, data = mutate(valid, rng)
                label = f"{name} v{version} seed {seed} #{i} {op} {data.hex()}"
                _expect_clean(lambda d=data, v=version: decode(cls, d, v), (DecodeError,), label)


@pytest.mark.parametrize("api_key", sorted(REQUESTS))
def test_decode_damaged_frames(api_key: int, make_message: Callable[..., Message]) -> None:
    req, resp = REQUESTS[api_key], RESPONSES[api_key]
    for version in _sample_versions(req):
        rng = random.Random(f"frame/{api_key}/{version}")
        request = encode_request(make_message(req, version, rng), version, rng.getrandbits(31), "fuzz")
        response = encode_response(make_message(resp, version, rng), version, rng.getrandbits(31))
        for i in range(MUTATIONS_PER_SEED):
            op, data = mutate(request, rng)
            _expect_clean(
                lambda d=data: decode_request(d),
                (DecodeError, UnsupportedVersionError),
                f"request {api_key} v{version} #{i} {op} {data.hex()}",
            )
            op, data = mutate(response, rng)
            _expect_clean(
                lambda d=data, v=version: decode_response(api_key, v, d),
                (DecodeError,),
                f"response {api_key} v{version} #{i} {op} {data.hex()}",
            )


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_decode_request_random_bytes(data: bytes) -> None:
    _expect_clean(lambda: decode_request(data), (DecodeError, UnsupportedVersionError), data.hex())


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([(k, v) for k in sorted(RESPONSES) for v in _sample_versions(RESPONSES[k])]),
    st.binary(max_size=64),
)
def test_decode_response_random_bytes(key_version: tuple[int, int], data: bytes) -> None:
    key, version = key_version
    label = f"{key} v{version} {data.hex()}"
    _expect_clean(lambda: decode_response(key, version, data), (DecodeError,), label)


def _i16(n: int) -> bytes:
    return struct.pack(">h", n)


def _i32(n: int) -> bytes:
    return struct.pack(">i", n)


ProduceRequest = MESSAGE_CLASSES["ProduceRequest"]
AddPartitionsToTxnRequest = MESSAGE_CLASSES["AddPartitionsToTxnRequest"]
PRODUCE_V3_HEAD = _i16(-1) + _i16(1) + _i32(1000)  # null transactional id, acks, timeout
PRODUCE_V9_HEAD = b"\x00" + _i16(1) + _i32(1000)  # compact null transactional id
HUGE_CASES = [
    # (label, class, version, body, what the error must say: proof the intended check fired)
    ("array of 2**31-1 topics", ProduceRequest, 3, PRODUCE_V3_HEAD + _i32(0x7FFFFFFF), "cannot fit"),
    (
        "records of 2**31-1 bytes",
        ProduceRequest,
        3,
        PRODUCE_V3_HEAD + _i32(1) + _i16(1) + b"t" + _i32(1) + _i32(0) + _i32(0x7FFFFFFF) + b"x" * 16,
        "runs past the end",
    ),
    ("string of 32767 bytes", ProduceRequest, 3, _i16(0x7FFF) + b"abc", "runs past the end"),
    (
        "compact array of 2**32 topics",
        ProduceRequest,
        9,
        PRODUCE_V9_HEAD + b"\xff\xff\xff\xff\x0f",
        "cannot fit",
    ),
    ("over-long varint", ProduceRequest, 9, PRODUCE_V9_HEAD + b"\xff" * 12, "longer than 5 bytes"),
    (
        "compact records of 2**31 bytes",
        ProduceRequest,
        9,
        PRODUCE_V9_HEAD + b"\x02\x02t\x02" + _i32(0) + b"\x80\x80\x80\x80\x08" + b"x" * 16,
        "runs past the end",
    ),
    (
        "tag section of 2**32 fields",
        ProduceRequest,
        9,
        PRODUCE_V9_HEAD + b"\x01\xff\xff\xff\xff\x0f",
        "truncated",
    ),
    (
        "tagged field of 2**31 bytes",
        ProduceRequest,
        9,
        PRODUCE_V9_HEAD + b"\x01\x01\x05\x80\x80\x80\x80\x08",
        "runs past the end",
    ),
    (
        "int32 array of 2**31-1 partitions",
        AddPartitionsToTxnRequest,
        2,
        _i16(1) + b"t" + struct.pack(">qh", 1, 0) + _i32(1) + _i16(1) + b"t" + _i32(0x7FFFFFFF) + b"\x00" * 8,
        "cannot fit",
    ),
]


@pytest.mark.parametrize(
    ("label", "cls", "version", "body", "reason"), HUGE_CASES, ids=[c[0] for c in HUGE_CASES]
)
def test_huge_lengths_fail_fast_without_allocating(
    label: str, cls: type[Message], version: int, body: bytes, reason: str
) -> None:
    # Compile the codec, nested structs included (they compile lazily at first use), outside the
    # measurement: what is measured is the failing read itself.
    with pytest.raises(DecodeError):
        decode(cls, body, version)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as info:
            decode(cls, body, version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reason in info.value.reason
    assert peak < 64 * 1024, f"{label}: {peak} bytes allocated"
    # Timed without tracemalloc, whose bookkeeping is charged to this thread too.
    fastest, error = _fastest_failing_decode(cls, body, version)
    assert reason in error.reason
    assert fastest < SLOW, f"{label}: every decode took over {SLOW}s (fastest {fastest:.2f}s)"


def test_mutator_reaches_every_damage_kind() -> None:
    """Guards the fuzzer itself: every kind of damage is produced and changes the bytes."""
    rng = random.Random(0)
    seen: set[str] = set()
    valid = bytes(range(40))
    for _ in range(400):
        op, data = mutate(valid, rng)
        if data != valid:
            seen.add(op)
    assert seen == set(DAMAGE)

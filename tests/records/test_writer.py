"""The C record writer (``sdk.records._writer``) against its Python twin (``_writer_py``).

For the same appends both must give the same answers (offset delta, or None when the batch is
full), the same bytes, count and timestamps, or fail with the same error class and leave the
batch as it was. Checked on generated records with every varint length (timestamp deltas of one
to ten bytes, both signs; lengths around the one/two/three-byte edges), null and empty keys and
values, bytes-like fields, headers, batch limits, and on hostile input (wrong types, malformed
headers, timestamps outside int64); and for ``append_run``, send_many's runs of prepared records.
"""

from __future__ import annotations

import array
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.records import RecordBatch, _writer_py, record_size_bound, writer

from .writers import C_WRITER, c_builder, python_builder

pytestmark = pytest.mark.skipif(C_WRITER is None, reason="sdk.records._writer is not built")

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASE_TIMESTAMP = 1_700_000_000_000

# Deltas whose zigzag varints take 1 to 10 bytes, either side of each length's edge, both signs.
EDGE_DELTAS = sorted(
    {sign * ((1 << bits) + adjust) for bits in range(6, 63, 7) for adjust in (-1, 0) for sign in (1, -1)}
)
deltas = st.sampled_from([0, 1, 1023, 1024, *EDGE_DELTAS]) | st.integers(-(2**40), 2**40)
# Lengths either side of the one/two/three-byte varint edges and the Python writer's table (8192).
edge_sizes = st.sampled_from([0, 1, 63, 64, 100, 8191, 8192, 8193, 9000])


@st.composite
def fields(draw: st.DrawFn) -> Any:
    data = draw(st.binary(max_size=80) | edge_sizes.map(lambda n: b"k" * n))
    kind = draw(st.sampled_from(["none", "bytes", "bytes", "bytearray", "memoryview"]))
    if kind == "none":
        return None
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":
        return memoryview(b"<" + data + b">")[1:-1]
    return data


header_values = st.none() | st.binary(max_size=20) | st.builds(bytearray, st.binary(max_size=5))
header_lists = st.lists(st.tuples(st.text(max_size=6), header_values), max_size=4)
headers: st.SearchStrategy[Any] = st.sampled_from([(), [], None]) | header_lists | header_lists.map(tuple)
records = st.tuples(deltas, fields(), fields(), headers)
limits = st.sampled_from([None, 61, 200, 2000, 20_000])

# Input a writer must refuse, each in one place of an otherwise good record.
BAD_TIMESTAMPS = [1.5, "1", 2**63, -(2**63) - 1]
BAD_FIELDS = ["text", 42, 1.0, [b"x"], memoryview(b"abcd")[::2]]
BAD_HEADERS = [
    [("h", b"v", b"extra")],
    [("h",)],
    [(b"h", b"v")],
    [("h", "text")],
    [("h", 5)],
    [5],
    [("\ud800", b"v")],
    5,
]


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as exc:
        return "error", type(exc)


def _state(builder: Any) -> tuple[Any, ...]:
    return (
        bytes(builder._buf),
        builder._count,
        builder._base_timestamp,
        builder._max_timestamp,
        builder.record_count,
        builder.estimated_size(),
    )


def _pair(limit: int | None) -> tuple[Any, Any]:
    return c_builder()(batch_size=limit), python_builder()(batch_size=limit)


def _append_both(c: Any, py: Any, timestamp: Any, key: Any, value: Any, hdrs: Any) -> Any:
    got = _outcome(lambda: c.append(timestamp, key, value, hdrs))
    assert got == _outcome(lambda: py.append(timestamp, key, value, hdrs)), (timestamp, key, value, hdrs)
    assert _state(c) == _state(py)
    return got


@PROPERTY
@given(st.lists(records, max_size=30), limits, st.sampled_from([BASE_TIMESTAMP, 0, -(2**62)]))
def test_same_answers_and_bytes_for_any_records(recs: list, limit: int | None, start: int) -> None:
    c, py = _pair(limit)
    for delta, key, value, hdrs in recs:
        _append_both(c, py, start + delta, key, value, hdrs)
    assert c.build() == py.build()
    accepted = [r for r in RecordBatch(c.build())] if c.record_count else []
    assert [r.offset for r in accepted] == list(range(c.record_count))


@PROPERTY
@given(
    st.lists(records, min_size=1, max_size=5),
    st.sampled_from(["timestamp", "key", "value", "headers"]),
    st.integers(0, len(BAD_FIELDS) + len(BAD_HEADERS) + len(BAD_TIMESTAMPS)),
    limits,
)
def test_same_error_for_bad_input_and_nothing_written(
    recs: list, where: str, pick: int, limit: int | None
) -> None:
    c, py = _pair(limit)
    for delta, good_key, good_value, good_hdrs in recs:
        _append_both(c, py, BASE_TIMESTAMP + delta, good_key, good_value, good_hdrs)
    before = _state(c)
    timestamp: Any = BASE_TIMESTAMP
    key: Any = b"k"
    value: Any = b"v"
    hdrs: Any = [("h", b"v")]
    if where == "timestamp":
        timestamp = BAD_TIMESTAMPS[pick % len(BAD_TIMESTAMPS)]
    elif where == "key":
        key = BAD_FIELDS[pick % len(BAD_FIELDS)]
    elif where == "value":
        value = BAD_FIELDS[pick % len(BAD_FIELDS)]
    else:
        hdrs = BAD_HEADERS[pick % len(BAD_HEADERS)]
    kind, error = _append_both(c, py, timestamp, key, value, hdrs)
    assert kind == "error" and issubclass(error, (TypeError, ValueError))
    assert _state(c) == before


def test_a_delta_outside_int64_is_refused_by_both() -> None:
    c, py = _pair(None)
    _append_both(c, py, -(2**63), None, b"v", ())
    assert _append_both(c, py, 2**63 - 1, None, b"v", ()) == ("error", ValueError)
    assert _append_both(c, py, -1, None, b"v", ()) == ("ok", 1)  # a delta of 2**63 - 1


def test_four_byte_length_varints() -> None:
    c, py = _pair(None)
    big = b"x" * (1 << 21)  # zigzag 2**22: a four-byte varint, and a record length of four bytes too
    assert _append_both(c, py, BASE_TIMESTAMP, big, None, [("h", big)]) == ("ok", 0)
    assert _append_both(c, py, BASE_TIMESTAMP + 2**40, None, big, ()) == ("ok", 1)
    assert c.build() == py.build()
    values = [(r.key, r.value, r.headers) for r in RecordBatch(c.build())]
    assert values == [(big, None, [("h", big)]), (None, big, [])]


def test_headers_from_any_iterable() -> None:
    c, py = _pair(None)
    for make in (list, tuple, iter, lambda pairs: (p for p in pairs), lambda pairs: [list(p) for p in pairs]):
        pairs = [("a", b"1"), ("é", None)]
        got = c.append(BASE_TIMESTAMP, b"k", b"v", make(pairs))
        assert got == py.append(BASE_TIMESTAMP, b"k", b"v", make(pairs))
    assert _state(c) == _state(py)
    assert all(r.headers == [("a", b"1"), ("é", None)] for r in RecordBatch(c.build()))


def test_keyword_arguments_and_now() -> None:
    c, py = _pair(None)
    before = time.time_ns() // 1_000_000
    assert c.append(timestamp_ms=None, key=None, value=b"v") == 0
    assert py.append(timestamp_ms=None, key=None, value=b"v") == 0
    after = time.time_ns() // 1_000_000
    assert before <= c._base_timestamp <= after and before <= py._base_timestamp <= after
    assert c.append(BASE_TIMESTAMP, None, b"v", headers=[("h", None)]) == 1
    for bad_call in (
        lambda: c.append(1, None),
        lambda: c.append(1, None, b"v", (), 5),
        lambda: c.append(1, None, b"v", extra=1),
    ):
        with pytest.raises(TypeError):
            bad_call()


def test_the_first_record_is_taken_whatever_its_size() -> None:
    c, py = _pair(61)
    assert _append_both(c, py, BASE_TIMESTAMP, None, b"x" * 500, ()) == ("ok", 0)
    assert _append_both(c, py, BASE_TIMESTAMP, None, b"", ()) == ("ok", None)


def test_standalone_writers_take_a_limit() -> None:
    assert C_WRITER is not None
    for cls in (C_WRITER.RecordsWriter, _writer_py.RecordsWriter):
        w = cls(80)
        assert w.append(1, None, b"v" * 5) == 0
        assert w.append(1, None, b"v" * 5) is None
        assert len(w._buf) == 61 + 12 and cls()._limit == sys.maxsize


# -- append_run: send_many's runs --------------------------------------------------------------


@st.composite
def prepared_records(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    out = []
    for _ in range(draw(st.integers(0, 40))):
        partition = draw(st.sampled_from([None, None, 0, 1]))
        key = draw(st.sampled_from([None, None, None, b"key"]))
        value = draw(st.none() | st.binary(max_size=300))
        hdrs = draw(st.sampled_from([None, None, [("h", b"v")]]))
        out.append((partition, key, value, hdrs, record_size_bound(key, value, hdrs)))
    return out


@PROPERTY
@given(
    prepared_records(),
    st.integers(-1, 45),
    st.sampled_from([None, 0, 1]),
    st.booleans(),
    st.sampled_from([-1, 0, 100, 1000, 10**9]),
    st.sampled_from([-5, 0, 1, 300, 3000, 10**9]),
    limits,
)
def test_append_run_takes_the_same_records(
    recs: list, index: int, partition: Any, keyless: bool, room: int, produced_room: int, limit: int | None
) -> None:
    c, py = _pair(limit)
    c.append(BASE_TIMESTAMP, None, b"first", ())
    py.append(BASE_TIMESTAMP, None, b"first", ())
    args = (recs, index, BASE_TIMESTAMP + 3, partition, keyless, room, produced_room)
    got = c.append_run(*args)
    assert got == py.append_run(*args)
    assert _state(c) == _state(py)
    end, added = got
    taken = recs[max(index, 0) : end]
    assert added == sum(r[4] for r in taken) <= max(room, 0)
    assert all(r[0] == partition and (not keyless or r[1] is None) for r in taken)


def test_append_run_refuses_what_is_not_a_prepared_list() -> None:
    c, py = _pair(None)
    for records in ([(None, None, b"v", None)], [[None, None, b"v", None, 30]]):
        for w in (c, py):
            with pytest.raises(TypeError):
                w.append_run(records, 0, 1, None, False, 100, 100)
    with pytest.raises(TypeError):
        c.append_run((), 0, 1, None, False, 100, 100)


# -- which writer ------------------------------------------------------------------------------


def test_the_builder_uses_the_c_writer_unless_told_otherwise() -> None:
    if os.environ.get(writer.PURE_PYTHON_ENV, "") not in ("", "0"):
        pytest.skip(f"{writer.PURE_PYTHON_ENV} is set: the Python writer is in use by request")
    assert writer.COMPILED
    code = (
        "from sdk.records import writer, RecordBatchBuilder;"
        "print(writer.COMPILED, RecordBatchBuilder.__mro__[1].__module__)"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for setting, expected in (("1", "False sdk.records._writer_py"), ("0", "True sdk.records._writer")):
        env = dict(os.environ, **{writer.PURE_PYTHON_ENV: setting})
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True
        )
        assert out.stdout.strip() == expected


# -- RecordSizer: the producer's size check ----------------------------------------------------


class TooLarge(Exception):
    pass


def _too_large(size: int) -> None:
    raise TooLarge(size)


@PROPERTY
@given(fields(), fields(), headers, st.sampled_from([0, 21, 100, 200, 10**6]))
def test_sizer_gives_record_size_bound_and_calls_too_large_over_the_limit(
    key: Any, value: Any, hdrs: Any, limit: int
) -> None:
    assert C_WRITER is not None
    sizers = C_WRITER.RecordSizer(limit, _too_large), _writer_py.RecordSizer(limit, _too_large)
    results = [_outcome(lambda s=s: s.size(key, value, hdrs)) for s in sizers]
    assert results[0] == results[1]
    bound = record_size_bound(key, value, hdrs)
    assert results[0] == (("ok", bound) if bound <= limit else ("error", TooLarge))


@pytest.mark.parametrize("hdrs", [*BAD_HEADERS[:2], [5], 5, [("h", 5)]])
def test_sizer_refuses_what_record_size_bound_refuses(hdrs: Any) -> None:
    assert C_WRITER is not None
    for sizer in (C_WRITER.RecordSizer(10**6, _too_large), _writer_py.RecordSizer(10**6, _too_large)):
        with pytest.raises((TypeError, ValueError)) as caught:
            sizer.size(b"k", b"v", hdrs)
        with pytest.raises(caught.type):
            record_size_bound(b"k", b"v", hdrs)


def test_a_multibyte_buffer_is_written_by_its_byte_length() -> None:
    """A bytes-like value whose items are wider than a byte (an int array) is its bytes: the
    length prefix counts bytes, as the reader reads them."""
    value = memoryview(array.array("i", [1, 2, 3]))
    for make in (c_builder(), python_builder()):
        builder = make()
        assert builder.append(BASE_TIMESTAMP, value, value) == 0
        (record,) = RecordBatch(builder.build())
        assert record.key == record.value == value.tobytes()

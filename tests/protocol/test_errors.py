"""Error codes: the generated table, the exception classes built from it, and the retriable flags
the producer and consumer rely on.

The spot checks are hard-coded from Kafka's documentation and Java client (not read from the
definitions at run time), so a generator or table slip on a well-known code fails here.
"""

from __future__ import annotations

import pytest

from sdk.protocol import errors
from sdk.protocol._generated_errors import ERRORS
from sdk.protocol.errors import (
    DecodeError,
    ErrorCode,
    KafkaError,
    UnknownKafkaError,
    UnsupportedVersionError,
    error_for_code,
    make_error,
    raise_for_code,
)

# (code, protocol name, class name, retriable) as Kafka's Java client has them.
WELL_KNOWN = [
    (-1, "UNKNOWN_SERVER_ERROR", "UnknownServerError", False),
    (1, "OFFSET_OUT_OF_RANGE", "OffsetOutOfRangeError", False),
    (2, "CORRUPT_MESSAGE", "CorruptMessageError", True),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", "UnknownTopicOrPartitionError", True),
    (6, "NOT_LEADER_OR_FOLLOWER", "NotLeaderOrFollowerError", True),
    (7, "REQUEST_TIMED_OUT", "RequestTimedOutError", True),
    (10, "MESSAGE_TOO_LARGE", "MessageTooLargeError", False),
    (15, "COORDINATOR_NOT_AVAILABLE", "CoordinatorNotAvailableError", True),
    (16, "NOT_COORDINATOR", "NotCoordinatorError", True),
    (17, "INVALID_TOPIC_EXCEPTION", "InvalidTopicError", False),
    (22, "ILLEGAL_GENERATION", "IllegalGenerationError", False),
    (25, "UNKNOWN_MEMBER_ID", "UnknownMemberIdError", False),
    (27, "REBALANCE_IN_PROGRESS", "RebalanceInProgressError", False),
    (35, "UNSUPPORTED_VERSION", "UnsupportedVersionError", False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", "OutOfOrderSequenceNumberError", False),
    (47, "INVALID_PRODUCER_EPOCH", "InvalidProducerEpochError", False),
    (59, "UNKNOWN_PRODUCER_ID", "UnknownProducerIdError", False),
    (74, "FENCED_LEADER_EPOCH", "FencedLeaderEpochError", True),
    (79, "MEMBER_ID_REQUIRED", "MemberIdRequiredError", False),
    (90, "PRODUCER_FENCED", "ProducerFencedError", False),
]


@pytest.mark.parametrize(("code", "name", "class_name", "retriable"), WELL_KNOWN)
def test_well_known_codes(code: int, name: str, class_name: str, retriable: bool) -> None:
    cls = error_for_code(code)
    assert cls is getattr(errors, class_name)
    assert issubclass(cls, KafkaError)
    assert (cls.code, cls.name, cls.retriable) == (code, name, retriable)
    assert ErrorCode[name] == code
    with pytest.raises(cls) as info:
        raise_for_code(code, "details")
    assert info.value.code == code
    assert str(info.value) == f"[Error {code}] {name}: details"


def test_every_generated_code_has_its_class() -> None:
    codes = [row[0] for row in ERRORS]
    assert len(codes) == len(set(codes)), "duplicate error codes"
    assert {-1, 0, 1, 128} <= set(codes) and len(codes) >= 129
    assert len(ErrorCode) == len(ERRORS)
    for code, name, java_class, retriable in ERRORS:
        assert ErrorCode(code).name == name
        if code == 0:
            continue
        cls = error_for_code(code)
        assert (cls.code, cls.name, cls.retriable, cls.java_class) == (code, name, retriable, java_class)
        assert getattr(errors, cls.__name__) is cls, f"{cls.__name__} is shadowed by another code"
        assert cls.__name__ in errors.__all__
        err = make_error(code)
        assert type(err) is cls and err.code == code and str(err) == f"[Error {code}] {name}"


def test_no_error_is_a_no_op() -> None:
    assert raise_for_code(0) is None
    assert raise_for_code(0, "ignored") is None
    assert ErrorCode.NONE == 0


@pytest.mark.parametrize("code", [129, 5000, -2, 32767])
def test_unknown_code(code: int) -> None:
    assert error_for_code(code) is UnknownKafkaError
    with pytest.raises(UnknownKafkaError) as info:
        raise_for_code(code, "from a newer broker")
    err = info.value
    assert err.code == code and isinstance(err, KafkaError)
    assert not err.retriable
    assert str(err) == f"[Error {code}] UNKNOWN_CODE_{code}: from a newer broker"
    # The instance carries the received code; the class attribute stays untouched.
    assert UnknownKafkaError.code == -1


def test_unsupported_version_error_is_the_code_35_class() -> None:
    err = UnsupportedVersionError("nope", api_key=3, api_version=99, correlation_id=8)
    assert isinstance(err, KafkaError) and err.code == 35
    assert (err.api_key, err.api_version, err.correlation_id) == (3, 99, 8)
    assert type(make_error(35)) is UnsupportedVersionError


def test_decode_error_carries_reason_and_offset() -> None:
    err = DecodeError("truncated", 12)
    assert isinstance(err, ValueError)
    assert (err.reason, err.offset) == ("truncated", 12)
    assert str(err) == "truncated at byte 12"
    assert str(DecodeError("bad")) == "bad"


def test_every_error_class_is_a_static_definition() -> None:
    """Type checkers and editors see the classes only if they are written out, not built at run time."""
    import ast
    from pathlib import Path

    from sdk.protocol import _generated_errors

    tree = ast.parse(Path(_generated_errors.__file__).read_text())
    defined = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    assert set(_generated_errors.__all__) <= defined
    for code, _name, _, _ in ERRORS:
        if code:
            assert error_for_code(code).__name__ in defined
    assert set(_generated_errors.__all__) <= set(errors.__all__)
    sdk_errors_source = Path(errors.__file__).parent.parent.joinpath("errors.py").read_text()
    assert "globals()" not in sdk_errors_source

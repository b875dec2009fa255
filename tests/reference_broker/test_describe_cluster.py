"""DescribeCluster (API 60) endpoint types on a broker listener, answered as Apache Kafka answers
them (``AuthHelper.computeDescribeClusterResponse``): brokers (1) are described; controllers (2)
are the wrong kind of endpoint here (MISMATCHED_ENDPOINT_TYPE); any other type is unknown
(UNSUPPORTED_ENDPOINT_TYPE)."""

from __future__ import annotations

import pytest

from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import DescribeClusterRequest
from tests.reference_broker.wire import WireClient

pytestmark = pytest.mark.interop


@pytest.fixture(params=["reference", pytest.param("apache", marks=pytest.mark.apache_kafka)])
def bootstrap(request: pytest.FixtureRequest) -> str:
    fixture = "apache_kafka" if request.param == "apache" else "broker"
    return str(request.getfixturevalue(fixture).bootstrap)


@pytest.mark.parametrize(
    ("endpoint_type", "error_code", "error_message"),
    [
        (1, ErrorCode.NONE, None),
        (
            2,
            ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
            "CONTROLLER",
        ),
        (7, ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, "Unsupported endpoint type 7"),
    ],
)
def test_endpoint_types_are_answered_as_on_kafka(
    bootstrap: str, endpoint_type: int, error_code: int, error_message: str | None
) -> None:
    with WireClient(bootstrap) as client:
        answer = client.request(DescribeClusterRequest(endpoint_type=endpoint_type), 1)
    assert (answer.error_code, answer.error_message) == (error_code, error_message)
    assert answer.endpoint_type == 1
    if error_code == ErrorCode.NONE:
        assert answer.brokers and answer.endpoint_type == 1
    else:
        assert not answer.brokers


@pytest.mark.parametrize(("include", "operations"), [(False, -(2**31)), (True, 8096)])
def test_cluster_authorized_operations_are_every_cluster_operation_without_an_authorizer(
    bootstrap: str, include: bool, operations: int
) -> None:
    """Kafka's AclEntry.supportedOperations(CLUSTER) as a bit field (CREATE, ALTER, DESCRIBE,
    CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE), only when asked."""
    with WireClient(bootstrap) as client:
        answer = client.request(DescribeClusterRequest(include_cluster_authorized_operations=include), 1)
    assert (answer.error_code, answer.cluster_authorized_operations) == (ErrorCode.NONE, operations)

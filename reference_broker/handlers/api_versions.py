"""ApiVersions (key 18): what this broker implements, straight from the handler registry.

A request newer than we know never reaches ``handle``: the network layer answers it with
``unsupported_version_response`` in v0 (KIP-511). Like Kafka's ``ApiVersionsRequest.
getErrorResponse``, that answer lists only ApiVersions' own range; that is all a client needs to
retry with a version we speak.

v3+ also lists the features (KIP-584): ``transaction.version`` is supported 0-2 and finalized at
the broker's ``transaction.version`` setting (a client uses transactions v2, KIP-890, only when
it is finalized at 2 or more). As Kafka does for requests before v4 (KIP-1022), a v3 answer
reports the supported range from 1, not 0; a feature finalized at level 0 is not listed.
The finalized features never change while a broker runs, so their epoch is always 0.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

if TYPE_CHECKING:
    from reference_broker.broker import Broker
    from reference_broker.handlers.registry import HandlerRegistry
    from reference_broker.network.server import RequestContext

API_KEY = ApiVersionsRequest.API_KEY
# Kafka's ApiVersionsRequest.isValid pattern for the v3+ client software name and version.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _api_list(registry: HandlerRegistry) -> list[ApiVersionsResponse.ApiVersion]:
    return [
        ApiVersionsResponse.ApiVersion(
            api_key=h.api_key, min_version=h.min_version, max_version=registry.max_version(h)
        )
        for h in registry.advertised()
    ]


TRANSACTION_VERSION = "transaction.version"
#: The transaction.version levels this broker implements (Kafka's TV_0..TV_2).
SUPPORTED_TRANSACTION_VERSIONS = (0, 2)


def _features(broker: Broker, version: int) -> dict:
    """The supported and finalized features: transaction.version, and on a cluster node
    kraft.version (supported 0-1, finalized 1 on a dynamic quorum)."""
    level = broker.config.get(TRANSACTION_VERSION)
    R = ApiVersionsResponse
    core = None if getattr(broker, "raft", None) is None else broker.raft.core
    if core is not None:  # a cluster node: kraft.version as Kafka's nodes report it
        from reference_broker.raft.voter_set import SUPPORTED_KRAFT_VERSIONS

        kraft = core.kraft_version
        features = _transaction_features(level, version)
        features["supported_features"].append(R.SupportedFeatureKey(
            name="kraft.version", min_version=SUPPORTED_KRAFT_VERSIONS[0],
            max_version=SUPPORTED_KRAFT_VERSIONS[1]))
        if kraft > 0:
            features["finalized_features"].append(R.FinalizedFeatureKey(
                name="kraft.version", max_version_level=kraft, min_version_level=kraft))
        return features
    return _transaction_features(level, version)


def _transaction_features(level: int, version: int) -> dict:
    low, high = SUPPORTED_TRANSACTION_VERSIONS
    R = ApiVersionsResponse
    return {
        "supported_features": [
            R.SupportedFeatureKey(
                name=TRANSACTION_VERSION, min_version=low if version >= 4 else max(low, 1), max_version=high
            )
        ],
        "finalized_features_epoch": 0,
        "finalized_features": [
            R.FinalizedFeatureKey(name=TRANSACTION_VERSION, max_version_level=level, min_version_level=level)
        ]
        if level > 0
        else [],
    }


def handle(broker: Broker, ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name)
        and _SOFTWARE.fullmatch(request.client_software_version)
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    features = _features(broker, ctx.api_version) if ctx.api_version >= 3 else {}
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_list(broker.registry), **features)


def unsupported_version_response(registry: HandlerRegistry) -> ApiVersionsResponse:
    """The v0 answer to an ApiVersions request whose version is newer than ours."""
    own = next(h for h in registry.advertised() if h.api_key == API_KEY)
    return ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[
            ApiVersionsResponse.ApiVersion(
                api_key=API_KEY, min_version=own.min_version, max_version=own.max_version
            )
        ],
    )


def error_response(request: ApiVersionsRequest, version: int, code: int) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=code)


def install(registry: HandlerRegistry) -> None:
    registry.register(API_KEY, handle, error_response=error_response)

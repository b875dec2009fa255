"""ApiVersions (key 18): what this broker implements, straight from the handler registry.

A request newer than we know never reaches ``handle``: the network layer answers it with
``unsupported_version_response`` in v0 (KIP-511). Like Kafka's ``ApiVersionsRequest.
getErrorResponse``, that answer lists only ApiVersions' own range; that is all a client needs to
retry with a version we speak.

v3+ also lists the features (KIP-584) as ``reference_broker.features`` has them: a client uses
transactions v2 (KIP-890) only when ``transaction.version`` is finalized at 2 or more.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from reference_broker.features import api_versions_fields
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


def handle(broker: Broker, ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name)
        and _SOFTWARE.fullmatch(request.client_software_version)
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    features = api_versions_fields(broker, ctx.api_version) if ctx.api_version >= 3 else {}
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

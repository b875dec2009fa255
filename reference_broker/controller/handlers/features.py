"""UpdateFeatures (57) on the controller: what brokers forward to it (``kafka-features upgrade``,
``downgrade``, ``disable``), authorized by ``reference_broker.controller.authorization`` (ALTER on
the cluster) and decided by ``controller.feature_control``.

The answer is Kafka's QuorumController.updateFeatures: on success no error and, up to v1, one
result per feature asked; on a refusal the request's error with "The update failed for all
features since the following feature had an error: " before the reason, and no results. v0's
``allow_downgrade`` is a safe downgrade, as Kafka's UpdateFeaturesRequest reads it.
"""

from __future__ import annotations

from typing import Any

from reference_broker.controller.feature_control import SAFE_DOWNGRADE, UPGRADE, FeatureUpdateError
from reference_broker.controller.handlers._common import run
from sdk.protocol.errors import ErrorCode
from sdk.protocol.messages import UpdateFeaturesRequest, UpdateFeaturesResponse


def error_response(request: UpdateFeaturesRequest, version: int, code: int) -> UpdateFeaturesResponse:
    """Kafka's UpdateFeaturesRequest.getErrorResponse: the error at the top, no results."""
    return UpdateFeaturesResponse(error_code=code, error_message=None, results=[])


def _upgrade_type(update: Any, version: int) -> int:
    if version == 0:
        return SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
    return int(update.upgrade_type)


async def update_features(broker: Any, ctx: Any, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    version = ctx.api_version
    updates = [(u.feature, u.max_version_level, _upgrade_type(u, version)) for u in request.feature_updates]
    validate_only = bool(request.validate_only) if version >= 1 else False
    outcome = await run(
        broker, lambda core, _now: core.features.update_features(updates, validate_only),
        lambda code: error_response(request, version, code))
    if isinstance(outcome, UpdateFeaturesResponse):  # no active controller here
        return outcome
    if isinstance(outcome, FeatureUpdateError):
        return UpdateFeaturesResponse(
            error_code=outcome.code, results=[],
            error_message="The update failed for all features since the following feature had an"
                          f" error: {outcome.message}")
    results = [UpdateFeaturesResponse.UpdatableFeatureResult(feature=u.feature, error_code=ErrorCode.NONE,
                                                             error_message=None)
               for u in request.feature_updates] if version <= 1 else []
    return UpdateFeaturesResponse(error_code=ErrorCode.NONE, error_message=None, results=results)


def install(registry: Any) -> None:
    registry.register(UpdateFeaturesRequest.API_KEY, update_features, error_response=error_response)

"""SCRAM credentials on the active controller: Kafka's ScramControlManager.

AlterUserScramCredentials (51), which every broker of a cluster forwards here once it has checked
the caller, is decided against the controller's latest image by the code the single broker uses
(``handlers.scram_credentials.decide_alterations``): each accepted upsertion becomes a
UserScramCredentialRecord (salt, stored key, server key, iterations: never the password) and each
accepted deletion a RemoveUserScramCredentialRecord. Every node puts its image's credentials into
the store its SASL/SCRAM listeners authenticate with.

Invariant: a request's records are one batch, so its users change together or not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reference_broker import internal_records as rec
from reference_broker.controller.result import ControllerResult
from reference_broker.security.scram import MECHANISM_TYPES, ScramCredential
from sdk.protocol.messages import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse

if TYPE_CHECKING:
    from reference_broker.controller.quorum_controller import QuorumController


class ScramControl:
    def __init__(self, controller: QuorumController):
        self.controller = controller

    def _current(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.controller.image.scram_credentials.get(user, {}).get(mechanism)

    def alter_credentials(self, request: AlterUserScramCredentialsRequest) -> ControllerResult:
        from reference_broker.handlers.scram_credentials import decide_alterations

        results, upserts, deletions = decide_alterations(request, self._current)
        records: list[Any] = [
            rec.RemoveUserScramCredentialRecord(name=user, mechanism=MECHANISM_TYPES[mechanism])
            for user, mechanism in deletions
        ]
        records += [
            rec.UserScramCredentialRecord(
                name=user,
                mechanism=MECHANISM_TYPES[mechanism],
                salt=credential.salt,
                stored_key=credential.stored_key,
                server_key=credential.server_key,
                iterations=credential.iterations,
            )
            for user, mechanism, credential in upserts
        ]
        return ControllerResult(records, AlterUserScramCredentialsResponse(results=results))

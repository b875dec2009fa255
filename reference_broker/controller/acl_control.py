"""ACLs on the active controller: Kafka's AclControlManager.

CreateAcls (30) and DeleteAcls (31), which every broker of a cluster forwards here once it has
checked the caller, are decided against the controller's latest image by the code the single
broker uses (``handlers.acls.decide_creations`` / ``decide_deletions``) and become
AccessControlEntryRecords (one per new binding, under a random id no ACL of the image holds) and
RemoveAccessControlEntryRecords (one per removed id). Every node puts its image's ACLs into its
authorizer, so a binding created through one broker is enforced by all of them.

Invariants: the image never holds the same binding under two ids; a request's records are one
batch, committed (and so enforced everywhere) together or not at all.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from reference_broker import internal_records as rec
from reference_broker.controller.result import ControllerResult
from sdk.protocol.messages import CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse

if TYPE_CHECKING:
    from reference_broker.controller.quorum_controller import QuorumController


class AclControl:
    def __init__(self, controller: QuorumController):
        self.controller = controller

    def _new_id(self, taken: set[uuid.UUID]) -> uuid.UUID:
        while True:
            acl_id = uuid.uuid4()
            if acl_id not in taken and acl_id not in self.controller.image.acls:
                taken.add(acl_id)
                return acl_id

    def create_acls(self, request: CreateAclsRequest) -> ControllerResult:
        from reference_broker.handlers.acls import decide_creations

        results, accepted = decide_creations(request.creations, self.controller.image.acls.values())
        taken: set[uuid.UUID] = set()
        records: list[Any] = [
            rec.AccessControlEntryRecord(
                id=self._new_id(taken),
                resource_type=acl.resource_type,
                resource_name=acl.resource_name,
                pattern_type=acl.pattern_type,
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission,
            )
            for acl in accepted
        ]
        return ControllerResult(records, CreateAclsResponse(results=results))

    def delete_acls(self, request: DeleteAclsRequest) -> ControllerResult:
        from reference_broker.handlers.acls import decide_deletions

        acls = self.controller.image.acls
        results, removed = decide_deletions(request.filters, acls.values())
        ids = {binding: acl_id for acl_id, binding in acls.items()}
        records: list[Any] = [rec.RemoveAccessControlEntryRecord(id=ids[acl]) for acl in removed]
        return ControllerResult(records, DeleteAclsResponse(filter_results=results))

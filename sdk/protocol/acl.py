"""Kafka's ACL enums with their wire codes: the values CreateAcls, DescribeAcls and DeleteAcls
carry and the bits of a group's or topic's authorized operations.

One declaration for both sides of the wire: the admin client (``sdk.admin.security``) builds and
reads ACL requests with them, the reference broker (``reference_broker.security.acl``) stores and
checks ACLs with them. The codes and names are Kafka's (``org.apache.kafka.common.acl`` and
``org.apache.kafka.common.resource``); ``UNKNOWN`` and ``ANY`` (and ``MATCH`` for patterns) are
filter values, never part of a stored binding.
"""

from __future__ import annotations

import enum

__all__ = ["AclOperation", "AclPermissionType", "AclResourceType", "PatternType"]


class AclResourceType(enum.IntEnum):
    """What an ACL protects (Kafka's ResourceType)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """How an ACL's resource name is matched: the name itself (``*`` for every one), or as a
    prefix; a filter's MATCH selects every binding that applies to a named resource."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """What an ACL allows or denies (Kafka's AclOperation); the code is also the bit of the
    operation in an authorized-operations field."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    """Whether an ACL allows or denies (a matching DENY wins over any ALLOW)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

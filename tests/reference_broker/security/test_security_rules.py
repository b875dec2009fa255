"""The rules of the security layer without a broker: Kafka's authorization decision (deny wins,
implied operations, wildcards, prefixes, hosts, super users, the no-ACL default), ACL filters,
JAAS option parsing, SCRAM credentials (RFC 5802 / 7677 test vector) and the RFC 2253 subject DN
of a client certificate."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest

from reference_broker.config import ConfigError
from reference_broker.security.acl import (
    AclBinding,
    AclFilter,
    AclStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from reference_broker.security.authorizer import Authorizer
from reference_broker.security.jaas import parse_jaas
from reference_broker.security.scram import ScramCredential, ScramCredentialStore, ScramServer
from reference_broker.security.tls import subject_dn
from tests.reference_broker.security.certs import CertificateAuthority

T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def acl(
    name: str,
    op: Operation,
    *,
    pattern: PatternType = LIT,
    allow: bool = True,
    principal: str = "User:alice",
    host: str = "*",
    kind: ResourceType = T,
) -> AclBinding:
    return AclBinding(
        kind, name, pattern, principal, host, op, Permission.ALLOW if allow else Permission.DENY
    )


def authorizer(tmp_path: Path, *acls: AclBinding, allow_if_no_acl: bool = False) -> Authorizer:
    auth = Authorizer.open(tmp_path, super_users=frozenset({"User:root"}), allow_if_no_acl=allow_if_no_acl)
    auth.add(acls)
    return auth


def test_deny_wins_and_implied_operations(tmp_path: Path) -> None:
    auth = authorizer(
        tmp_path,
        acl("*", Operation.ALL),
        acl("orders", Operation.WRITE, allow=False),
        acl("logs", Operation.ALTER_CONFIGS),
    )
    can = lambda op, name: auth.authorize("User:alice", "10.0.0.1", op, T, name)  # noqa: E731
    assert can(Operation.READ, "orders") and not can(Operation.WRITE, "orders")
    assert can(Operation.WRITE, "payments")
    # A deny of WRITE does not deny DESCRIBE, which ALL allows.
    assert can(Operation.DESCRIBE, "orders")
    auth2 = authorizer(tmp_path / "2", acl("t", Operation.READ), acl("c", Operation.ALTER_CONFIGS))
    assert auth2.authorize("User:alice", "h", Operation.DESCRIBE, T, "t")  # READ implies DESCRIBE
    assert auth2.authorize("User:alice", "h", Operation.DESCRIBE_CONFIGS, T, "c")
    assert not auth2.authorize("User:alice", "h", Operation.WRITE, T, "t")
    assert not auth2.authorize("User:alice", "h", Operation.DESCRIBE, T, "c")  # ALTER_CONFIGS does not


def test_prefixes_principals_hosts_super_users_and_the_default(tmp_path: Path) -> None:
    auth = authorizer(
        tmp_path,
        acl("team-", Operation.READ, pattern=PRE),
        acl("shared", Operation.READ, principal="User:*"),
        acl("local", Operation.READ, host="127.0.0.1"),
    )
    assert auth.authorize("User:alice", "h", Operation.READ, T, "team-x")
    assert not auth.authorize("User:alice", "h", Operation.READ, T, "teamx")
    assert auth.authorize("User:bob", "h", Operation.READ, T, "shared")
    assert not auth.authorize("User:bob", "h", Operation.READ, T, "team-x")
    assert auth.authorize("User:alice", "127.0.0.1", Operation.READ, T, "local")
    assert not auth.authorize("User:alice", "10.1.1.1", Operation.READ, T, "local")
    assert auth.authorize("User:root", "h", Operation.DELETE, G, "anything")
    assert not auth.authorize("User:alice", "h", Operation.READ, T, "no-acl-at-all")
    open_auth = authorizer(tmp_path / "open", acl("guarded", Operation.READ), allow_if_no_acl=True)
    assert open_auth.authorize("User:bob", "h", Operation.WRITE, T, "no-acl-at-all")
    assert not open_auth.authorize("User:bob", "h", Operation.READ, T, "guarded")


def test_acls_are_kept_on_disk(tmp_path: Path) -> None:
    authorizer(tmp_path, acl("a", Operation.READ), acl("b-", Operation.WRITE, pattern=PRE))
    assert sorted(a.resource_name for a in AclStore(tmp_path).acls) == ["a", "b-"]


def test_match_filter_finds_what_applies(tmp_path: Path) -> None:
    acls = [
        acl("orders", Operation.READ),
        acl("ord", Operation.READ, pattern=PRE),
        acl("*", Operation.READ),
        acl("other", Operation.READ),
    ]
    flt = AclFilter(T, "orders", PatternType.MATCH, None, None, Operation.ANY, Permission.ANY)
    assert sorted(a.resource_name for a in acls if flt.matches(a)) == ["*", "ord", "orders"]
    literal = AclFilter(T, "ord", LIT, None, None, Operation.ANY, Permission.ANY)
    assert [a for a in acls if literal.matches(a)] == []


def test_jaas_options() -> None:
    entry = parse_jaas(
        "k",
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="a b" user_x="p\\"w" n=1;',
    )
    assert entry.flag == "required" and entry.options == {"username": "a b", "user_x": 'p"w', "n": "1"}
    with pytest.raises(ConfigError, match="k: a JAAS entry must end"):
        parse_jaas("k", "Module required")


def test_scram_sha_256_rfc_7677_exchange(tmp_path: Path) -> None:
    """RFC 7677's example: user "user", password "pencil", 4096 iterations."""
    store = ScramCredentialStore(tmp_path)
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    import hashlib

    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    store.apply(
        [("user", "SCRAM-SHA-256", ScramCredential.from_salted_password("sha256", salt, salted, 4096))], []
    )
    server = ScramServer("SCRAM-SHA-256", store)
    server_first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").decode()
    assert (
        server_first.startswith("r=rOprNGfwEbeRWgbNEkqO")
        and ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096" in server_first
    )
    # The RFC's server nonce is random here, so compute the proof for ours.
    import hmac

    nonce = server_first.split(",")[0][2:]
    final_bare = f"c=biws,r={nonce}"
    auth_message = f"n=user,r=rOprNGfwEbeRWgbNEkqO,{server_first},{final_bare}".encode()
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = server.evaluate(f"{final_bare},p={base64.b64encode(proof).decode()}".encode())
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    assert final == b"v=" + base64.b64encode(hmac.new(server_key, auth_message, "sha256").digest())
    assert server.complete and server.authorization_id == "user"
    assert ScramCredentialStore(tmp_path).get("user", "SCRAM-SHA-256") is not None


def test_subject_dn_is_rfc_2253(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    for name, org, expected in [
        ("alice", "Test", "CN=alice,O=Test"),
        ("a,b+c", None, "CN=a\\,b\\+c"),
    ]:
        pem = ca.issue(name, org=org)
        decoded = ssl._ssl._test_decode_cert(str(pem.cert))  # type: ignore[attr-defined]
        assert subject_dn(decoded) == expected

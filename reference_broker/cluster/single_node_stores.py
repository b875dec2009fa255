"""A cluster node refuses to start on a data dir holding a single-node broker's ACL, SCRAM
credential or client quota file.

A single node keeps its ACLs in ``.security/acls.json``, its SCRAM credentials in
``.security/scram-credentials.json`` and its client quotas in ``client-quotas.json``; a cluster
keeps all three in the metadata log and never reads those files. Starting a cluster node on such
a data dir would silently drop what the operator set up: ACLs that no longer apply (with
``allow.everyone.if.no.acl.found`` the topics they guarded would be open), users who can no
longer log in, quotas no longer enforced.

Refusing, rather than importing the files through the controller, is what an operator can
reason about:

- each node has its own data dir, and the nodes' files may differ: an import would merge them in
  whatever order the nodes start, and a file edited later would be imported again or not at all;
- Kafka moves security metadata into KRaft only by an explicit operator step (its ZooKeeper
  migration), never by picking files up at start;
- a SCRAM credential file holds only the derived keys, which AlterUserScramCredentials cannot
  carry: the passwords must be set again anyway.

The error names the file and the way forward: re-create its entries through the cluster
(kafka-acls, kafka-configs for SCRAM users and quotas) and move the file out of the data dir.
"""

from __future__ import annotations

from pathlib import Path

from reference_broker.config import ConfigError

#: (path in the data dir, what it holds, how to re-create its entries in a cluster)
SINGLE_NODE_STORES = (
    (Path(".security") / "acls.json", "ACLs",
     "kafka-acls.sh --bootstrap-server <cluster> --add ..."),
    (Path(".security") / "scram-credentials.json", "SCRAM credentials",
     "kafka-configs.sh --bootstrap-server <cluster> --alter --entity-type users --entity-name <user>"
     " --add-config 'SCRAM-SHA-256=[password=...]' (the file holds no passwords)"),
    (Path("client-quotas.json"), "client quotas",
     "kafka-configs.sh --bootstrap-server <cluster> --alter --entity-type users|clients"
     " --add-config ..."),
)


def refuse_single_node_stores(data_dir: Path) -> None:
    """Raise ``ConfigError`` naming the first single-node store file found in ``data_dir``."""
    for relative, what, recreate in SINGLE_NODE_STORES:
        path = data_dir / relative
        if path.exists():
            raise ConfigError(
                f"{path} holds the {what} of a single-node broker; in cluster mode"
                f" (controller.quorum.voters set) they are kept in the metadata log and this file"
                f" would be ignored. Re-create its entries through the cluster ({recreate}), then"
                f" move the file out of {data_dir} and start the node again."
            )

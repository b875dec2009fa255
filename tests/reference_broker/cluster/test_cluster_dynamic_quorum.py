"""KIP-853 dynamic controller quorum, driven by Kafka's own ``kafka-metadata-quorum`` on our
3-node cluster and on Apache Kafka 4.1.1's, both started the same way: node 1 formatted
``--standalone`` (its only voter), nodes 2 and 3 ``--no-initial-controllers`` (observers), every
node with ``controller.quorum.bootstrap.servers``.

One cluster per kind for the module; the tests run in order on it: bad AddRaftVoter requests
get Kafka's errors, ``add-controller`` makes nodes 2 and 3 voters (``describe --status`` and
``--replication`` list three voters), ``remove-controller`` takes one out and a second removal
is VOTER_NOT_FOUND, removing the leader itself makes it resign (another voter leads, it
observes), then, with every voter back, the active controller is SIGKILLed and the other two
elect a new one that still creates topics.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference_broker.log.log_manager import topic_id_to_string
from reference_broker.testing import ClusterProcess
from reference_broker.testing import wait_until as until
from tests.apache_kafka import KafkaCluster, require_apache_kafka
from tests.oracles.kafka_tools import run_tool, write_properties

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.apache_kafka]

#: the admin client's budget in the tool: Kafka's answers to a bad add come at once, but a
#: retriable one (REQUEST_TIMED_OUT) is retried by the admin client until this timeout
ADMIN_TIMEOUTS = {"default.api.timeout.ms": 6000, "request.timeout.ms": 3000}


class DynamicQuorum:
    """What the tests need of either cluster: the tool's bootstrap, each node's properties (the
    tool's ``--command-config``, with ``log.dirs`` where its ``meta.properties`` is), directory
    ids, SIGKILL."""

    def __init__(self, kind: str, work: Path) -> None:
        self.kind = kind
        self.work = work
        self.reference: ClusterProcess | None = None
        self.kafka: KafkaCluster | None = None
        if kind == "reference":
            self.reference = ClusterProcess(3, data_dir=work / "data", proxy=False,
                                            quorum="standalone").start()
        else:
            self.kafka = KafkaCluster(work / "data", 3, client_compiler=True,
                                      dynamic_quorum=True).start()
        self.killed: set[int] = set()

    def bootstrap(self, *, without: int | None = None) -> str:
        if self.reference is not None:
            nodes = [(n.node_id, n.bootstrap) for n in self.reference.nodes]
        else:
            assert self.kafka is not None
            nodes = [(n.node_id, n.bootstrap) for n in self.kafka.nodes]
        return ",".join(b for n, b in nodes if n != without and n not in self.killed)

    def controller(self, node_id: int) -> str:
        """Node ``node_id``'s controller listener (``--bootstrap-controller``)."""
        if self.reference is not None:
            node = self.reference.node(node_id)
            return f"{node.host}:{node.controller_port}"
        assert self.kafka is not None
        return f"127.0.0.1:{self.kafka.node(node_id).controller_port}"

    def meta_dir(self, node_id: int) -> Path:
        if self.reference is not None:
            return self.reference.data_dir / f"node-{node_id}"
        assert self.kafka is not None
        return self.kafka.node(node_id).data_dir / "logs"

    def directory_id(self, node_id: int) -> str:
        text = (self.meta_dir(node_id) / "meta.properties").read_text()
        found = re.search(r"^directory\.id=(\S+)$", text, re.MULTILINE)
        assert found is not None, text
        return found.group(1)

    def node_properties(self, node_id: int, *, log_dir: Path | None = None) -> Path:
        """The node's server properties as ``add-controller --command-config`` takes them."""
        if self.reference is not None:
            settings: dict[str, Any] = dict(self.reference.node(node_id).process.config)
        else:
            assert self.kafka is not None
            settings = dict(self.kafka.node(node_id).server_properties())
        settings["log.dirs"] = str(log_dir or self.meta_dir(node_id))
        settings.update(ADMIN_TIMEOUTS)
        return write_properties(self.work / f"node-{node_id}-{uuid.uuid4().hex[:6]}.properties",
                                settings)

    def kill(self, node_id: int) -> None:
        self.killed.add(node_id)
        if self.reference is not None:
            self.reference.kill(node_id)
        else:
            assert self.kafka is not None
            self.kafka.node(node_id).kill()

    def close(self) -> None:
        if self.reference is not None:
            self.reference.close()
        if self.kafka is not None:
            self.kafka.kill()


@pytest.fixture(scope="module", params=["reference", "kafka"])
def quorum(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[DynamicQuorum]:
    require_apache_kafka()  # the tool runs from Kafka's jars on both
    cluster = DynamicQuorum(request.param, tmp_path_factory.mktemp(f"dyn-{request.param}"))
    try:
        yield cluster
    finally:
        cluster.close()


def quorum_tool(quorum: DynamicQuorum, *args: str, ok: bool = True,
                without: int | None = None) -> str:
    done = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                    quorum.bootstrap(without=without), *args)
    if ok:
        assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
        return done.stdout
    assert done.returncode != 0, f"{args} succeeded:\n{done.stdout}"
    return done.stdout + done.stderr


def status(quorum: DynamicQuorum, without: int | None = None) -> dict[str, Any]:
    """``describe --status`` parsed: the leader, its epoch, the voters and observers (JSON)."""
    out = quorum_tool(quorum, "describe", "--status", without=without)
    fields = dict(re.findall(r"^(\w+):\s+(.*)$", out, re.MULTILINE))
    return {"leader": int(fields["LeaderId"]), "epoch": int(fields["LeaderEpoch"]),
            "voters": json.loads(fields["CurrentVoters"]),
            "observers": json.loads(fields["CurrentObservers"])}


def replication(quorum: DynamicQuorum) -> dict[int, dict[str, str]]:
    """``describe --replication`` parsed: node id -> its row (DirectoryId, Status, ...)."""
    lines = [line.split() for line in quorum_tool(quorum, "describe", "--replication").splitlines()
             if line.strip()]
    header = lines[0]
    return {int(row[0]): dict(zip(header, row, strict=True)) for row in lines[1:]}


def until_seen(read: Any, accept: Any, what: str, timeout: float = 60) -> Any:
    """``read()`` once ``accept`` takes its value (read again until then, also while the tool
    fails: during an election a describe may time out)."""

    def attempt() -> Any:
        try:
            value = read()
        except AssertionError:
            return None
        return value if accept(value) else None

    return until(attempt, what, timeout)


def add_controller(quorum: DynamicQuorum, node_id: int) -> str:
    """``add-controller`` for node ``node_id``, again while the quorum answers REQUEST_TIMED_OUT
    (the previous voter change or the new epoch not committed yet) or NOT_LEADER_OR_FOLLOWER
    (a leader just elected): Kafka's retriable answers."""
    properties = str(quorum.node_properties(node_id))

    def attempt() -> str | None:
        done = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                        quorum.bootstrap(), "--command-config", properties, "add-controller")
        if done.returncode == 0:
            return done.stdout
        retriable = ("TimeoutException", "NotLeaderOrFollowerException")
        assert any(e in done.stderr for e in retriable), done.stdout + done.stderr
        return None

    return str(until(attempt, f"controller {node_id} added", 45))


def voter_ids(found: dict[str, Any]) -> set[int]:
    return {v["id"] for v in found["voters"]}


def test_started_with_one_voter_and_two_observers(quorum: DynamicQuorum) -> None:
    found = until_seen(lambda: status(quorum), lambda s: len(s["observers"]) == 2,
                       "both observers fetch")
    assert found["leader"] == 1 and voter_ids(found) == {1}
    [voter] = found["voters"]
    assert voter["directoryId"] == quorum.directory_id(1)
    assert voter["endpoints"] and voter["endpoints"][0].startswith("CONTROLLER://")
    assert {o["id"]: o["directoryId"] for o in found["observers"]} == {
        n: quorum.directory_id(n) for n in (2, 3)}
    # DescribeQuorum v2's nodes: the voters' listeners only (a leader knows no observer's)
    assert all("endpoints" not in o for o in found["observers"]), found["observers"]


def features(*bootstrap: str) -> dict[str, dict[str, str]]:
    """``kafka-features describe`` parsed: feature name -> its tab-separated fields."""
    done = run_tool("org.apache.kafka.tools.FeatureCommand", *bootstrap, "describe")
    assert done.returncode == 0, done.stdout + done.stderr
    found = {}
    for line in done.stdout.splitlines():
        fields = dict(f.split(": ", 1) for f in line.split("\t") if ": " in f)
        if "Feature" in fields:
            found[fields.pop("Feature")] = fields
    return found


def test_kafka_features_shows_kraft_version_1(quorum: DynamicQuorum) -> None:
    for via in (("--bootstrap-server", quorum.bootstrap()),
                ("--bootstrap-controller", quorum.controller(1))):
        kraft = features(*via).get("kraft.version")
        assert kraft is not None, via
        assert (kraft["SupportedMinVersion"], kraft["SupportedMaxVersion"],
                kraft["FinalizedVersionLevel"]) == ("0", "1", "1"), (via, kraft)


def fake_meta_dir(quorum: DynamicQuorum, like: int, *, node_id: int) -> Path:
    """A log dir whose meta.properties is node ``like``'s with a new directory id and
    ``node_id``: what the tool reads the would-be voter's replica key from."""
    fake = quorum.work / f"fake-{uuid.uuid4().hex[:6]}"
    fake.mkdir()
    replaced = {"directory.id": topic_id_to_string(uuid.uuid4()), "node.id": str(node_id)}
    lines = (quorum.meta_dir(like) / "meta.properties").read_text().splitlines()
    (fake / "meta.properties").write_text("".join(
        (f"{key}={replaced[key]}" if (key := line.partition("=")[0]) in replaced else line) + "\n"
        for line in lines))
    return fake


def test_bad_add_controller_requests_get_kafkas_errors(quorum: DynamicQuorum) -> None:
    # a voter already: DUPLICATE_VOTER
    out = quorum_tool(quorum, "--command-config", str(quorum.node_properties(1)),
                      "add-controller", ok=False)
    key = f"ReplicaKey(id=1, directoryId={quorum.directory_id(1)})"
    assert (f"DuplicateVoterException: The voter id for {key} is already part of the set of"
            f" voters [{key}].") in out, out
    # another directory id than the observer's: no such replica has caught up, REQUEST_TIMED_OUT
    fake = fake_meta_dir(quorum, 2, node_id=2)
    out = quorum_tool(quorum, "--command-config", str(quorum.node_properties(2, log_dir=fake)),
                      "add-controller", ok=False)
    assert "TimeoutException" in out and "lagging behind" in out, out
    # a node that never fetched (node 4, whose controller address answers ApiVersions: node 2's)
    fake = fake_meta_dir(quorum, 2, node_id=4)
    properties = quorum.node_properties(2, log_dir=fake)
    properties.write_text(re.sub(r"^node\.id=2$", "node.id=4", properties.read_text(),
                                 flags=re.MULTILINE))
    out = quorum_tool(quorum, "--command-config", str(properties), "add-controller", ok=False)
    assert "TimeoutException" in out and "lagging behind" in out, out
    assert voter_ids(status(quorum)) == {1}


def test_add_controller_makes_three_voters(quorum: DynamicQuorum) -> None:
    for node in (2, 3):
        out = add_controller(quorum, node)
        assert f"Added controller {node} with directory id {quorum.directory_id(node)}" in out
    found = status(quorum)
    assert voter_ids(found) == {1, 2, 3} and found["observers"] == []
    assert {v["id"]: v["directoryId"] for v in found["voters"]} == {
        n: quorum.directory_id(n) for n in (1, 2, 3)}
    assert all(v["endpoints"][0].startswith("CONTROLLER://") for v in found["voters"])
    rows = until_seen(lambda: replication(quorum), lambda r: len(r) == 3, "3 rows", 30)
    assert {n: row["Status"] for n, row in rows.items()} == {
        n: "Leader" if n == found["leader"] else "Follower" for n in (1, 2, 3)}
    assert {n: row["DirectoryId"] for n, row in rows.items()} == {
        n: quorum.directory_id(n) for n in (1, 2, 3)}


def test_remove_controller_then_add_it_back(quorum: DynamicQuorum) -> None:
    directory = quorum.directory_id(3)
    out = quorum_tool(quorum, "remove-controller", "--controller-id", "3",
                      "--controller-directory-id", directory)
    assert f"controller 3 with directory id {directory}" in out
    found = status(quorum)
    assert voter_ids(found) == {1, 2}
    rows = until_seen(lambda: replication(quorum),
                      lambda r: r.get(3, {}).get("Status") == "Observer",
                      "node 3 fetches as an observer", 30)
    assert {n: row["Status"] for n, row in rows.items() if n != found["leader"]} == {
        n: "Follower" if n in (1, 2) else "Observer" for n in (1, 2, 3) if n != found["leader"]}
    out = quorum_tool(quorum, "remove-controller", "--controller-id", "3",
                      "--controller-directory-id", directory, ok=False)
    assert (f"VoterNotFoundException: Cannot remove voter ReplicaKey(id=3, directoryId="
            f"{directory}) from the set of voters [") in out, out
    out = add_controller(quorum, 3)
    assert "Added controller 3" in out
    assert voter_ids(status(quorum)) == {1, 2, 3}


def test_removing_the_leader_makes_it_resign_and_observe(quorum: DynamicQuorum) -> None:
    before = status(quorum)
    leader = before["leader"]
    others = {1, 2, 3} - {leader}
    quorum_tool(quorum, "remove-controller", "--controller-id", str(leader),
                "--controller-directory-id", quorum.directory_id(leader))
    after = until_seen(lambda: status(quorum),
                       lambda s: s["leader"] in others and voter_ids(s) == others,
                       "another voter leads")
    assert after["epoch"] > before["epoch"]
    until_seen(lambda: replication(quorum),
               lambda r: r.get(leader, {}).get("Status") == "Observer",
               "the old leader fetches as an observer", 30)
    out = add_controller(quorum, leader)
    assert f"Added controller {leader}" in out
    assert voter_ids(status(quorum)) == {1, 2, 3}


def test_the_other_voters_elect_a_new_controller_after_a_sigkill(quorum: DynamicQuorum) -> None:
    # every voter has the voter set (a re-added voter that has not fetched it yet would not
    # stand for election: the two left could not make a majority)
    until_seen(lambda: replication(quorum),
               lambda r: {n: (row["Status"], row["Lag"]) for n, row in r.items()} in [
                   {n: ("Leader" if n == leader else "Follower", "0") for n in (1, 2, 3)}
                   for leader in (1, 2, 3)],
               "every voter caught up", 30)
    before = status(quorum)
    leader = before["leader"]
    quorum.kill(leader)
    after = until_seen(lambda: status(quorum, without=leader),
                       lambda s: s["leader"] not in (leader, -1) and s["epoch"] > before["epoch"],
                       "a new controller")
    assert after["leader"] in {1, 2, 3} - {leader} and voter_ids(after) == {1, 2, 3}
    topic = f"after-failover-{uuid.uuid4().hex[:6]}"
    survivors = quorum.bootstrap(without=leader)

    def created() -> bool:
        """kafka-topics --create (Kafka's admin client sends CreateTopics to a live broker),
        retried while the brokers learn the new controller."""
        done = run_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", survivors,
                        "--create", "--topic", topic, "--partitions", "2",
                        "--replication-factor", "2")
        return done.returncode == 0 or "already exists" in done.stdout + done.stderr

    until(created, "a topic created after the failover", 60)
    done = run_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", survivors,
                    "--describe", "--topic", topic)
    assert done.returncode == 0 and done.stdout.count("Partition: ") == 2, done.stdout


def test_initial_controllers_start_as_three_voters(tmp_path: Path) -> None:
    """``--quorum initial-controllers`` (``kafka-storage format --initial-controllers`` on every
    node): the bootstrap checkpoint names all three, they elect among themselves, no add."""
    require_apache_kafka()
    with ClusterProcess(3, data_dir=tmp_path / "data", proxy=False,
                        quorum="initial-controllers").start() as cluster:
        done = run_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                        cluster.bootstrap, "describe", "--status")
        assert done.returncode == 0, done.stderr
        fields = dict(re.findall(r"^(\w+):\s+(.*)$", done.stdout, re.MULTILINE))
        voters = json.loads(fields["CurrentVoters"])
        directories = {n: topic_id_to_string(cluster.directory_id(n)) for n in (1, 2, 3)}
        assert {v["id"]: v["directoryId"] for v in voters} == directories
        assert json.loads(fields["CurrentObservers"]) == []

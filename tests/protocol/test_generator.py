"""The generator: committed tables must be what it makes from Kafka's definitions today, for the
protocol messages (``sdk/protocol``) and the internal records (``reference_broker/internal_records``).

CI checks out ``shared/`` next to the repository, so the definitions are at
``../shared/kafka-protocol``; the test regenerates into a scratch folder and compares, which fails
when someone edits a generated file by hand or changes the generator without re-running it. The
definitions are only read by the generator run in a subprocess, never imported by the package.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from reference_broker import internal_records
from sdk.protocol import messages
from sdk.protocol.messages import MESSAGE_CLASSES, Message

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tools" / "generate_protocol.py"
DEFINITIONS = ROOT.parent / "shared" / "kafka-protocol"
#: Each generated file by name, with where it is committed (``--out-dir`` writes them all to one folder).
GENERATED = {
    "_generated_schemas.py": ROOT / "sdk" / "protocol" / "_generated_schemas.py",
    "_generated_errors.py": ROOT / "sdk" / "protocol" / "_generated_errors.py",
    "_generated_messages.pyi": ROOT / "sdk" / "protocol" / "_generated_messages.pyi",
    "internal_records.py": ROOT / "reference_broker" / "internal_records.py",
    "internal_records.pyi": ROOT / "reference_broker" / "internal_records.pyi",
}


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_protocol", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not DEFINITIONS.is_dir(), reason="../shared/kafka-protocol is not checked out")
def test_committed_tables_are_current(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), str(DEFINITIONS), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name, committed in GENERATED.items():
        fresh = (tmp_path / name).read_text()
        assert fresh == committed.read_text(), f"{committed} is stale: run tools/generate_protocol.py"


def test_version_ranges() -> None:
    gen = _load_generator()
    assert gen.parse_versions("3+") == (3, 0x7FFF)
    assert gen.parse_versions("0-12") == (0, 12)
    assert gen.parse_versions("5") == (5, 5)
    assert gen.parse_versions("none") is None
    assert gen.parse_versions(None) is None


def test_names_and_defaults() -> None:
    gen = _load_generator()
    assert gen.snake_case("ThrottleTimeMs") == "throttle_time_ms"
    assert gen.snake_case("IncludeClusterAuthorizedOperations") == "include_cluster_authorized_operations"
    assert gen.snake_case("ReplicaId") == "replica_id"
    assert gen.parse_default("int32", "-1", False) == -1
    assert gen.parse_default("int64", "0x7fffffffffffffff", False) == 2**63 - 1
    assert gen.parse_default("bool", "true", False) is True
    assert gen.parse_default("string", "null", True) is None
    assert gen.parse_default("[]int32", None, False) == "[]"
    assert gen.parse_default("uuid", None, False) == "uuid0"
    # Records default to null only where null can be written (Fix: FetchSnapshotResponse).
    assert gen.parse_default("records", None, True) is None
    assert gen.parse_default("records", None, False) == b""


def test_out_dir_leaves_the_package_alone(tmp_path: Path) -> None:
    """A generation into a scratch folder from a tiny definition set touches only that folder."""
    source = tmp_path / "defs"
    (source / "message").mkdir(parents=True)
    (source / "message" / "PingRequest.json").write_text(
        "// a comment line, as Kafka's files have\n"
        '{"apiKey": 999, "type": "request", "name": "PingRequest", "validVersions": "0-1",\n'
        ' "flexibleVersions": "1+", "fields": [\n'
        '  {"name": "Payload", "type": "bytes", "versions": "0+", "nullableVersions": "1+"},\n'
        '  {"name": "Hint", "type": "string", "versions": "1+", "taggedVersions": "1+", "tag": 0}]}\n'
    )
    (source / "errors.tsv").write_text(
        "code\tname\texception_class\tretriable\n7\tSLOW\tSlowException\tyes\n"
    )
    (source / "api_keys.tsv").write_text(
        "api_key\tname\tvalid_versions\tflexible_versions\tspec_from_kafka\tnote\n"
    )
    for folder in ("group", "transaction", "metadata"):
        (source / "internal" / folder).mkdir(parents=True)
    # A tagged field without ``versions`` exists in its tagged versions (Kafka's rule).
    (source / "internal" / "transaction" / "PingLogValue.json").write_text(
        '{"type": "data", "name": "PingLogValue", "validVersions": "0-1", "flexibleVersions": "1+",\n'
        ' "fields": [{"name": "Count", "type": "int32", "versions": "0+"},\n'
        '  {"name": "Note", "type": "string", "taggedVersions": "1+", "tag": 0, "default": "x"}]}\n'
    )
    (source / "internal" / "metadata" / "PingRecord.json").write_text(
        '{"apiKey": 99, "type": "metadata", "name": "PingRecord", "validVersions": "0",\n'
        ' "flexibleVersions": "0+", "fields": [{"name": "TopicId", "type": "uuid", "versions": "0+"}]}\n'
    )
    before = {name: committed.read_bytes() for name, committed in GENERATED.items()}
    out = tmp_path / "out"
    gen = _load_generator()
    assert gen.main([str(source), "--out-dir", str(out)]) == 0
    for name, committed in GENERATED.items():
        assert committed.read_bytes() == before[name]
    namespace: dict[str, object] = {}
    exec((out / "_generated_schemas.py").read_text(), namespace)
    (ping,) = namespace["MESSAGES"]  # type: ignore[misc]
    assert ping["name"] == "PingRequest" and ping["valid"] == (0, 1) and ping["flexible"] == (1, 0x7FFF)
    payload, hint = ping["fields"]
    assert payload == {"name": "payload", "type": "bytes", "array": False, "versions": (0, 0x7FFF),
                       "nullable": (1, 0x7FFF), "default": b""}
    assert (hint["tag"], hint["tagged"]) == (0, (1, 0x7FFF))
    exec((out / "_generated_errors.py").read_text(), namespace)
    assert namespace["ERRORS"] == [(7, "SLOW", "SlowException", True)]
    stub = (out / "_generated_messages.pyi").read_text()
    assert "class PingRequest(Message):" in stub
    assert "    API_KEY: ClassVar[int]" in stub
    assert "    payload: bytes | None" in stub  # nullable from v1
    assert "    hint: str\n" in stub
    assert "def __init__(self, *, payload: bytes | None = ..., hint: str = ...) -> None: ..." in stub
    exec((out / "internal_records.py").read_text(), namespace)
    # The generator's own additions (records Kafka 4.1 has and the definitions lack) come along.
    by_name = {r["name"]: r for r in namespace["RECORDS"]}  # type: ignore[attr-defined]
    ping_log, ping_record = by_name["PingLogValue"], by_name["PingRecord"]
    assert ping_log["fields"][1] == {"name": "note", "type": "string", "array": False,
                                     "versions": (1, 0x7FFF), "tag": 0, "tagged": (1, 0x7FFF), "default": "x"}
    assert namespace["METADATA_RECORD_TYPES"] == {99: namespace["PingRecord"]}  # type: ignore[index]
    assert ping_record["kind"] == "metadata"
    internal_stub = (out / "internal_records.pyi").read_text()
    assert "class PingLogValue(Message):" in internal_stub
    assert "    topic_id: _uuid.UUID\n" in internal_stub


def test_missing_internal_definitions_are_refused(tmp_path: Path) -> None:
    gen = _load_generator()
    (tmp_path / "internal" / "group").mkdir(parents=True)
    with pytest.raises(SystemExit, match="internal/transaction is missing"):
        gen.load_internal_records(tmp_path)


def test_newer_internal_fields_are_added_once() -> None:
    """A field Kafka 4.1 has and the older copy of the definitions lacks goes after its predecessor;
    a definition that has it already (a newer copy) is left as it is."""
    gen = _load_generator()
    older = {"name": "TransactionLogValue", "fields": [{"name": "ProducerId"}, {"name": "NextProducerId"},
                                                       {"name": "ProducerEpoch"}]}
    names = [f["name"] for f in gen.add_newer_fields(older)["fields"]]
    assert names == ["ProducerId", "NextProducerId", "NextProducerEpoch", "ProducerEpoch"]
    newer = gen.add_newer_fields(older)
    assert gen.add_newer_fields(newer) == newer
    with pytest.raises(SystemExit, match="no field NextProducerId"):
        gen.add_newer_fields({"name": "TransactionLogValue", "fields": [{"name": "ProducerId"}]})


def _stub_classes(body: list[ast.stmt], prefix: str, out: dict[str, dict[str, object]]) -> None:
    """Every class of the stub by qualified name: its annotated fields, nested classes and aliases."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            qualname = f"{prefix}{node.name}"
            members: dict[str, object] = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    if item.value is not None:  # ``Name: TypeAlias = Outer.Inner.Name``
                        members[item.target.id] = ("alias", ast.unparse(item.value))
                    else:
                        members[item.target.id] = ast.unparse(item.annotation)
                elif isinstance(item, ast.ClassDef):
                    members[item.name] = ("class", f"{qualname}.{item.name}")
                elif isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    members["__init__"] = [a.arg for a in item.args.kwonlyargs]
            out[qualname] = members
            _stub_classes(node.body, f"{qualname}.", out)


def _check_stub(stub_path: Path, classes: dict[str, type[Message]], module: ModuleType) -> None:
    """The stub at ``stub_path`` declares each class of ``classes`` (as ``module`` exports them),
    every nested struct and field, with the same nesting, and nothing else."""
    stub = ast.parse(stub_path.read_text())
    declared: dict[str, dict[str, object]] = {}
    _stub_classes(stub.body, "", declared)
    assert {q for q in declared if "." not in q} == set(classes)

    seen: set[str] = set()

    def check(cls: type[Message], qualname: str) -> None:
        members = declared[qualname]
        field_names = [f.name for f in cls.FIELDS]
        assert members["__init__"] == field_names, qualname
        for f in cls.FIELDS:
            annotation = members[f.name]
            assert isinstance(annotation, str), (qualname, f.name)
            nullable = f.nullable is not None or (f.type == "records" and not f.array)
            assert annotation.endswith(" | None") == nullable, (qualname, f.name, annotation)
            if f.array:
                assert annotation.startswith("list["), (qualname, f.name, annotation)
            if f.struct is not None:
                assert f.struct.__qualname__ in annotation, (qualname, f.name, annotation)
        nested = {name: value for name, value in vars(cls).items() if isinstance(value, type)}
        for name, child in nested.items():
            kind, target = members[name]  # type: ignore[misc]  # a (kind, qualname) pair by construction
            assert target == child.__qualname__, (qualname, name, target)
            if kind == "class" and target not in seen:
                seen.add(target)
                check(child, target)
        if cls.API_KEY is not None:
            assert members["API_KEY"] == "ClassVar[int]"

    for name, cls in classes.items():
        assert getattr(module, name) is cls
        check(cls, name)
    # Every class the stub declares exists at run time.
    assert set(declared) == seen | set(classes)


def test_stub_declares_every_runtime_class_and_field() -> None:
    """The type stub names each message class, nested struct and field that ``messages`` builds,
    with the same nesting, so type-checked code means the classes the runtime has."""
    _check_stub(GENERATED["_generated_messages.pyi"], MESSAGE_CLASSES, messages)


def test_internal_records_stub_declares_every_runtime_class_and_field() -> None:
    _check_stub(GENERATED["internal_records.pyi"], internal_records.RECORD_CLASSES, internal_records)


PROBE = """\
from sdk.protocol.codec import decode
from sdk.protocol.messages import JoinGroupRequest, ProduceRequest

partition: ProduceRequest.PartitionProduceData = ProduceRequest.PartitionProduceData(index=1, records=b"")
request = decode(JoinGroupRequest, b"", 0)
metadata: bytes = request.protocols[0].metadata
key: int = ProduceRequest.API_KEY
ProduceRequest(acks="all")
request.no_such_field
from reference_broker.internal_records import GroupMetadataValue
group = decode(GroupMetadataValue, b"", 3)
instance: str | None = group.members[0].group_instance_id
GroupMetadataValue(generation="7")
"""


def test_type_checker_reads_the_stub(tmp_path: Path) -> None:
    """mypy, with the project's configuration, sees typed classes through ``sdk.protocol.messages``
    and ``reference_broker.internal_records``: nested structs by their aliases, decoded fields typed,
    wrong field types and names refused."""
    pytest.importorskip("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), str(probe)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["8", "9", "13"], result.stdout
    assert 'Argument "acks" to "ProduceRequest" has incompatible type "str"; expected "int"' in errors[0]
    assert '"JoinGroupRequest" has no attribute "no_such_field"' in errors[1]
    assert 'Argument "generation" to "GroupMetadataValue" has incompatible type "str"' in errors[2]

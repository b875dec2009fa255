#!/usr/bin/env python3
"""Generate the protocol tables in ``sdk/protocol`` and the broker's internal record formats from
Kafka's JSON definitions.

Usage::

    python tools/generate_protocol.py ../shared/kafka-protocol [--out-dir DIR]

Reads ``message/*.json`` and ``errors.tsv`` from that folder and rewrites
``sdk/protocol/_generated_schemas.py``, ``sdk/protocol/_generated_errors.py`` and the type stub
``sdk/protocol/_generated_messages.pyi``; reads ``internal/{group,transaction,metadata}/*.json``
(the records Kafka keeps in ``__consumer_offsets``, ``__transaction_state`` and the KRaft metadata
log) and rewrites ``reference_broker/internal_records.py`` with its stub
``reference_broker/internal_records.pyi``. ``--out-dir`` writes all five files into one folder
instead, which is how the test suite checks that the committed files are current. The output keeps
only what the codec needs (names, types, version ranges, defaults, tags) and none of the prose, so
that the project carries its own compact definitions and re-generating against a newer Kafka is
one command.
"""

from __future__ import annotations

import argparse
import json
import pprint
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "sdk" / "protocol"
SCHEMAS_FILE = "_generated_schemas.py"
ERRORS_FILE = "_generated_errors.py"
STUBS_FILE = "_generated_messages.pyi"
OUT_SCHEMAS = OUT_DIR / SCHEMAS_FILE
OUT_ERRORS = OUT_DIR / ERRORS_FILE
OUT_STUBS = OUT_DIR / STUBS_FILE
#: The internal record formats are the broker's storage, so they live in its package.
INTERNAL_OUT_DIR = ROOT / "reference_broker"
INTERNAL_RECORDS_FILE = "internal_records.py"
INTERNAL_STUBS_FILE = "internal_records.pyi"
#: The folders under ``internal/``, each one log's record definitions.
INTERNAL_FOLDERS = ("group", "transaction", "metadata")

OPEN_END = 0x7FFF
PRIMITIVES = {
    "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
    "string", "bytes", "records", "uuid",
}


def parse_versions(text: str | None) -> tuple[int, int] | None:
    """Turn Kafka's version spec ("3+", "0-12", "5", "none") into an inclusive range."""
    if text is None or text == "none":
        return None
    text = text.strip()
    if text.endswith("+"):
        return (int(text[:-1]), OPEN_END)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def snake_case(name: str) -> str:
    """CamelCase field name to a Python attribute name (``ThrottleTimeMs`` -> ``throttle_time_ms``)."""
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    if s in {"global", "from", "import", "class", "type_"}:
        s += "_"
    return s


def strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("//"))


def parse_default(type_name: str, raw: Any, nullable: bool) -> Any:
    """Kafka writes defaults as strings; turn them into the Python value the codec uses."""
    if raw is None:
        if type_name.startswith("[]"):
            return "[]"
        if type_name in ("bool",):
            return False
        if type_name in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
            return 0
        if type_name == "float64":
            return 0.0
        if type_name == "string":
            return ""
        if type_name == "bytes":
            return b""
        if type_name == "records":
            # Kafka's own default is null, which a never-nullable field cannot be written as
            # (FetchSnapshotResponse's UnalignedRecords): empty records there instead.
            return None if nullable else b""
        if type_name == "uuid":
            return "uuid0"
        return "struct"
    if raw == "null":
        return None
    if type_name == "bool":
        return str(raw).lower() == "true"
    if type_name in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(str(raw), 0)
    if type_name == "float64":
        return float(raw)
    if type_name == "string":
        return str(raw)
    return raw


class Generator:
    """Turns one definition file into the nested table the codec compiles."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.common = {s["name"]: s for s in spec.get("commonStructs", [])}
        self.structs: set[str] = set()

    def field(self, f: dict[str, Any]) -> dict[str, Any]:
        type_name = f["type"]
        is_array = type_name.startswith("[]")
        elem = type_name[2:] if is_array else type_name
        nullable = parse_versions(f.get("nullableVersions"))
        # Kafka's rule: a tagged field without ``versions`` exists in its tagged versions.
        versions = parse_versions(f.get("versions", f.get("taggedVersions")))
        if versions is None:
            raise SystemExit(f"field {f['name']} of {self.spec['name']} has no versions")
        out: dict[str, Any] = {
            "name": snake_case(f["name"]),
            "type": elem,
            "array": is_array,
            "versions": versions,
        }
        if nullable:
            out["nullable"] = nullable
        if "tag" in f:
            out["tag"] = int(f["tag"])
            out["tagged"] = parse_versions(f.get("taggedVersions"))
        if "flexibleVersions" in f:
            out["flexible"] = parse_versions(f["flexibleVersions"])
        if elem not in PRIMITIVES:
            fields = f.get("fields")
            if fields is None:
                common = self.common.get(elem)
                if common is None:
                    raise SystemExit(f"unknown type {elem} in {self.spec['name']}")
                fields = common["fields"]
            out["struct"] = elem
            out["fields"] = [self.field(x) for x in fields]
            self.structs.add(elem)
        out["default"] = parse_default(
            "[]" + elem if is_array else elem, f.get("default"), nullable is not None
        )
        return out

    def message(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "name": spec["name"],
            "api_key": spec.get("apiKey"),
            "kind": spec["type"],
            "valid": parse_versions(spec.get("validVersions")),
            "flexible": parse_versions(spec.get("flexibleVersions")),
            "fields": [self.field(f) for f in spec.get("fields", [])],
        }


#: Versions Kafka 4.1 has of a message and the copy in ``../shared`` lacks: the message's valid
#: versions there, and the fields those versions add, each as (path of its struct, the field it
#: follows, the field in Kafka's JSON form). A copy that already has the versions is left alone.
NEWER_MESSAGE_VERSIONS: dict[str, tuple[str, list[tuple[str, str, dict[str, Any]]]]] = {
    # KIP-1099: v1 tells classic members of a consumer group from consumer-protocol ones.
    "ConsumerGroupDescribeRequest": ("0-1", []),
    "ConsumerGroupDescribeResponse": (
        "0-1",
        [
            (
                "Groups/Members",
                "TargetAssignment",
                {"name": "MemberType", "type": "int8", "versions": "1+", "default": "-1", "ignorable": True},
            )
        ],
    ),
}


def add_newer_versions(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with the versions and fields of ``NEWER_MESSAGE_VERSIONS`` it lacks."""
    newer = NEWER_MESSAGE_VERSIONS.get(spec["name"])
    if newer is None:
        return spec
    valid, added = newer
    if parse_versions(spec["validVersions"])[1] >= parse_versions(valid)[1]:
        return spec
    spec = json.loads(json.dumps(spec))
    spec["validVersions"] = valid
    for path, after, field in added:
        fields = spec["fields"]
        for step in path.split("/"):
            fields = next(f for f in fields if f["name"] == step)["fields"]
        names = [f["name"] for f in fields]
        if field["name"] not in names:
            fields.insert(names.index(after) + 1, field)
    return spec


def load_messages(source: Path) -> list[dict[str, Any]]:
    messages = []
    for path in sorted((source / "message").glob("*.json")):
        spec = add_newer_versions(json.loads(strip_comments(path.read_text())))
        messages.append(Generator(spec).message())
    return messages


#: Fields that Kafka 4.1's definitions of an internal record have and the copy in ``../shared`` (an
#: older snapshot) lacks, which the broker writes and reads. Each entry is the field in Kafka's JSON
#: form and the field it follows; a definition that already has a field of that name is left alone,
#: so a newer copy of the definitions makes the entry a no-op.
NEWER_INTERNAL_FIELDS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    # KIP-1101: the hash of the subscribed topics' metadata replaces ConsumerGroupPartitionMetadata.
    "ConsumerGroupMetadataValue": [
        ("Epoch", {"name": "MetadataHash", "type": "int64", "versions": "0+", "default": 0,
                   "taggedVersions": "0+", "tag": 0}),
    ],
    # KIP-848 topic ids in offset commits: the committed partition's topic id.
    "OffsetCommitValue": [
        ("expireTimestamp", {"name": "topicId", "type": "uuid", "versions": "4+",
                             "taggedVersions": "4+", "tag": 0}),
    ],
    # KIP-939: the epoch that goes with NextProducerId.
    "TransactionLogValue": [
        (
            "NextProducerId",
            {"name": "NextProducerEpoch", "type": "int16", "default": -1, "taggedVersions": "1+", "tag": 3},
        ),
    ],
}


#: Internal records Kafka 4.1 writes that the copy in ``../shared`` lacks, in Kafka's JSON form, by
#: the folder they belong to. A definition of the same name in ``../shared`` wins, so a newer copy
#: of the definitions makes the entry a no-op. A key's version is its record type.
NEWER_INTERNAL_RECORDS: dict[str, list[dict[str, Any]]] = {
    "group": [
        # KIP-848: a regular expression subscription resolved to topic names (record type 16).
        {
            "type": "data",
            "name": "ConsumerGroupRegularExpressionKey",
            "validVersions": "16",
            "flexibleVersions": "none",
            "fields": [
                {"name": "GroupId", "type": "string", "versions": "16"},
                {"name": "RegularExpression", "type": "string", "versions": "16"},
            ],
        },
        {
            "type": "data",
            "name": "ConsumerGroupRegularExpressionValue",
            "validVersions": "0",
            "flexibleVersions": "0+",
            "fields": [
                {"name": "Topics", "type": "[]string", "versions": "0+"},
                {"name": "Version", "type": "int64", "versions": "0+"},
                {"name": "Timestamp", "type": "int64", "versions": "0+"},
            ],
        },
    ],
}


def add_newer_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with the fields of ``NEWER_INTERNAL_FIELDS`` it lacks, each after its predecessor."""
    fields = list(spec.get("fields", []))
    for after, field in NEWER_INTERNAL_FIELDS.get(spec["name"], []):
        names = [f["name"] for f in fields]
        if field["name"] in names:
            continue
        if after not in names:
            raise SystemExit(f"{spec['name']}: no field {after} to add {field['name']} after")
        fields.insert(names.index(after) + 1, field)
    return {**spec, "fields": fields}


def load_internal_records(source: Path) -> list[dict[str, Any]]:
    """The record definitions of ``internal/<folder>`` for each of ``INTERNAL_FOLDERS``, in order."""
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for folder in INTERNAL_FOLDERS:
        directory = source / "internal" / folder
        if not directory.is_dir():
            raise SystemExit(f"{directory} is missing: the internal record definitions are required")
        specs = [
            (str(path), json.loads(strip_comments(path.read_text())))
            for path in sorted(directory.glob("*.json"))
        ]
        shared = {spec["name"] for _, spec in specs}
        specs += [
            (f"NEWER_INTERNAL_RECORDS[{folder!r}]", spec)
            for spec in NEWER_INTERNAL_RECORDS.get(folder, [])
            if spec["name"] not in shared
        ]
        for origin, spec in sorted(specs, key=lambda item: item[1]["name"]):
            spec = add_newer_fields(spec)
            if spec["name"] in seen:
                raise SystemExit(f"{origin}: a second internal record named {spec['name']}")
            seen.add(spec["name"])
            records.append(Generator(spec).message())
    return records


def load_errors(source: Path) -> list[tuple[int, str, str, bool]]:
    rows = []
    lines = (source / "errors.tsv").read_text().splitlines()
    for line in lines[1:]:
        if not line.strip():
            continue
        code, name, java_class, retriable = ([*line.split("\t"), "", "", "", ""])[:4]
        rows.append((int(code), name, java_class, retriable.strip() == "yes"))
    return rows


def api_release(source: Path) -> dict[str, str]:
    """Which Kafka release each API's definition comes from (to pick between reused keys)."""
    out = {}
    for line in (source / "api_keys.tsv").read_text().splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) >= 5:
            out[cols[1]] = cols[4]
    return out


HEADER = '''"""Generated by tools/generate_protocol.py from Kafka's message definitions. Do not edit."""
# ruff: noqa
'''


def write_schemas(
    messages: list[dict[str, Any]], releases: dict[str, str], path: Path = OUT_SCHEMAS
) -> None:
    # Key 74 was reused by Kafka 4 (ListConfigResources replaced ListClientMetricsResources);
    # mark the definitions that are current so the codec's api-key table picks those.
    for m in messages:
        base = m["name"].removesuffix("Request").removesuffix("Response")
        m["current"] = not releases.get(base, "").endswith("-dev")
    body = pprint.pformat(messages, width=120, sort_dicts=False)
    path.write_text(f"{HEADER}\nfrom typing import Any\n\nMESSAGES: list[dict[str, Any]] = {body}\n")


def error_class_name(error_name: str) -> str:
    """``NOT_LEADER_OR_FOLLOWER`` -> ``NotLeaderOrFollowerError`` (``..._EXCEPTION`` loses the suffix)."""
    name = "".join(part.capitalize() for part in error_name.lower().split("_"))
    name = name.removesuffix("Exception").removesuffix("Error")
    return name + "Error"


#: Generated classes that ``sdk.protocol.errors`` extends under the same name (the codec's
#: UnsupportedVersionError carries the request's key and version); the star imports of this module
#: must not bring in the plain class, or a type checker sees two definitions of one name.
EXTENDED_IN_ERRORS_MODULE = {"UnsupportedVersionError"}


def write_errors(rows: list[tuple[int, str, str, bool]], path: Path = OUT_ERRORS) -> None:
    """The table, the ``ErrorCode`` enum and one exception class per code, written out as static
    definitions so that type checkers and editors see every class (``sdk.protocol.errors``
    re-exports them)."""
    body = pprint.pformat(rows, width=120)
    out = [
        HEADER,
        "from __future__ import annotations\n",
        "import enum\n",
        "from sdk.protocol._error_base import KafkaError\n",
        "# (code, name, java exception class, retriable)",
        f"ERRORS = {body}\n\n",
        "class ErrorCode(enum.IntEnum):",
        '    """Every Kafka error code by its protocol name: ``ErrorCode.NOT_LEADER_OR_FOLLOWER == 6``."""\n',
    ]
    out += [f"    {name} = {code}" for code, name, _, _ in rows]
    classes: dict[int, str] = {}
    for code, name, java_class, retriable in rows:
        if code == 0:
            continue
        class_name = error_class_name(name)
        if class_name in classes.values():
            raise SystemExit(f"errors.tsv: two codes map to the class name {class_name}")
        classes[code] = class_name
        java = f" Java: ``{java_class}``." if java_class else ""
        kind = "Retriable" if retriable else "Not retriable"
        out += [
            "\n",
            f"class {class_name}(KafkaError):",
            f'    """Kafka error {code} ({name}). {kind}.{java}"""\n',
            f"    code = {code}",
            f"    name = {name!r}",
            f"    retriable = {retriable}",
            f"    java_class = {java_class!r}",
        ]
    out += ["\n", "#: The class for each error code (``sdk.protocol.errors.error_for_code`` reads it)."]
    out.append("ERROR_CLASSES: dict[int, type[KafkaError]] = {")
    out += [f"    {code}: {class_name}," for code, class_name in classes.items()]
    out += ["}\n", "__all__ = ["]
    exported = sorted(set(classes.values()) - EXTENDED_IN_ERRORS_MODULE)
    out += [f"    {name!r}," for name in ["ErrorCode", *exported]]
    out.append("]\n")
    path.write_text("\n".join(out))


#: Python types of Kafka's primitive field types, as the decoder hands them back.
STUB_TYPES = {
    "bool": "bool", "int8": "int", "int16": "int", "uint16": "int", "int32": "int", "uint32": "int",
    "int64": "int", "float64": "float", "string": "str", "bytes": "bytes", "uuid": "_uuid.UUID",
    # Records stay a zero-copy view of the request buffer when decoded.
    "records": "memoryview | bytes",
}


class StubWriter:
    """Writes the type stub of the message classes that ``sdk.protocol.messages`` builds at import.

    The classes are made from the tables at run time, so a type checker cannot see their fields;
    this stub declares the same classes with the same nesting. It walks the tables exactly as
    ``messages._build_struct`` does (a struct seen before with the same definition is the same
    class; every struct of a message is also an attribute of the top-level class), so that an
    annotation like ``JoinGroupRequest.JoinGroupRequestProtocol`` names the class the runtime has.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []

    def field_type(self, f: dict[str, Any], struct_qualname: str | None) -> str:
        base = struct_qualname if struct_qualname is not None else STUB_TYPES[f["type"]]
        text = f"list[{base}]" if f["array"] else base
        if f.get("nullable") or (f["type"] == "records" and not f["array"]):
            text += " | None"
        return text

    def struct(
        self,
        name: str,
        qualname: str,
        fields: list[dict[str, Any]],
        registry: dict[str, tuple[list[dict[str, Any]], str]],
        indent: str,
        extra: tuple[str, ...] = (),
    ) -> set[str]:
        """Writes the class; returns the names of the structs that are attributes of it."""
        inner = indent + "    "
        self.lines.append(f"{indent}class {name}(Message):")
        self.lines += [inner + line for line in extra]
        children: dict[str, str] = {}
        typed: list[tuple[str, str]] = []
        for f in fields:
            struct_qualname = None
            if "fields" in f:
                child = f["struct"]
                known = registry.get(child)
                if known is not None and known[0] == f["fields"]:
                    struct_qualname = known[1]
                else:
                    struct_qualname = f"{qualname}.{child}"
                    self.struct(child, struct_qualname, f["fields"], registry, inner)
                    registry.setdefault(child, (f["fields"], struct_qualname))
                children[child] = struct_qualname
            typed.append((f["name"], self.field_type(f, struct_qualname)))
        # A struct this class shares with another part of the message is an alias here.
        for child, child_qualname in children.items():
            if child_qualname != f"{qualname}.{child}":
                self.lines.append(f"{inner}{child}: TypeAlias = {child_qualname}")
        self.lines += [f"{inner}{field}: {annotation}" for field, annotation in typed]
        params = ", ".join(f"{field}: {annotation} = ..." for field, annotation in typed)
        signature = f"self, *, {params}" if params else "self"
        self.lines.append(f"{inner}def __init__({signature}) -> None: ...")
        return set(children)

    def message(self, m: dict[str, Any]) -> None:
        registry: dict[str, tuple[list[dict[str, Any]], str]] = {}
        api_key = "int" if m["api_key"] is not None else "None"
        flexible = "int" if m["flexible"] else "None"
        header = (
            f"API_KEY: ClassVar[{api_key}]",
            "VALID_VERSIONS: ClassVar[tuple[int, int]]",
            f"FLEXIBLE_FROM: ClassVar[{flexible}]",
        )
        top_level = self.struct(m["name"], m["name"], m["fields"], registry, "", header)
        # Structs nested deeper are attributes of the top-level class too (``messages`` does the same);
        # the aliases come last, as mypy resolves a class-level alias only after the class it names.
        self.lines += [
            f"    {child}: TypeAlias = {qualname}"
            for child, (_, qualname) in registry.items()
            if child not in top_level
        ]


def write_message_stubs(messages: list[dict[str, Any]], path: Path = OUT_STUBS) -> None:
    """The type stub ``sdk.protocol.messages`` re-exports for type checkers (see ``StubWriter``)."""
    writer = StubWriter()
    for m in messages:
        writer.lines.append("")
        writer.message(m)
    header = [
        '"""Generated by tools/generate_protocol.py from Kafka\'s message definitions. Do not edit.',
        "",
        "Type declarations of the message classes ``sdk.protocol.messages`` builds at import time.",
        '"""',
        "# ruff: noqa",
        "",
        "import uuid as _uuid",
        "from typing import ClassVar, TypeAlias",
        "",
        "from sdk.protocol.messages import Message",
        "",
        "__all__ = [",
        *[f"    {m['name']!r}," for m in messages],
        "]",
    ]
    path.write_text("\n".join(header + writer.lines) + "\n")


INTERNAL_RECORDS_HEADER = '''\
"""Generated by tools/generate_protocol.py from Kafka's internal record definitions. Do not edit.

The keys and values of the records Kafka keeps in its own logs: ``__consumer_offsets``
(OffsetCommitKey/Value, GroupMetadataKey/Value and the KIP-848 and share-group records),
``__transaction_state`` (TransactionLogKey/Value) and the KRaft metadata log (TopicRecord,
PartitionRecord, ...; ``API_KEY`` is the record type). Each is a message class like those of
``sdk.protocol.messages``, built from the table below at import, so ``sdk.protocol.codec`` encodes
and decodes it; ``internal_records.pyi`` declares the classes and their typed fields for type
checkers. A ``__consumer_offsets`` or ``__transaction_state`` key or value is its int16 version
followed by ``encode(record, version)``.
"""
# ruff: noqa
'''

INTERNAL_RECORDS_BUILDER = '''
#: Every record class by name.
RECORD_CLASSES: dict[str, type[Message]] = {}
#: The metadata log's record classes by record type.
METADATA_RECORD_TYPES: dict[int, type[Message]] = {}

for _table in RECORDS:
    _registry: dict[str, tuple[list[dict[str, Any]], type[Message]]] = {}
    _cls = _build_struct(_table["name"], _table["name"], _table["fields"], _registry)
    for _child_name, (_, _child) in _registry.items():
        if not hasattr(_cls, _child_name):
            setattr(_cls, _child_name, _child)
    _cls.API_KEY = _table["api_key"]
    _cls.KIND = _table["kind"]
    _cls.VALID_VERSIONS = _table["valid"]
    _cls.FLEXIBLE_FROM = _table["flexible"][0] if _table["flexible"] else None
    RECORD_CLASSES[_cls.NAME] = _cls
    globals()[_cls.NAME] = _cls
    if _table["kind"] == "metadata":
        METADATA_RECORD_TYPES[_table["api_key"]] = _cls
'''


def write_internal_records(records: list[dict[str, Any]], path: Path, stub_path: Path) -> None:
    """The record tables with the loop that builds their classes, and the stub that types them."""
    body = pprint.pformat(records, width=120, sort_dicts=False)
    path.write_text(
        f"{INTERNAL_RECORDS_HEADER}\nfrom typing import Any\n\n"
        "from sdk.protocol.messages import Message, _build_struct\n\n"
        f"RECORDS: list[dict[str, Any]] = {body}\n{INTERNAL_RECORDS_BUILDER}"
    )
    writer = StubWriter()
    for record in records:
        writer.lines.append("")
        writer.message(record)
    names = ["METADATA_RECORD_TYPES", "RECORD_CLASSES", *(r["name"] for r in records)]
    header = [
        '"""Generated by tools/generate_protocol.py from Kafka\'s internal record definitions. Do not edit.',
        "",
        "Type declarations of the record classes ``internal_records.py`` builds at import time.",
        '"""',
        "# ruff: noqa",
        "",
        "import uuid as _uuid",
        "from typing import ClassVar, TypeAlias",
        "",
        "from sdk.protocol.messages import Message",
        "",
        "__all__ = [",
        *[f"    {name!r}," for name in names],
        "]",
        "",
        "RECORD_CLASSES: dict[str, type[Message]]",
        "METADATA_RECORD_TYPES: dict[int, type[Message]]",
    ]
    stub_path.write_text("\n".join(header + writer.lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder with message/*.json and errors.tsv")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="one folder to write every generated file into (default: sdk/protocol for the protocol "
        "and reference_broker for the internal records); a scratch folder lets a test compare a "
        "fresh generation with the committed files",
    )
    args = parser.parse_args(argv)
    out_dir: Path = args.out_dir or OUT_DIR
    internal_dir: Path = args.out_dir or INTERNAL_OUT_DIR
    messages = load_messages(args.source)
    records = load_internal_records(args.source)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_schemas(messages, api_release(args.source), out_dir / SCHEMAS_FILE)
    write_errors(load_errors(args.source), out_dir / ERRORS_FILE)
    write_message_stubs(messages, out_dir / STUBS_FILE)
    write_internal_records(records, internal_dir / INTERNAL_RECORDS_FILE, internal_dir / INTERNAL_STUBS_FILE)
    print(f"wrote {len(messages)} message definitions to {out_dir / SCHEMAS_FILE}")
    print(f"wrote errors to {out_dir / ERRORS_FILE}")
    print(f"wrote message type stubs to {out_dir / STUBS_FILE}")
    print(f"wrote {len(records)} internal record definitions to {internal_dir / INTERNAL_RECORDS_FILE}")
    print(f"wrote internal record type stubs to {internal_dir / INTERNAL_STUBS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

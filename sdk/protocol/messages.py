"""Message classes, one per Kafka request, response, header and data structure.

The classes are made at import time from the generated tables (``_generated_schemas``) rather
than written out, so the tables stay the single definition of every message and a newer Kafka is
one re-generation away. Every class has attribute access, keyword construction with Kafka's
defaults, value equality and a readable ``repr``; nested structs hang off their parent class
(``ProduceRequest.TopicProduceData``) and off the top-level message class.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, cast

from sdk.protocol._generated_schemas import MESSAGES

if TYPE_CHECKING:
    # The classes below are made at run time; the generated stub declares each of them, its
    # nested structs and their typed fields for type checkers and editors.
    from sdk.protocol._generated_messages import *  # noqa: F403

OPEN_END = 0x7FFF
ZERO_UUID = uuid.UUID(int=0)
_MISSING: Any = object()


class FieldSpec:
    """One field of a struct, with the version ranges that decide how it is written."""

    __slots__ = (
        "array", "default", "flexible_override", "has_flexible_override", "name", "nullable",
        "struct", "tag", "tagged", "type", "versions",
    )

    def __init__(self, table: dict[str, Any], struct: type[Message] | None):
        self.name: str = table["name"]
        self.type: str = table["type"]
        self.array: bool = table["array"]
        self.versions: tuple[int, int] | None = table["versions"]
        self.nullable: tuple[int, int] | None = table.get("nullable")
        self.tag: int | None = table.get("tag")
        self.tagged: tuple[int, int] | None = table.get("tagged")
        self.has_flexible_override = "flexible" in table
        self.flexible_override: tuple[int, int] | None = table.get("flexible")
        self.struct = struct
        self.default = table["default"]

    def present_in(self, version: int) -> bool:
        return self.versions is not None and self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]

    def tagged_in(self, version: int) -> bool:
        return self.tagged is not None and self.tagged[0] <= version <= self.tagged[1]

    def flexible_in(self, version: int, message_flexible: bool) -> bool:
        """Compact encoding for this field; a field may opt out (the header's ClientId)."""
        if not self.has_flexible_override:
            return message_flexible
        r = self.flexible_override
        return r is not None and r[0] <= version <= r[1]

    def make_default(self) -> Any:
        """A fresh default value (never a shared mutable one)."""
        d = self.default
        if self.array:
            return [] if d == "[]" else d
        if self.struct is not None:
            return self.struct() if d == "struct" else d
        if self.type == "uuid":
            return ZERO_UUID if d in ("uuid0", "") else uuid.UUID(str(d))
        if self.type == "bytes" and d == "":
            return b""
        return d

    def is_default(self, value: Any) -> bool:
        d = self.make_default()
        return value == d


class Message:
    """Base of every generated message and struct class."""

    __slots__ = ("unknown_tags",)
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()
    NAME: ClassVar[str] = ""
    API_KEY: ClassVar[int | None] = None
    KIND: ClassVar[str] = "struct"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_FROM: ClassVar[int | None] = None
    unknown_tags: dict[int, bytes] | None

    if TYPE_CHECKING:
        # Each class gets a compiled keyword-only constructor (``_make_init``); code that builds
        # messages of a class it holds as ``type[Message]`` passes the fields as keywords.
        def __init__(self, **fields: Any) -> None: ...

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        # Every field at once, as one tuple comparison (the encoder compares tagged structs with
        # their defaults on every response, so this is on the hot path).
        cls = type(self)
        fields_of = cls.__dict__.get("_fields_of")
        if fields_of is None:
            fields_of = _fields_getter(cls)
            cls._fields_of = fields_of  # type: ignore[attr-defined]  # a per-class cache, made on first use
        return bool(fields_of(self) == fields_of(other))

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value: unhashable

    def __repr__(self) -> str:
        parts = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.FIELDS)
        return f"{type(self).__qualname__}({parts})"

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for f in self.FIELDS:
            yield f.name, getattr(self, f.name)

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists, for logging and tests."""

        def convert(v: Any) -> Any:
            if isinstance(v, Message):
                return v.to_dict()
            if isinstance(v, list):
                return [convert(x) for x in v]
            if isinstance(v, memoryview):
                return bytes(v)
            return v

        return {f.name: convert(getattr(self, f.name)) for f in self.FIELDS}


def _fields_getter(cls: type[Message]) -> Callable[[Message], tuple[Any, ...]]:
    """A function returning the tuple of ``cls``'s field values (for ``Message.__eq__``)."""
    names = [f.name for f in cls.FIELDS]
    if not names:
        return lambda _obj: ()
    if len(names) == 1:
        single = operator.attrgetter(names[0])
        return lambda obj: (single(obj),)
    return operator.attrgetter(*names)


def _make_init(cls: type[Message]) -> None:
    """Give the class a keyword-only ``__init__`` compiled once, for cheap construction."""
    params, body = [], []
    namespace: dict[str, Any] = {"_MISSING": _MISSING}
    for i, f in enumerate(cls.FIELDS):
        default = f.make_default()
        if isinstance(default, (int, float, str, bool, bytes, type(None), uuid.UUID)):
            namespace[f"_d{i}"] = default
            params.append(f"{f.name}=_d{i}")
            body.append(f"    self.{f.name} = {f.name}")
        else:
            namespace[f"_f{i}"] = f
            params.append(f"{f.name}=_MISSING")
            body.append(
                f"    self.{f.name} = _f{i}.make_default() if {f.name} is _MISSING else {f.name}"
            )
    body.append("    self.unknown_tags = None")
    signature = "self, *, " + ", ".join(params) if params else "self"
    src = f"def __init__({signature}):\n" + "\n".join(body) + "\n"
    exec(src, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]  # the compiled keyword constructor, by design


def _build_struct(
    name: str,
    qualname: str,
    fields: list[dict[str, Any]],
    registry: dict[str, tuple[list[dict[str, Any]], type[Message]]],
) -> type[Message]:
    """One class per struct name and definition within a message.

    Kafka's common structs are referenced from several fields (``LeaderChangeMessage.Voters`` and
    ``GrantingVoters`` are both ``Voter``); they must share one class, or a value built with
    ``Parent.Voter`` would not compare equal to the one the decoder makes for the other field.
    """
    specs = []
    children: dict[str, type[Message]] = {}
    for table in fields:
        struct = None
        if "fields" in table:
            child_name = table["struct"]
            known = registry.get(child_name)
            if known is not None and known[0] == table["fields"]:
                struct = known[1]
            else:
                struct = _build_struct(
                    child_name, f"{qualname}.{child_name}", table["fields"], registry
                )
                registry.setdefault(child_name, (table["fields"], struct))
            children[child_name] = struct
        specs.append(FieldSpec(table, struct))
    namespace = {"__slots__": tuple(f.name for f in specs), "__module__": __name__}
    cls = cast(type[Message], type(name, (Message,), namespace))  # a class made from the table
    cls.__qualname__ = qualname
    cls.FIELDS = tuple(specs)
    cls.NAME = name
    for child_name, child in children.items():
        setattr(cls, child_name, child)
    _make_init(cls)
    return cls


MESSAGE_CLASSES: dict[str, type[Message]] = {}
REQUESTS: dict[int, type[Message]] = {}
RESPONSES: dict[int, type[Message]] = {}

for _table in MESSAGES:
    _registry: dict[str, tuple[list[dict[str, Any]], type[Message]]] = {}
    _cls = _build_struct(_table["name"], _table["name"], _table["fields"], _registry)
    for _child_name, (_, _child) in _registry.items():
        if not hasattr(_cls, _child_name):
            setattr(_cls, _child_name, _child)
    _cls.API_KEY = _table["api_key"]
    _cls.KIND = _table["kind"]
    _cls.VALID_VERSIONS = _table["valid"] or (0, 0)
    _cls.FLEXIBLE_FROM = _table["flexible"][0] if _table["flexible"] else None
    MESSAGE_CLASSES[_cls.NAME] = _cls
    globals()[_cls.NAME] = _cls
    if _table["kind"] in ("request", "response"):
        _target = REQUESTS if _table["kind"] == "request" else RESPONSES
        if _table["current"] or _table["api_key"] not in _target:
            _target[_table["api_key"]] = _cls

# Headers take version 0 too (no client id), which Kafka's definition leaves implicit.
for _header in ("RequestHeader", "ResponseHeader"):
    MESSAGE_CLASSES[_header].VALID_VERSIONS = (0, MESSAGE_CLASSES[_header].VALID_VERSIONS[1])


def __getattr__(name: str) -> type[Message]:
    try:
        return MESSAGE_CLASSES[name]
    except KeyError:
        raise AttributeError(f"no Kafka message named {name!r}") from None

"""Encode and decode any Kafka message in any version, from the generated tables.

For each (struct, version) pair the first use compiles a pair of plain Python functions (their
source is built from the field table and ``exec``-ed once). That keeps the definitions
table-driven while the hot paths (Produce, Fetch) run straight-line code: consecutive fixed-width
fields share one ``struct`` call, and ``records`` fields come back as views into the request
buffer, never copied.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

from sdk.protocol import primitives as p
from sdk.protocol.errors import DecodeError, EncodeError, UnsupportedVersionError
from sdk.protocol.messages import (
    REQUESTS,
    RESPONSES,
    ApiVersionsRequest,
    ControlledShutdownRequest,
    FieldSpec,
    Message,
    RequestHeader,
    ResponseHeader,
)

Decoder = Callable[[Any, int, int], tuple[Message, int]]
Encoder = Callable[[Message, bytearray], None]

_codecs: dict[tuple[type[Message], int, bool], tuple[Encoder, Decoder]] = {}
MessageT = TypeVar("MessageT", bound=Message)
API_VERSIONS_KEY = ApiVersionsRequest.API_KEY
_HEAD = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_IMMUTABLE = (int, float, str, bytes, type(None), uuid.UUID)


def _compile(
    cls: type[Message], version: int, flexible: bool, tag_section: bool = True
) -> tuple[Encoder, Decoder]:
    """Build the encoder and decoder source for one struct at one version.

    ``tag_section=False`` is for a lone tagged value, which is written in the flexible encoding
    but without a tag section of its own.
    """
    ns: dict[str, Any] = {"p": p, "_cls": cls, "_new": object.__new__, "DecodeError": DecodeError}
    dec = ["def decode(buf, pos, end):", "    o = _new(_cls)"]
    enc = ["def encode(o, out):"]
    group: list[FieldSpec] = []
    tagged: list[FieldSpec] = []

    def flush_group() -> None:
        if not group:
            return
        fmt = ">" + "".join(p.FIXED_WIDTH[f.type][0] for f in group)
        size = struct.calcsize(fmt)
        k = len(ns)
        s = struct.Struct(fmt)
        ns[f"_unpack{k}"], ns[f"_pack{k}"] = s.unpack_from, s.pack
        names = ", ".join(f"o.{f.name}" for f in group)
        label = "/".join(f.name for f in group)
        dec.append(f"    if pos + {size} > end: p.short(pos, {label!r})")
        dec.append(f"    {names}{',' if len(group) == 1 else ''} = _unpack{k}(buf, pos)")
        dec.append(f"    pos += {size}")
        enc.append(f"    out += _pack{k}({names})")
        group.clear()

    def set_default(i: int, f: FieldSpec) -> None:
        default = f.make_default()
        if isinstance(default, _IMMUTABLE):  # shared safely; saves a call per decoded struct
            ns[f"_c{i}"] = default
            dec.append(f"    o.{f.name} = _c{i}")
        else:
            ns[f"_f{i}"] = f
            dec.append(f"    o.{f.name} = _f{i}.make_default()")

    for i, f in enumerate(cls.FIELDS):
        if not f.present_in(version):
            set_default(i, f)
            continue
        if flexible and f.tagged_in(version):
            set_default(i, f)
            tagged.append(f)
            continue
        if f.type in p.FIXED_WIDTH and not f.array:
            group.append(f)
            continue
        flush_group()
        d, e = _field_code(f, i, version, flexible, ns)
        if cls.KIND == "response" and f.type == "bytes" and not f.array and not f.nullable_in(version):
            # A null where Kafka allows none is read as empty, as librdkafka reads it: its mock
            # cluster answers a failed SyncGroup with a null assignment, and refusing the answer
            # would drop the connection instead of showing the error code beside it.
            compact = f.flexible_in(version, flexible)
            d = [
                f"    x, pos = p.read_bytes(buf, pos, end, True, {compact}, False)",
                f"    o.{f.name} = b'' if x is None else x",
            ]
        dec.extend(d)
        enc.extend(e)
    flush_group()

    if flexible and tag_section:
        ns["_tagged"] = {f.tag: f for f in tagged}
        ns["_tagged_list"] = sorted(tagged, key=lambda f: f.tag or 0)
        ns["_version"] = version
        # Nearly every tag section is empty (a single 0): handle that inline, without a call.
        dec.append("    if pos < end and buf[pos] == 0:")
        dec.append("        pos += 1")
        dec.append("        o.unknown_tags = None")
        dec.append("    else:")
        dec.append("        pos = _read_tags(buf, pos, end, o, _tagged, _version)")
        if tagged:
            # Tagged fields nearly always hold their defaults: compare them inline (what
            # FieldSpec.is_default does, against defaults made once here and never handed out)
            # and write the empty section, instead of a call that builds a default per field.
            checks = ["not o.unknown_tags"]
            for f in tagged:
                ns[f"_t{f.tag}"] = _tagged_default(f, version)
                checks.append(f"o.{f.name} == _t{f.tag}")
            enc.append(f"    if {' and '.join(checks)}: out.append(0)")
            enc.append("    else: _write_tags(out, o, _tagged_list, _version)")
        else:
            enc.append("    if o.unknown_tags: _write_tags(out, o, _tagged_list, _version)")
            enc.append("    else: out.append(0)")
        ns["_read_tags"], ns["_write_tags"] = _read_tags, _write_tags
    else:
        dec.append("    o.unknown_tags = None")
    dec.append("    return o, pos")
    if len(enc) == 1:
        enc.append("    pass")
    exec("\n".join(dec), ns)
    exec("\n".join(enc), ns)
    return ns["encode"], ns["decode"]


def _field_code(
    f: FieldSpec, i: int, version: int, flexible: bool, ns: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """Decoder and encoder lines for one variable-width field."""
    compact = f.flexible_in(version, flexible)
    nullable = f.nullable_in(version)
    name = f.name
    if f.array:
        d = [
            f"    n, pos = p.read_array_length(buf, pos, end, {compact}, {nullable})",
            f"    if n < 0: o.{name} = None",
        ]
        e = [
            f"    v = o.{name}",
            f"    if p.write_array_length(out, v, {nullable}, {compact}):",
        ]
        if f.type in p.FIXED_WIDTH:
            fmt, size = p.FIXED_WIDTH[f.type]
            d.append(f"    else: o.{name}, pos = p.read_fixed_array(buf, pos, end, n, {fmt!r}, {size})")
            e.append(f"        out += struct.pack('>%d{fmt}' % len(v), *v)")
            ns["struct"] = struct
            return d, e
        item_dec, item_enc = _item_code(f, i, version, flexible, ns, compact, False)
        d += [
            "    else:",
            "        lst = []",
            "        for _ in range(n):",
            f"            {item_dec}",
            "            lst.append(x)",
            f"        o.{name} = lst",
        ]
        e += ["        for x in v:", f"            {item_enc}"]
        return d, e
    item_dec, item_enc = _item_code(f, i, version, flexible, ns, compact, nullable)
    return [f"    {item_dec}", f"    o.{name} = x"], [f"    x = o.{name}", f"    {item_enc}"]


def _item_code(
    f: FieldSpec, i: int, version: int, flexible: bool, ns: dict[str, Any], compact: bool,
    nullable: bool,
) -> tuple[str, str]:
    """One decode statement (binding ``x``) and one encode statement (writing ``x``)."""
    t = f.type
    if t == "string":
        reader = "read_compact_string" if compact else "read_string"
        return (
            f"x, pos = p.{reader}(buf, pos, end, {nullable})",
            f"p.write_string(out, x, {nullable}, {compact})",
        )
    if t in ("bytes", "records"):
        zero_copy = t == "records"
        return (
            f"x, pos = p.read_bytes(buf, pos, end, {nullable}, {compact}, {zero_copy})",
            f"p.write_bytes(out, x, {nullable}, {compact})",
        )
    if t == "uuid":
        return "x, pos = p.read_uuid(buf, pos, end)", "p.write_uuid(out, x)"
    if t in p.FIXED_WIDTH:
        fmt, size = p.FIXED_WIDTH[t]
        s = struct.Struct(">" + fmt)
        ns[f"_u{i}"], ns[f"_p{i}"] = s.unpack_from, s.pack
        return (
            f"(x,) = _u{i}(buf, pos) if pos + {size} <= end else p.short(pos, {f.name!r}); "
            f"pos += {size}",
            f"out += _p{i}(x)",
        )
    if f.struct is not None:
        ns[f"_sub{i}"] = _lazy(f.struct, version, flexible)
        if nullable:
            return (
                f"present, pos = p.read_nullable_struct_marker(buf, pos, end)\n"
                f"    if present: x, pos = _sub{i}.decode(buf, pos, end)\n"
                f"    else: x = None",
                f"if x is None: out.append(0xff)\n    else: out.append(1); _sub{i}.encode(x, out)",
            )
        return f"x, pos = _sub{i}.decode(buf, pos, end)", f"_sub{i}.encode(x, out)"
    raise EncodeError(f"unsupported field type {t!r}")


class _lazy:
    """A nested struct's codec, compiled on first use (structs can be large and rarely used)."""

    __slots__ = ("_key", "decode", "encode")

    def __init__(self, cls: type[Message], version: int, flexible: bool):
        self._key = (cls, version, flexible)
        self.decode: Decoder = self._first_decode
        self.encode: Encoder = self._first_encode

    def _load(self) -> None:
        self.encode, self.decode = _codec(*self._key)

    def _first_decode(self, buf: Any, pos: int, end: int) -> tuple[Message, int]:
        self._load()
        return self.decode(buf, pos, end)

    def _first_encode(self, obj: Message, out: bytearray) -> None:
        self._load()
        self.encode(obj, out)


def _read_tags(
    buf: Any, pos: int, end: int, obj: Message, known: dict[int, FieldSpec], version: int
) -> int:
    """The tagged-field section: known tags decode into fields, unknown ones are kept raw."""
    count, pos = p.read_uvarint(buf, pos, end)
    unknown: dict[int, bytes] | None = None
    last = -1
    for _ in range(count):
        tag_pos = pos
        tag, pos = p.read_uvarint(buf, pos, end)
        size, pos = p.read_uvarint(buf, pos, end)
        if tag <= last:
            raise DecodeError(f"tagged fields out of order (tag {tag} after {last})", tag_pos)
        last = tag
        if pos + size > end:
            raise DecodeError(f"tagged field {tag} of {size} bytes runs past the end", tag_pos)
        f = known.get(tag)
        if f is None:
            if unknown is None:
                unknown = {}
            unknown[tag] = bytes(buf[pos : pos + size])
        else:
            value = _decode_tagged_value(f, buf, pos, pos + size, version)
            setattr(obj, f.name, value)
        pos += size
    obj.unknown_tags = unknown
    return pos


def _tagged_default(f: FieldSpec, version: int) -> Any:
    """The value a tagged field is left out for. Kafka's rule for a nullable struct: it is left
    out when it is the all-default struct, and null is always written (as a presence marker)."""
    if f.struct is not None and f.nullable_in(version):
        return f.struct()
    return f.make_default()


def _nullable_struct_tag_codec(
    f: FieldSpec, version: int, holder: type[Message]
) -> tuple[Encoder, Decoder]:
    """A tagged nullable struct's value: an unsigned varint presence marker (0 null, any other
    value present) and, when present, the struct. Outside tagged fields the marker is an int8."""
    struct = f.struct
    assert struct is not None
    name = f.name

    def encode_value(obj: Message, out: bytearray) -> None:
        value = getattr(obj, name)
        if value is None:
            out.append(0)
        else:
            out.append(1)
            _codec(struct, version, True)[0](value, out)

    def decode_value(buf: Any, pos: int, end: int) -> tuple[Message, int]:
        obj = holder.__new__(holder)
        present, pos = p.read_uvarint(buf, pos, end)
        value = None
        if present:
            value, pos = _codec(struct, version, True)[1](buf, pos, end)
        setattr(obj, name, value)
        return obj, pos

    return encode_value, decode_value


def _tagged_value_codec(f: FieldSpec, version: int) -> tuple[Encoder, Decoder, type[Message]]:
    """Codec for one tagged field's value: a one-field struct with no tag section."""
    key = (f, version)
    hit = _tag_codecs.get(key)
    if hit is None and f.struct is not None and f.nullable_in(version):
        holder = cast(type[Message], type("TaggedValue", (Message,), {"__slots__": (f.name,)}))
        holder.NAME = f"{f.name} (tagged)"
        enc, dec = _nullable_struct_tag_codec(f, version, holder)
        hit = _tag_codecs[key] = (enc, dec, holder)
    if hit is None:
        holder = cast(type[Message], type("TaggedValue", (Message,), {"__slots__": (f.name,)}))
        plain = FieldSpec.__new__(FieldSpec)
        for slot in FieldSpec.__slots__:
            setattr(plain, slot, getattr(f, slot))
        plain.tagged = None
        holder.FIELDS = (plain,)
        holder.NAME = f"{f.name} (tagged)"
        enc, dec = _compile(holder, version, True, tag_section=False)
        hit = _tag_codecs[key] = (enc, dec, holder)
    return hit


_tag_codecs: dict[tuple[FieldSpec, int], tuple[Encoder, Decoder, type[Message]]] = {}


def _decode_tagged_value(f: FieldSpec, buf: Any, pos: int, end: int, version: int) -> Any:
    _, dec, _ = _tagged_value_codec(f, version)
    obj, _ = dec(buf, pos, end)
    return getattr(obj, f.name)


def _write_tags(out: bytearray, obj: Message, fields: list[FieldSpec], version: int) -> None:
    entries: list[tuple[int, bytes]] = []
    for f in fields:
        value = getattr(obj, f.name)
        if value == _tagged_default(f, version):
            continue
        enc, _, holder = _tagged_value_codec(f, version)
        h = holder.__new__(holder)
        setattr(h, f.name, value)
        tmp = bytearray()
        enc(h, tmp)
        entries.append((f.tag or 0, bytes(tmp)))
    if obj.unknown_tags:
        entries.extend(obj.unknown_tags.items())
    if not entries:
        out.append(0)
        return
    entries.sort()
    p.write_uvarint(out, len(entries))
    for tag, raw in entries:
        p.write_uvarint(out, tag)
        p.write_uvarint(out, len(raw))
        out += raw


def _codec(cls: type[Message], version: int, flexible: bool) -> tuple[Encoder, Decoder]:
    key = (cls, version, flexible)
    hit = _codecs.get(key)
    if hit is None:
        hit = _codecs[key] = _compile(cls, version, flexible)
    return hit


def _is_flexible(cls: type[Message], version: int) -> bool:
    return cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM


def _check_version(cls: type[Message], version: int) -> None:
    lo, hi = cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise UnsupportedVersionError(
            f"{cls.NAME} has no version {version} (valid {lo}-{hi})",
            api_key=cls.API_KEY,
            api_version=version,
        )


def encode_into(out: bytearray, msg: Message, version: int) -> None:
    """Append ``msg`` in ``version`` to ``out``."""
    cls = type(msg)
    _check_version(cls, version)
    enc, _ = _codec(cls, version, _is_flexible(cls, version))
    try:
        enc(msg, out)
    except EncodeError:
        raise
    except (struct.error, TypeError, AttributeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode {cls.NAME} v{version}: {exc}") from exc


def encode(msg: Message, version: int) -> bytes:
    """The wire bytes of a message body (no header, no size prefix)."""
    out = p.OutputBuffer()
    encode_into(out, msg, version)
    return out.getvalue()


def _view(data: bytes | bytearray | memoryview) -> memoryview:
    """A flat view of unsigned bytes, whatever buffer the caller holds.

    The readers index single bytes; a view of another format (an ``array('b')``, a cast view)
    would hand them signed or multi-byte items and lengths counted in items.
    """
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def decode(cls: type[MessageT], data: bytes | bytearray | memoryview, version: int) -> MessageT:
    """Decode a whole message body; ``records`` fields are views into ``data``."""
    msg, _ = decode_at(cls, _view(data), 0, version)
    return msg


def decode_at(cls: type[MessageT], buf: memoryview, pos: int, version: int) -> tuple[MessageT, int]:
    _check_version(cls, version)
    _, dec = _codec(cls, version, _is_flexible(cls, version))
    try:
        # The compiled decoder of ``cls`` makes instances of ``cls`` (``Decoder`` cannot say so).
        return cast(tuple[MessageT, int], dec(buf, pos, len(buf)))
    except DecodeError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError, TypeError) as exc:
        raise DecodeError(f"malformed {cls.NAME} v{version}: {exc}") from exc


def request_class(api_key: int) -> type[Message]:
    try:
        return REQUESTS[api_key]
    except KeyError:
        raise UnsupportedVersionError(f"unknown api key {api_key}", api_key=api_key) from None


def response_class(api_key: int) -> type[Message]:
    try:
        return RESPONSES[api_key]
    except KeyError:
        raise UnsupportedVersionError(f"unknown api key {api_key}", api_key=api_key) from None


def supported_versions(api_key: int) -> tuple[int, int]:
    return request_class(api_key).VALID_VERSIONS


def request_header_version(api_key: int, api_version: int) -> int:
    """Header v2 (tagged fields) for flexible request versions, v1 before."""
    if api_key == ControlledShutdownRequest.API_KEY and api_version == 0:  # v0 predates client ids
        return 0
    return 2 if _is_flexible(request_class(api_key), api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Header v1 (tagged fields) for flexible response versions, v0 before."""
    # KIP-511: ApiVersions responses keep header v0 so any client can read the version list.
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if _is_flexible(response_class(api_key), api_version) else 0


def encode_request(msg: Message, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Request header plus body, without the 4-byte size prefix."""
    api_key = type(msg).API_KEY
    if api_key is None or type(msg).KIND != "request":
        raise EncodeError(f"{type(msg).NAME} is not a request")
    header = RequestHeader(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out = p.OutputBuffer()
    encode_into(out, header, request_header_version(api_key, version))
    encode_into(out, msg, version)
    return out.getvalue()


def decode_request_header(data: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Parse a request header; unknown api keys or versions raise ``UnsupportedVersionError``.

    The key, version and correlation id are read first so that even a request this side cannot
    parse can be answered with the right correlation id.
    """
    buf = _view(data)
    return _decode_header(_plan_for(buf), buf)


def decode_request(data: bytes | bytearray | memoryview) -> tuple[RequestHeader, Message]:
    """Header and body of a request as the broker receives it (after the size prefix).

    The version checks and codec lookups for each (api key, version) are done once and
    remembered (``_RequestPlan``): the broker calls this for every request, and those steps cost
    as much as decoding a Produce request's few fields.
    """
    buf = _view(data)
    plan = _plan_for(buf)
    header, pos = _decode_header(plan, buf)
    try:
        body, _ = plan.decode_body(buf, pos, len(buf))
    except DecodeError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError, TypeError) as exc:
        raise DecodeError(f"malformed {plan.body_class.NAME} v{plan.version}: {exc}") from exc
    return header, body


class _RequestPlan(NamedTuple):
    """How to decode requests of one api key and version."""

    header_version: int
    decode_header: Decoder
    body_class: type[Message]
    version: int
    decode_body: Decoder


_request_plans: dict[tuple[int, int], _RequestPlan] = {}


def _plan_for(buf: memoryview) -> _RequestPlan:
    """The plan for the request in ``buf``; ``UnsupportedVersionError`` if there can be none."""
    if len(buf) < 8:
        raise DecodeError("request shorter than its header", 0)
    api_key, api_version, correlation_id = _HEAD.unpack_from(buf, 0)
    plan = _request_plans.get((api_key, api_version))
    if plan is not None:
        return plan
    cls = REQUESTS.get(api_key)
    if cls is None or not cls.VALID_VERSIONS[0] <= api_version <= cls.VALID_VERSIONS[1]:
        raise UnsupportedVersionError(
            f"unsupported api key {api_key} version {api_version}",
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
        )
    header_version = request_header_version(api_key, api_version)
    _, decode_header = _codec(RequestHeader, header_version, _is_flexible(RequestHeader, header_version))
    _, decode_body = _codec(cls, api_version, _is_flexible(cls, api_version))
    plan = _request_plans[(api_key, api_version)] = _RequestPlan(
        header_version, decode_header, cls, api_version, decode_body
    )
    return plan


def _decode_header(plan: _RequestPlan, buf: memoryview) -> tuple[RequestHeader, int]:
    try:
        # The plan's header decoder is RequestHeader's (``_plan_for``).
        return cast(tuple[RequestHeader, int], plan.decode_header(buf, 0, len(buf)))
    except DecodeError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError, TypeError) as exc:
        raise DecodeError(f"malformed RequestHeader v{plan.header_version}: {exc}") from exc


def encode_response(msg: Message, version: int, correlation_id: int) -> bytes:
    """Response header plus body, without the 4-byte size prefix."""
    out = p.OutputBuffer()
    encode_response_into(out, msg, version, correlation_id)
    return out.getvalue()


def encode_response_parts(msg: Message, version: int, correlation_id: int) -> list[Any]:
    """``encode_response`` as a list of buffers for ``transport.writelines``.

    Large ``records`` values (a Fetch response's log segments) are handed back as given, never
    copied, so the broker can send them straight from the read buffer.
    """
    out = p.OutputBuffer()
    encode_response_into(out, msg, version, correlation_id)
    return out.parts()


def encode_response_into(out: bytearray, msg: Message, version: int, correlation_id: int) -> None:
    api_key = type(msg).API_KEY
    if api_key is None or type(msg).KIND != "response":
        raise EncodeError(f"{type(msg).NAME} is not a response")
    out += _I32.pack(correlation_id)
    if response_header_version(api_key, version) >= 1:
        out.append(0)  # empty tagged-field section
    encode_into(out, msg, version)


def decode_response(
    api_key: int, version: int, data: bytes | bytearray | memoryview
) -> tuple[int, Message]:
    """Correlation id and body of a response as the client receives it."""
    buf = _view(data)
    cls = response_class(api_key)
    _check_version(cls, version)  # before the header, whose version depends on it
    header, pos = decode_at(ResponseHeader, buf, 0, response_header_version(api_key, version))
    try:
        body, _ = decode_at(cls, buf, pos, version)
    except DecodeError:
        # A broker that does not support the ApiVersions version asked for answers in v0 with
        # an error code (KIP-511); Kafka's client falls back to reading v0 the same way.
        if api_key != API_VERSIONS_KEY or version == 0 or len(buf) < pos + 2:
            raise
        if _I16.unpack_from(buf, pos)[0] == 0:
            raise
        body, _ = decode_at(cls, buf, pos, 0)
    return header.correlation_id, body


def peek_correlation_id(data: bytes | bytearray | memoryview) -> int:
    """The correlation id of a response, to match it to its request before decoding."""
    if len(data) < 4:
        raise DecodeError("response shorter than its correlation id", 0)
    return _I32.unpack_from(data, 0)[0]

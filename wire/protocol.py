"""The Kafka protocol codec: one declaration per message covers every version.

A message is declared as a list of `Field`s with the same facts Kafka's own JSON
definitions carry (`versions`, `nullableVersions`, `default`, `tag`/`taggedVersions`,
nested `fields`). `Schema.encode(version, value)` and `Schema.decode(version, data)` walk
that declaration; nothing is written by hand per message. Flexible versions use compact
strings, compact arrays and tagged fields, as KIP-482 specifies.

Decoded values are `Struct`s: dicts whose keys are the snake_case field names, also
readable as attributes (`response.topics[0].partitions`). A field absent in the decoded
version reads as its default, so callers need not care which version was spoken.

Decoding trusts no length: every length and count (strings, bytes, arrays, tagged fields) is
checked against the bytes left before anything is read or allocated by it, a tagged field is
read within its own size, and anything malformed raises `DecodeError`.
"""

from __future__ import annotations

import struct
import uuid as _uuid
from collections.abc import Sequence
from typing import Any

from .errors import DecodeError

# ---------------------------------------------------------------------------
# Versions


class Versions:
    """A version range as Kafka writes it: "0+", "3-7", "5", or "none"."""

    __slots__ = ("low", "high", "text")

    def __init__(self, text: str):
        self.text = text
        if text == "none":
            self.low, self.high = 1, 0
        elif text.endswith("+"):
            self.low, self.high = int(text[:-1]), 1 << 15
        elif "-" in text:
            low, high = text.split("-")
            self.low, self.high = int(low), int(high)
        else:
            self.low = self.high = int(text)

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    def __repr__(self) -> str:
        return f"Versions({self.text!r})"


NO_VERSIONS = Versions("none")

# ---------------------------------------------------------------------------
# Values


class Struct(dict):
    """A decoded message or sub-structure: a dict also readable by attribute."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


# ---------------------------------------------------------------------------
# Fields

PRIMITIVES = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool",
              "string", "bytes", "records", "uuid"}


class Field:
    """One field of a message, with the facts of Kafka's JSON definition.

    `type` is a primitive name, "[]" + a primitive name for an array of primitives,
    "[]" for an array of structs (with `fields`), or "{}" for a single struct (with `fields`).
    """

    __slots__ = ("name", "type", "versions", "nullable", "default", "tag", "tagged", "fields", "item_type")

    def __init__(self, name: str, type: str, versions: str = "0+", *, nullable: str = "none",
                 default: Any = ..., tag: int | None = None, tagged: str = "none",
                 fields: Sequence[Field] = ()):
        self.name = name
        self.type = type
        self.versions = Versions(versions)
        self.nullable = Versions(nullable)
        self.tag = tag
        self.tagged = Versions(tagged)
        self.fields = tuple(fields)
        self.item_type = type[2:] if type.startswith("[]") and type != "[]" else None
        if type not in ("[]", "{}") and type not in PRIMITIVES and self.item_type not in PRIMITIVES:
            raise ValueError(f"field {name}: unknown type {type!r}")
        if (type in ("[]", "{}")) != bool(self.fields):
            raise ValueError(f"field {name}: structs need fields, primitives have none")
        self.default = default

    def default_for(self, version: int) -> Any:
        """The value a field has when it is absent (not in this version, or not given)."""
        if self.default is not ...:
            return self.default
        if self.type == "{}":
            return Struct({f.name: f.default_for(version) for f in self.fields})
        if self.type.startswith("[]"):
            return []
        return _PRIMITIVE_DEFAULTS[self.type]


_PRIMITIVE_DEFAULTS: dict[str, Any] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0, "float64": 0.0,
    "bool": False, "string": "", "bytes": b"", "records": None, "uuid": _uuid.UUID(int=0),
}

# ---------------------------------------------------------------------------
# Writing

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_U16, _U32, _F64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">d")
_FIXED = {"int8": _I8, "int16": _I16, "int32": _I32, "int64": _I64, "uint16": _U16,
          "uint32": _U32, "float64": _F64}


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise DecodeError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")


def _write_bytes_like(out: bytearray, raw: bytes | None, flexible: bool, nullable: bool,
                      name: str, long_length: bool) -> None:
    if raw is None:
        if not nullable:
            raise ValueError(f"field {name} is not nullable in this version")
        if flexible:
            out.append(0)
        else:
            out += (_I32 if long_length else _I16).pack(-1)
        return
    if flexible:
        write_uvarint(out, len(raw) + 1)
    else:
        out += (_I32 if long_length else _I16).pack(len(raw))
    out += raw


def _write_primitive(out: bytearray, type: str, value: Any, flexible: bool, nullable: bool, name: str) -> None:
    packer = _FIXED.get(type)
    if packer is not None:
        out += packer.pack(value)
    elif type == "string":
        _write_bytes_like(out, None if value is None else value.encode(), flexible, nullable, name, False)
    elif type == "records" and isinstance(value, tuple):  # a record batch in pieces: copied once, here
        size = sum(len(part) for part in value)
        if flexible:
            write_uvarint(out, size + 1)
        else:
            out += _I32.pack(size)
        for part in value:
            out += part
    elif type in ("bytes", "records"):
        _write_bytes_like(out, None if value is None else bytes(value), flexible, nullable, name, True)
    elif type == "bool":
        out.append(1 if value else 0)
    elif type == "uuid":
        out += (value or _uuid.UUID(int=0)).bytes
    else:  # pragma: no cover - types are checked when fields are declared
        raise ValueError(type)


def _write_array_length(out: bytearray, items: Sequence | None, flexible: bool, nullable: bool, name: str) -> None:
    if items is None:
        if not nullable:
            raise ValueError(f"field {name} is not nullable in this version")
        if flexible:
            out.append(0)
        else:
            out += _I32.pack(-1)
    elif flexible:
        write_uvarint(out, len(items) + 1)
    else:
        out += _I32.pack(len(items))


def _write_value(out: bytearray, field: Field, value: Any, version: int, flexible: bool) -> None:
    nullable = version in field.nullable
    if field.type == "{}":
        if value is None and nullable:
            out.append(0xFF)  # a null struct is the int8 -1
            return
        if nullable:
            out.append(1)
        _write_struct(out, field.fields, value, version, flexible)
    elif field.type == "[]":
        _write_array_length(out, value, flexible, nullable, field.name)
        for item in value or ():
            _write_struct(out, field.fields, item, version, flexible)
    elif field.item_type is not None:
        _write_array_length(out, value, flexible, nullable, field.name)
        for item in value or ():
            _write_primitive(out, field.item_type, item, flexible, False, field.name)
    else:
        _write_primitive(out, field.type, value, flexible, nullable, field.name)


def _get(value: Any, name: str, missing: Any) -> Any:
    if isinstance(value, dict):
        return value.get(name, missing)
    return getattr(value, name, missing)


def _write_struct(out: bytearray, fields: tuple[Field, ...], value: Any, version: int, flexible: bool) -> None:
    tagged: list[tuple[int, Field, Any]] = []
    for field in fields:
        if version not in field.versions:
            continue
        item = _get(value, field.name, ...)
        if item is ...:
            item = field.default_for(version)
        if flexible and version in field.tagged:
            if item != field.default_for(version):
                tagged.append((field.tag, field, item))  # type: ignore[arg-type]
            continue
        try:
            _write_value(out, field, item, version, flexible)
        except (struct.error, TypeError, AttributeError) as exc:
            raise TypeError(f"field {field.name}: cannot encode {item!r}: {exc}") from None
    if flexible:
        write_uvarint(out, len(tagged))
        for tag, field, item in sorted(tagged, key=lambda t: t[0]):
            inner = bytearray()
            _write_value(inner, field, item, version, flexible)
            write_uvarint(out, tag)
            write_uvarint(out, len(inner))
            out += inner


# ---------------------------------------------------------------------------
# Reading


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0):
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes | memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise DecodeError(f"need {n} bytes at {self.pos}, have {len(self.data) - self.pos}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, packer: struct.Struct) -> Any:
        end = self.pos + packer.size
        if end > len(self.data):
            raise DecodeError(f"truncated at {self.pos}")
        (value,) = packer.unpack_from(self.data, self.pos)
        self.pos = end
        return value

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos)
        return value


def _read_length(r: _Reader, flexible: bool, long_length: bool) -> int:
    """A length prefix; -1 means null, and no other negative length is one."""
    n = r.uvarint() - 1 if flexible else r.unpack(_I32 if long_length else _I16)
    if n < -1:
        raise DecodeError(f"negative length {n} at {r.pos}")
    return n


def _read_tag_count(r: _Reader) -> int:
    """How many tagged fields follow: each takes at least two bytes (its tag and its size)."""
    n = r.uvarint()
    if 2 * n > len(r.data) - r.pos:
        raise DecodeError(f"{n} tagged fields claimed, more than the bytes left")
    return n


def _read_primitive(r: _Reader, type: str, flexible: bool, nullable: bool, name: str) -> Any:
    packer = _FIXED.get(type)
    if packer is not None:
        return r.unpack(packer)
    if type == "string":
        n = _read_length(r, flexible, False)
        if n < 0:
            if not nullable:
                raise DecodeError(f"null for non-nullable string {name}")
            return None
        try:
            return bytes(r.take(n)).decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"field {name}: invalid utf-8") from exc
    if type in ("bytes", "records"):
        n = _read_length(r, flexible, True)
        if n < 0:
            if not nullable:
                raise DecodeError(f"null for non-nullable bytes {name}")
            return None
        # records stay a view of the frame: megabytes of a Fetch are not copied to be read once
        return r.take(n) if type == "records" else bytes(r.take(n))
    if type == "bool":
        return r.take(1)[0] != 0
    if type == "uuid":
        return _uuid.UUID(bytes=bytes(r.take(16)))
    raise DecodeError(f"unknown type {type}")  # pragma: no cover


def _read_array_length(r: _Reader, flexible: bool, nullable: bool, name: str) -> int:
    n = r.uvarint() - 1 if flexible else r.unpack(_I32)
    if n < -1:
        raise DecodeError(f"array {name} has a negative length {n}")
    if n < 0 and not nullable:
        raise DecodeError(f"null for non-nullable array {name}")
    if n > len(r.data) - r.pos:  # every item takes at least one byte
        raise DecodeError(f"array {name} claims {n} items, more than the bytes left")
    return n


def _read_value(r: _Reader, field: Field, version: int, flexible: bool) -> Any:
    nullable = version in field.nullable
    if field.type == "{}":
        if nullable and r.unpack(_I8) < 0:
            return None
        return _read_struct(r, field.fields, version, flexible)
    if field.type == "[]":
        n = _read_array_length(r, flexible, nullable, field.name)
        return None if n < 0 else [_read_struct(r, field.fields, version, flexible) for _ in range(n)]
    if field.item_type is not None:
        n = _read_array_length(r, flexible, nullable, field.name)
        if n < 0:
            return None
        item_type = field.item_type
        return [_read_primitive(r, item_type, flexible, False, field.name) for _ in range(n)]
    return _read_primitive(r, field.type, flexible, nullable, field.name)


def _read_struct(r: _Reader, fields: tuple[Field, ...], version: int, flexible: bool) -> Struct:
    out = Struct()
    by_tag: dict[int, Field] = {}
    for field in fields:
        if version not in field.versions:
            out[field.name] = field.default_for(version)
        elif flexible and version in field.tagged:
            out[field.name] = field.default_for(version)
            by_tag[field.tag] = field  # type: ignore[index]
        else:
            out[field.name] = _read_value(r, field, version, flexible)
    if flexible:
        for _ in range(_read_tag_count(r)):
            tag = r.uvarint()
            size = r.uvarint()
            end = r.pos + size
            if end > len(r.data):
                raise DecodeError(f"tagged field {tag} overruns the message")
            field = by_tag.get(tag)
            if field is None:
                r.pos = end  # unknown tags are skipped, as KIP-482 requires
                continue
            inner = _Reader(r.data[:end], r.pos)  # the field cannot read past its own size
            out[field.name] = _read_value(inner, field, version, flexible)
            if inner.pos != end:
                raise DecodeError(f"tagged field {field.name} has {end - inner.pos} stray bytes")
            r.pos = end
    return out


# ---------------------------------------------------------------------------
# Schemas and APIs


class Schema:
    """One request or response body, every version."""

    def __init__(self, name: str, versions: str, flexible: str, fields: Sequence[Field]):
        self.name = name
        self.versions = Versions(versions)
        self.flexible = Versions(flexible)
        self.fields = tuple(fields)

    def encode(self, version: int, value: Any) -> bytes:
        out = bytearray()
        self.encode_into(out, version, value)
        return bytes(out)

    def encode_into(self, out: bytearray, version: int, value: Any) -> None:
        """Append the encoded body to `out` (a frame's header before it: no copy of the body)."""
        if version not in self.versions:
            raise ValueError(f"{self.name} has no version {version}")
        _write_struct(out, self.fields, value, version, version in self.flexible)

    def decode(self, version: int, data: bytes | memoryview, pos: int = 0, *, exact: bool = True) -> Struct:
        """Decode a body; any malformation raises `DecodeError`, never anything else."""
        if version not in self.versions:
            raise DecodeError(f"{self.name} has no version {version}")
        r = _Reader(data if isinstance(data, memoryview) else memoryview(data), pos)
        try:
            value = _read_struct(r, self.fields, version, version in self.flexible)
        except DecodeError as exc:
            raise DecodeError(f"{self.name} v{version}: {exc}") from None
        except (struct.error, IndexError, ValueError, OverflowError, MemoryError) as exc:
            raise DecodeError(f"{self.name} v{version}: malformed ({exc})") from None
        if exact and r.pos != len(data):
            raise DecodeError(f"{self.name} v{version}: {len(data) - r.pos} bytes left over")
        return value

    def default(self, version: int) -> Struct:
        return Struct({f.name: f.default_for(version) for f in self.fields})


class Api:
    """A request/response pair under one api key."""

    def __init__(self, key: int, name: str, request: Schema, response: Schema):
        self.key = key
        self.name = name
        self.request = request
        self.response = response
        self.min_version = request.versions.low
        self.max_version = request.versions.high

    def request_header_version(self, version: int) -> int:
        return 2 if version in self.request.flexible else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions answers with header v0 at every version, so that a client that
        # asked with a version the broker does not know can still read the answer.
        if self.key == 18:
            return 0
        return 1 if version in self.response.flexible else 0

    def __repr__(self) -> str:
        return f"Api({self.key}, {self.name})"


def encode_request(api: Api, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytearray:
    """A whole request frame: size, header v1/v2, body (built in one buffer: a Produce request's
    megabytes of records are copied into it once)."""
    out = bytearray(4)
    out += _I16.pack(api.key)
    out += _I16.pack(version)
    out += _I32.pack(correlation_id)
    _write_bytes_like(out, None if client_id is None else client_id.encode(), False, True, "client_id", False)
    if api.request_header_version(version) == 2:
        out.append(0)  # no tagged fields in the header
    api.request.encode_into(out, version, body)
    struct.pack_into(">i", out, 0, len(out) - 4)
    return out


def decode_response_header(api: Api, version: int, frame: bytes | memoryview) -> tuple[int, int]:
    """(correlation_id, position of the body) of a response frame without its size prefix."""
    r = _Reader(frame)
    try:
        correlation_id = r.unpack(_I32)
        if api.response_header_version(version) == 1:
            for _ in range(_read_tag_count(r)):
                r.uvarint()
                r.take(r.uvarint())
    except (struct.error, IndexError) as exc:
        raise DecodeError(f"malformed response header ({exc})") from None
    return correlation_id, r.pos


def decode_request(frame: bytes | memoryview, apis: dict[int, Api]) -> tuple[Api, int, int, str | None, Struct]:
    """Parse a request frame without its size prefix (the mock broker's side of the wire)."""
    r = _Reader(frame)
    key = r.unpack(_I16)
    version = r.unpack(_I16)
    correlation_id = r.unpack(_I32)
    client_id = _read_primitive(r, "string", False, True, "client_id")
    api = apis.get(key)
    if api is None:
        raise DecodeError(f"unknown api key {key}")
    if api.request_header_version(version) == 2:
        for _ in range(_read_tag_count(r)):
            r.uvarint()
            r.take(r.uvarint())
    body = api.request.decode(version, frame, r.pos)
    return api, version, correlation_id, client_id, body


def encode_response(api: Api, version: int, correlation_id: int, body: Any) -> bytes:
    """A whole response frame (the mock broker's side of the wire)."""
    out = bytearray(4)
    out += _I32.pack(correlation_id)
    if api.response_header_version(version) == 1:
        out.append(0)
    api.response.encode_into(out, version, body)
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


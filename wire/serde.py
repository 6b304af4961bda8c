"""Serializers (producer) and deserializers (consumer): bytes, str, json, msgpack or a callable.

Producer side, `key.serializer` / `value.serializer`: a serializer turns one user object into
`bytes` or None. `serialize_many` is the batched form the producer uses for `send_batch`: with
the `bytes` serializer it only checks the types (in C), so a batch of bytes costs no Python call
per record. Anything that is not bytes (or None) after serialization is a `TypeError` naming the
field, raised where the user handed it in.

Consumer side, `key.deserializer` / `value.deserializer`: `Deserializers` turns the binary key
and value columns of a fetched Arrow batch into `str` (an Arrow string column, checked as UTF-8
in C), `json` or `msgpack` (each value parsed, the column typed by Arrow from what was parsed:
objects become structs), or what a callable of one value's bytes returns. A null stays null.
Called by: the partition consumer (on each batch it buffers), the group member's claims (on
each batch the handler takes), `Consumer.read_all` (`concat_batches`). A value that does not
parse, or a batch whose values have no common Arrow type, is a `DeserializationError` naming
the property, the record and the cause.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa

from .errors import ConfigError, DeserializationError

Serializer = Callable[[Any], "bytes | None"]

_BUFFERS = (bytes, bytearray, memoryview)


def _to_bytes(obj: Any) -> bytes | None:
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, _BUFFERS):
        return bytes(obj)
    if isinstance(obj, str):
        return obj.encode("utf-8")
    raise TypeError(f"expected bytes, str or None, not {type(obj).__name__}")


def _str(obj: Any) -> bytes | None:
    if obj is None:
        return None
    if isinstance(obj, str):
        return obj.encode("utf-8")
    return _to_bytes(obj)


def _json(obj: Any) -> bytes | None:
    return None if obj is None else json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _msgpack(obj: Any) -> bytes | None:
    return None if obj is None else msgpack.packb(obj, use_bin_type=True)


SERIALIZERS: dict[str, Serializer] = {"bytes": _to_bytes, "str": _str, "json": _json, "msgpack": _msgpack}


def get_serializer(spec: str | Serializer) -> Serializer:
    """The serializer for a config value; a callable's result is checked to be bytes, str or None."""
    if callable(spec):
        user = spec

        def call(obj: Any) -> bytes | None:
            return _to_bytes(user(obj))

        call.__name__ = getattr(spec, "__name__", "serializer")
        return call
    try:
        return SERIALIZERS[spec]
    except (KeyError, TypeError):
        raise ValueError(f"unknown serializer {spec!r}; expected one of {', '.join(SERIALIZERS)} or a callable") from None


def serialize_one(serializer: Serializer, obj: Any, what: str) -> bytes | None:
    try:
        return serializer(obj)
    except TypeError as exc:
        raise TypeError(f"{what}: {exc}") from None


def serialize_many(serializer: Serializer, objs: list, what: str) -> list:
    """`objs` serialized; the bytes serializer on a list of bytes/None returns it untouched, and
    a BinaryColumn (sliced from a binary or string Arrow column) is bytes already."""
    from .columns import BinaryColumn

    if isinstance(objs, BinaryColumn):
        return objs
    if serializer is _to_bytes:
        kinds = set(map(type, objs))
        if kinds <= {bytes, type(None)}:
            return objs
    out = []
    for i, obj in enumerate(objs):
        try:
            out.append(serializer(obj))
        except TypeError as exc:
            raise TypeError(f"{what}[{i}]: {exc}") from None
    return out


# -- deserializers (consumer side) ----------------------------------------------------------------

Deserializer = Callable[[bytes], Any]

_PARSERS: dict[str, Deserializer] = {"json": json.loads, "msgpack": lambda raw: msgpack.unpackb(raw, raw=False)}


@dataclass(frozen=True)
class Deserializers:
    """The consumer's `key.deserializer` and `value.deserializer` (names or callables), applied to
    the key and value columns of a batch with Spark's Kafka source schema."""

    key: str | Deserializer = "bytes"
    value: str | Deserializer = "bytes"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Deserializers:
        return cls(config["key.deserializer"], config["value.deserializer"])

    @property
    def raw(self) -> bool:
        """Both columns stay as fetched."""
        return self.key == "bytes" and self.value == "bytes"

    @property
    def schema(self) -> pa.Schema:
        """The schema of a deserialized batch: binary or string where known before any data is
        seen; null where the type comes from the values (json, msgpack, a callable)."""
        from .arrow_batches import SCHEMA

        schema = SCHEMA
        for name, spec in (("key", self.key), ("value", self.value)):
            if spec != "bytes":
                kind = pa.string() if spec == "str" else pa.null()
                schema = schema.set(schema.get_field_index(name), pa.field(name, kind))
        return schema

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.raw or not batch.num_rows:
            return batch if self.raw else pa.RecordBatch.from_pylist([], schema=self.schema)
        columns = list(batch.columns)
        schema = batch.schema
        for name, spec in (("key", self.key), ("value", self.value)):
            if spec == "bytes":
                continue
            i = schema.get_field_index(name)
            columns[i] = _deserialize_column(batch, columns[i], f"{name}.deserializer", spec)
            schema = schema.set(i, pa.field(name, columns[i].type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _deserialize_column(batch: pa.RecordBatch, column: pa.Array, prop: str, spec: str | Deserializer) -> pa.Array:
    if spec == "str":
        try:
            return column.cast(pa.string())
        except pa.ArrowInvalid:
            row = next(i for i, raw in enumerate(column.to_pylist()) if raw is not None and not _is_utf8(raw))
            raise _failed(batch, prop, row, "not UTF-8") from None
    parse = _PARSERS[spec] if isinstance(spec, str) else spec
    values = []
    for row, raw in enumerate(column.to_pylist()):
        if raw is None:
            values.append(None)
            continue
        try:
            values.append(parse(raw))
        except Exception as exc:  # the parser's or the user's own error, whatever its class
            raise _failed(batch, prop, row, f"{type(exc).__name__}: {exc}") from exc
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
        last = batch.column("offset")[batch.num_rows - 1].as_py()
        raise _failed(batch, prop, 0, f"the values from here to offset {last} have no common Arrow type: {exc}") from exc


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _failed(batch: pa.RecordBatch, prop: str, row: int, cause: str) -> DeserializationError:
    return DeserializationError(prop, batch.column("topic")[row].as_py(), batch.column("partition")[row].as_py(),
                                batch.column("offset")[row].as_py(), cause)


def concat_batches(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """One table of `batches` (`schema` when there are none). Columns typed from their values
    (json, msgpack, a callable) may differ from batch to batch, as a struct gains a field: such a
    column is typed again from all its values."""
    if not batches:
        return schema.empty_table()
    first = batches[0].schema
    if all(b.schema.equals(first) for b in batches):
        return pa.Table.from_batches(batches)
    columns = []
    for i, field in enumerate(first):
        if all(b.schema.field(i).type == field.type for b in batches):
            columns.append(pa.chunked_array([b.column(i) for b in batches], field.type))
            continue
        values = [v for b in batches for v in b.column(i).to_pylist()]
        try:
            columns.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise DeserializationError(f"{field.name}.deserializer", batches[0].column("topic")[0].as_py(),
                                       batches[0].column("partition")[0].as_py(),
                                       batches[0].column("offset")[0].as_py(),
                                       f"the batches' values have no common Arrow type: {exc}") from exc
    return pa.Table.from_arrays(columns, names=first.names)


def require_raw(config: Mapping[str, Any], reader: str, how: str) -> None:
    """Refuse `key.deserializer` / `value.deserializer` where `reader` gives Spark's Kafka source
    columns as they are (as Spark's own Kafka source refuses them); `how` says what to do instead."""
    for prop in ("key.deserializer", "value.deserializer"):
        if config.get(prop, "bytes") != "bytes":
            raise ConfigError(f"{prop}: {reader} gives the key and value as binary columns, as Spark's Kafka source "
                              f"does; {how}")

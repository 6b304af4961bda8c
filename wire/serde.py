"""Serializers (producer) for `key.serializer` / `value.serializer`: bytes, str, json, msgpack or a callable.

A serializer turns one user object into `bytes` or None. `serialize_many` is the batched form the
producer uses for `send_batch`: with the `bytes` serializer it only checks the types (in C), so a
batch of bytes costs no Python call per record. Anything that is not bytes (or None) after
serialization is a `TypeError` naming the field, raised where the user handed it in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack

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


# -- deserializers (consumer side) live below this line --------------------------------------

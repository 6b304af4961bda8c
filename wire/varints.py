"""Kafka's zigzag varints (varlongs when needed), one at a time and column-wise.

Kafka writes every length, delta and count inside a v2 record as a zigzag varint: 7 bits a byte,
low first, the top bit set on every byte but the last. `encode_varint`, `decode_varint` and
`read_uvarint` take one value; `varint_bytes` looks the small ones up in a precomputed table
(every length and offset delta of an ordinary batch); `read_varints`, `zigzag_varints` and
`zigzag_constant` take many at once with numpy, for the column-wise encoder and the Arrow decoder.
Malformed input raises `DecodeError`.
"""

from __future__ import annotations

import numpy as np

from .errors import DecodeError

__all__ = [
    "NULL_VARINT",
    "VARINTS",
    "VARINT_TABLE_SIZE",
    "decode_varint",
    "encode_varint",
    "read_uvarint",
    "read_varints",
    "varint_bytes",
    "zigzag_constant",
    "zigzag_varints",
]


def _uvarint_bytes(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag varint (varlong when needed) of a signed 64-bit value."""
    return _uvarint_bytes(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


VARINT_TABLE_SIZE = 1 << 14
# VARINTS[n] is the zigzag varint of n for 0 <= n < VARINT_TABLE_SIZE: every length and offset delta of
# an ordinary batch is a lookup, not a loop
VARINTS = [encode_varint(n) for n in range(VARINT_TABLE_SIZE)]
NULL_VARINT = encode_varint(-1)


def varint_bytes(n: int) -> bytes:
    if 0 <= n < VARINT_TABLE_SIZE:
        return VARINTS[n]
    return encode_varint(n)


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """Zigzag varint at `pos`: (value, position after it). Malformed input raises `DecodeError`."""
    u, pos = read_uvarint(data, pos)
    return (u >> 1) ^ -(u & 1), pos


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    u = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise DecodeError("varint runs past the end of the data")
        b = data[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return u, pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint longer than 10 bytes")


def read_varints(view: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varint at each of `pos` in `view` (a uint8 array), and the positions after
    them: `decode_varint` over many places at once (numpy). Read as unsigned 64-bit, as Java's
    readVarlong does: a value of 2**62 or more is not sign-flipped."""
    b = view[pos].astype(np.uint64)
    value = b & 0x7F
    after = pos + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while len(more):
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")
        b = view[after[more]].astype(np.uint64)
        value[more] |= (b & 0x7F) << shift
        after[more] += 1
        more = more[(b & 0x80) != 0]
        shift += 7
    return (value >> 1).view(np.int64) ^ -(value & 1).view(np.int64), after


def zigzag_varints(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's zigzag varint: an (n, width) byte matrix, left-aligned, and each one's length."""
    if len(x) and x.min() == x.max():  # one value for all (fixed-size values, say): encode it once
        return zigzag_constant(int(x[0]), len(x))
    u = ((x << 1) ^ (x >> 63)).astype(np.uint64)
    top = int(u.max()) if len(u) else 0
    width = max(1, (top.bit_length() + 6) // 7)
    out = np.empty((len(u), width), np.uint8)
    lengths = np.ones(len(u), np.int64)
    rest = u
    for k in range(width):
        byte = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest = rest >> np.uint64(7)
        more = rest != 0
        out[:, k] = byte | (more.astype(np.uint8) << 7)
        lengths += more
    return out, lengths


def zigzag_constant(value: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`zigzag_varints` of n times the same value, as read-only broadcasts of one encoding."""
    encoded = np.frombuffer(varint_bytes(value), np.uint8)
    return np.broadcast_to(encoded, (n, len(encoded))), np.broadcast_to(np.int64(len(encoded)), (n,))

"""Kafka record batch v2 (magic 2): its layout, its constants, and the types a decoded batch is.

Layout (big-endian), 61 header bytes then the records, possibly compressed as one blob:
    base_offset int64, batch_length int32 (bytes after this field), partition_leader_epoch int32,
    magic int8, crc uint32 (crc32c of everything from attributes to the end), attributes int16
    (bits 0-2 codec, bit 3 timestamp type, bit 4 transactional, bit 5 control),
    last_offset_delta int32, base_timestamp int64, max_timestamp int64, producer_id int64,
    producer_epoch int16, base_sequence int32, record count int32.
Each record: length varint, attributes int8, timestamp_delta varlong, offset_delta varint,
key (varint length, -1 = null), value (likewise), header count varint, then per header a
utf-8 key and a nullable value. Every varint is zigzag-encoded.

A control batch (transactional, bit 5 set) holds one control record whose key says how its
producer's transaction ended (`control_type`). Encoding is `record_encoding`'s, reading a batch
without trusting it `record_batch_reader`'s, decoding to `Record`s `record_decoding`'s.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import CorruptRecordError

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "Record",
    "RecordBatch",
    "BatchFlags",
    "control_type",
]

CREATE_TIME = 0
LOG_APPEND_TIME = 1

MAGIC = 2
HEADER_SIZE = 61  # bytes before the first record
SEQUENCE_MASK = 0x7FFFFFFF  # a producer's sequence numbers wrap at 2**31
LENGTH_OFFSET = 12  # batch_length counts the bytes after base_offset and itself
CRC_START = 21  # attributes onward is covered by the crc

# attribute bits; every reader of batches (`record_batch_reader`, `record_decoding`, `arrow_batches`,
# `fetch`) takes them from here
ATTR_CODEC = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

# base_offset, batch_length, partition_leader_epoch, magic, crc
PREFIX = struct.Struct(">qiibI")
# attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
# base_sequence, record count
TAIL = struct.Struct(">hiqqqhii")
HEAD = struct.Struct(">qiibIhiqqqhii")
BASE_AND_LENGTH = struct.Struct(">qi")
LAST_DELTA = struct.Struct(">i")
LAST_DELTA_AT = 23  # last_offset_delta's place in the header
# the smallest record: length, attributes, timestamp delta, offset delta, key length, value
# length and header count, a byte each
MIN_RECORD_SIZE = 7

# A control batch (transactional, bit 5 set) holds one control record: its key is version int16
# (0) + type int16, its value (an end-transaction marker) version int16 (0) + coordinator_epoch int32.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_KEY = struct.Struct(">hh")
END_TXN_MARKER = struct.Struct(">hi")


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class BatchFlags:
    """What a batch's attributes say; for `RecordBatch` and `read_committed.FetchedBatch`."""

    __slots__ = ()
    attributes: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


@dataclass(slots=True)
class RecordBatch(BatchFlags):
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_CODEC

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else CREATE_TIME

    @property
    def is_abort_marker(self) -> bool:
        """A control batch saying its producer's transaction aborted (Java's containsAbortMarker)."""
        return self.is_control and bool(self.records) and control_type(self.records[0].key) == CONTROL_ABORT

    @property
    def is_commit_marker(self) -> bool:
        """A control batch saying its producer's transaction committed."""
        return self.is_control and bool(self.records) and control_type(self.records[0].key) == CONTROL_COMMIT

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Where the next fetch starts: compaction may leave the batch's tail records missing."""
        return self.base_offset + self.last_offset_delta + 1


def control_type(key: bytes | None) -> int:
    """The type of a control record from its key (`CONTROL_ABORT`, `CONTROL_COMMIT`, or another
    a newer broker writes)."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(f"a control record's key holds {0 if key is None else len(key)} bytes, not 4")
    version, kind = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"a control record's key has the negative version {version}")
    return kind

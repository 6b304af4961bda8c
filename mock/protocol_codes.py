"""The numbers the mock cluster answers in: Kafka's error codes, and an api key's number and name."""

from __future__ import annotations

from ..wire import messages
from ..wire.protocol import Api

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
MEMBER_ID_REQUIRED = 79
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100
INVALID_REQUEST = 42
INVALID_CONFIG = 40


def key_of(api: Api | int) -> int:
    return api.key if isinstance(api, Api) else int(api)


def api_name(key: int) -> str:
    api = messages.APIS.get(key)
    return api.name if api else f"api{key}"

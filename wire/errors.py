"""Errors: Kafka's error-code table in one place, and the exceptions raised by this client.

Every code the broker can answer maps to a `KafkaCode` (name, retriable, description).
`BrokerError` carries one of them; the other exceptions name failures on our side.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaCode:
    code: int
    name: str
    retriable: bool
    description: str


# (code, name, retriable, description), from Kafka's `Errors` table.
_TABLE = [
    (-1, "UNKNOWN_SERVER_ERROR", False, "The server experienced an unexpected error when processing the request."),
    (0, "NONE", False, "No error."),
    (1, "OFFSET_OUT_OF_RANGE", False, "The requested offset is not within the range of offsets maintained by the server."),
    (2, "CORRUPT_MESSAGE", True, "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt."),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, "This server does not host this topic-partition."),
    (4, "INVALID_FETCH_SIZE", False, "The requested fetch size is invalid."),
    (5, "LEADER_NOT_AVAILABLE", True, "There is no leader for this topic-partition as we are in the middle of a leadership election."),
    (6, "NOT_LEADER_OR_FOLLOWER", True, "For requests intended only for the leader, this error indicates that the broker is not the current leader."),
    (7, "REQUEST_TIMED_OUT", True, "The request timed out."),
    (8, "BROKER_NOT_AVAILABLE", False, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", True, "The replica is not available for the requested topic-partition."),
    (10, "MESSAGE_TOO_LARGE", False, "The request included a message larger than the max message size the server will accept."),
    (11, "STALE_CONTROLLER_EPOCH", False, "The controller moved to another broker."),
    (12, "OFFSET_METADATA_TOO_LARGE", False, "The metadata field of the offset request was too large."),
    (13, "NETWORK_EXCEPTION", True, "The server disconnected before a response was received."),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, "The coordinator is loading and hence can't process requests."),
    (15, "COORDINATOR_NOT_AVAILABLE", True, "The coordinator is not available."),
    (16, "NOT_COORDINATOR", True, "This is not the correct coordinator."),
    (17, "INVALID_TOPIC_EXCEPTION", False, "The request attempted to perform an operation on an invalid topic."),
    (18, "RECORD_LIST_TOO_LARGE", False, "The request included message batch larger than the configured segment size on the server."),
    (19, "NOT_ENOUGH_REPLICAS", True, "Messages are rejected since there are fewer in-sync replicas than required."),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, "Messages are written to the log, but to fewer in-sync replicas than required."),
    (21, "INVALID_REQUIRED_ACKS", False, "Produce request specified an invalid value for required acks."),
    (22, "ILLEGAL_GENERATION", False, "Specified group generation id is not valid."),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False, "The group member's supported protocols are incompatible with those of existing members."),
    (24, "INVALID_GROUP_ID", False, "The configured groupId is invalid."),
    (25, "UNKNOWN_MEMBER_ID", False, "The coordinator is not aware of this member."),
    (26, "INVALID_SESSION_TIMEOUT", False, "The session timeout is not within the range allowed by the broker."),
    (27, "REBALANCE_IN_PROGRESS", False, "The group is rebalancing, so a rejoin is needed."),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False, "The committing offset data size is not valid."),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, "Topic authorization failed."),
    (30, "GROUP_AUTHORIZATION_FAILED", False, "Group authorization failed."),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, "Cluster authorization failed."),
    (32, "INVALID_TIMESTAMP", False, "The timestamp of the message is out of acceptable range."),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, "The broker does not support the requested SASL mechanism."),
    (34, "ILLEGAL_SASL_STATE", False, "Request is not valid given the current SASL state."),
    (35, "UNSUPPORTED_VERSION", False, "The version of API is not supported."),
    (36, "TOPIC_ALREADY_EXISTS", False, "Topic with this name already exists."),
    (37, "INVALID_PARTITIONS", False, "Number of partitions is below 1."),
    (38, "INVALID_REPLICATION_FACTOR", False, "Replication factor is below 1 or larger than the number of available brokers."),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, "Replica assignment is invalid."),
    (40, "INVALID_CONFIG", False, "Configuration is invalid."),
    (41, "NOT_CONTROLLER", True, "This is not the correct controller for this cluster."),
    (42, "INVALID_REQUEST", False, "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker."),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False, "The message format version on the broker does not support the request."),
    (44, "POLICY_VIOLATION", False, "Request parameters do not satisfy the configured policy."),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, "The broker received an out of order sequence number."),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, "The broker received a duplicate sequence number."),
    (47, "INVALID_PRODUCER_EPOCH", False, "Producer attempted to produce with an old epoch."),
    (48, "INVALID_TXN_STATE", False, "The producer attempted a transactional operation in an invalid state."),
    (49, "INVALID_PRODUCER_ID_MAPPING", False, "The producer attempted to use a producer id which is not currently assigned to its transactional id."),
    (50, "INVALID_TRANSACTION_TIMEOUT", False, "The transaction timeout is larger than the maximum value allowed by the broker."),
    (51, "CONCURRENT_TRANSACTIONS", True, "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing."),
    (52, "TRANSACTION_COORDINATOR_FENCED", False, "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator."),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, "Transactional Id authorization failed."),
    (54, "SECURITY_DISABLED", False, "Security features are disabled."),
    (55, "OPERATION_NOT_ATTEMPTED", False, "The broker did not attempt to execute this operation."),
    (56, "KAFKA_STORAGE_ERROR", True, "Disk error when trying to access log file on the disk."),
    (57, "LOG_DIR_NOT_FOUND", False, "The user-specified log directory is not found in the broker config."),
    (58, "SASL_AUTHENTICATION_FAILED", False, "SASL Authentication failed."),
    (59, "UNKNOWN_PRODUCER_ID", False, "This exception is raised by the broker if it could not locate the producer metadata."),
    (60, "REASSIGNMENT_IN_PROGRESS", False, "A partition reassignment is in progress."),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False, "Delegation Token feature is not enabled."),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False, "Delegation Token is not found on server."),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False, "Specified Principal is not valid Owner/Renewer."),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False, "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels."),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False, "Delegation Token authorization failed."),
    (66, "DELEGATION_TOKEN_EXPIRED", False, "Delegation Token is expired."),
    (67, "INVALID_PRINCIPAL_TYPE", False, "Supplied principalType is not supported."),
    (68, "NON_EMPTY_GROUP", False, "The group is not empty."),
    (69, "GROUP_ID_NOT_FOUND", False, "The group id does not exist."),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True, "The fetch session ID was not found."),
    (71, "INVALID_FETCH_SESSION_EPOCH", True, "The fetch session epoch is invalid."),
    (72, "LISTENER_NOT_FOUND", True, "There is no listener on the leader broker that matches the listener on which metadata request was processed."),
    (73, "TOPIC_DELETION_DISABLED", False, "Topic deletion is disabled."),
    (74, "FENCED_LEADER_EPOCH", True, "The leader epoch in the request is older than the epoch on the broker."),
    (75, "UNKNOWN_LEADER_EPOCH", True, "The leader epoch in the request is newer than the epoch on the broker."),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False, "The requesting client does not support the compression type of given partition."),
    (77, "STALE_BROKER_EPOCH", False, "Broker epoch has changed."),
    (78, "OFFSET_NOT_AVAILABLE", True, "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing."),
    (79, "MEMBER_ID_REQUIRED", False, "The group member needs to have a valid member id before actually entering a consumer group."),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True, "The preferred leader was not available."),
    (81, "GROUP_MAX_SIZE_REACHED", False, "The consumer group has reached its max size."),
    (82, "FENCED_INSTANCE_ID", False, "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id."),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True, "Eligible topic partition leaders are not available."),
    (84, "ELECTION_NOT_NEEDED", True, "Leader election not needed for topic partition."),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, "No partition reassignment is in progress."),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False, "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."),
    (87, "INVALID_RECORD", False, "This record has failed the validation on broker and hence will be rejected."),
    (88, "UNSTABLE_OFFSET_COMMIT", True, "There are unstable offsets that need to be cleared."),
    (89, "THROTTLING_QUOTA_EXCEEDED", True, "The throttling quota has been exceeded."),
    (90, "PRODUCER_FENCED", False, "There is a newer producer with the same transactionalId which fences the current one."),
    (91, "RESOURCE_NOT_FOUND", False, "A request illegally referred to a resource that does not exist."),
    (92, "DUPLICATE_RESOURCE", False, "A request illegally referred to the same resource twice."),
    (93, "UNACCEPTABLE_CREDENTIAL", False, "Requested credential would not meet criteria for acceptability."),
    (94, "INCONSISTENT_VOTER_SET", False, "Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters."),
    (95, "INVALID_UPDATE_VERSION", False, "The given update version was invalid."),
    (96, "FEATURE_UPDATE_FAILED", False, "Unable to update finalized features due to an unexpected server error."),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", False, "Request principal deserialization failed during forwarding."),
    (98, "SNAPSHOT_NOT_FOUND", False, "Requested snapshot was not found."),
    (99, "POSITION_OUT_OF_RANGE", False, "Requested position is not greater than or equal to zero, and less than the size of the snapshot."),
    (100, "UNKNOWN_TOPIC_ID", True, "This server does not host this topic ID."),
    (101, "DUPLICATE_BROKER_REGISTRATION", False, "This broker ID is already in use."),
    (102, "BROKER_ID_NOT_REGISTERED", False, "The given broker ID was not registered."),
    (103, "INCONSISTENT_TOPIC_ID", True, "The log's topic ID did not match the topic ID in the request."),
    (104, "INCONSISTENT_CLUSTER_ID", False, "The clusterId in the request does not match that found on the server."),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False, "The transactionalId could not be found."),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True, "The fetch session encountered inconsistent topic ID usage."),
    (107, "INELIGIBLE_REPLICA", False, "The new ISR contains at least one ineligible replica."),
    (108, "NEW_LEADER_ELECTED", False, "The AlterPartition request successfully updated the partition state but the leader has changed."),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False, "The requested offset is moved to tiered storage."),
    (110, "FENCED_MEMBER_EPOCH", False, "The member epoch is fenced by the group coordinator."),
    (111, "UNRELEASED_INSTANCE_ID", False, "The instance ID is still used by another member in the consumer group."),
    (112, "UNSUPPORTED_ASSIGNOR", False, "The assignor or its version range is not supported by the consumer group."),
    (113, "STALE_MEMBER_EPOCH", False, "The member epoch is stale."),
    (114, "MISMATCHED_ENDPOINT_TYPE", False, "The request was sent to an endpoint of the wrong type."),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False, "This endpoint type is not supported yet."),
    (116, "UNKNOWN_CONTROLLER_ID", False, "This controller ID is not known."),
]

CODES: dict[int, KafkaCode] = {c: KafkaCode(c, n, r, d) for c, n, r, d in _TABLE}
BY_NAME: dict[str, KafkaCode] = {k.name: k for k in CODES.values()}


def code_for(code: int) -> KafkaCode:
    """The table entry for `code`; an unknown code is reported as such, not guessed."""
    return CODES.get(code) or KafkaCode(code, f"UNKNOWN_ERROR_CODE_{code}", False, "An error code this client does not know.")


class KafkaError(Exception):
    """Base of every error this client raises on purpose."""

    retriable = False


class BrokerError(KafkaError):
    """The broker answered with a non-zero error code."""

    def __init__(self, code: int, context: str = "", message: str | None = None):
        self.kafka_code = code_for(code)
        self.code = code
        self.context, self.message = context, message
        self.retriable = self.kafka_code.retriable
        text = f"{self.kafka_code.name} ({code}): {message or self.kafka_code.description}"
        super().__init__(f"{context}: {text}" if context else text)

    def __reduce__(self) -> tuple:
        # Ray pickles errors between actors; by default an exception is rebuilt from its text,
        # which this constructor would take for a code: rebuilt from its parts instead
        return type(self), (self.code, self.context, self.message)

    @property
    def name(self) -> str:
        return self.kafka_code.name


class GroupNotEmptyError(BrokerError):
    """NON_EMPTY_GROUP: the group has members, so its offsets may not be changed nor the group
    deleted; raised from the broker's answer, or by `Admin` before it asks (as kafka-consumer-groups
    checks), since some brokers (tansu 0.6) delete a group with members."""


class GroupNotFoundError(BrokerError):
    """GROUP_ID_NOT_FOUND: the group does not exist; raised from the broker's answer, or by
    `Admin` when the group's coordinator describes it as Dead, or as Empty while no broker lists
    it (tansu 0.6 describes any group id as Empty and deletes a missing group without error)."""


class DecodeError(KafkaError):
    """Bytes from the network (or a caller) do not parse as the expected Kafka structure."""


class CorruptRecordError(DecodeError):
    """A record batch failed its CRC or is malformed."""


class RecordBatchTooLargeError(DecodeError):
    """A compressed record batch inflates past `max.decompressed.batch.bytes` (a decompression
    bomb, or a cap set below the batches a topic holds); refused before it is all inflated."""


class DecompressedFetchTooLargeError(RecordBatchTooLargeError):
    """A fetch's compressed batches, each within `max.decompressed.batch.bytes`, inflate past
    what the fetch may inflate to together (`record_batch_reader.InflationBudget`: that cap plus
    `record_batch_reader.MAX_INFLATION` times the fetched bytes): a bomb of many batches. The batch that
    tips it over is refused before it is all inflated, and its partition fails, as for one batch."""


class RecordTooLargeError(KafkaError):
    """A fetched record batch is larger than the most a fetch may ask for (`fetch.max.bytes`), so
    it can never be read whole: the partition stops there (Java's RecordTooLargeException)."""


class ResponseTooLargeError(DecodeError):
    """A response frame is larger than its request allows (for a Fetch: the `max_bytes` it asked
    for plus `connection.RESPONSE_MARGIN`); refused before it is read, and the connection closed."""


class UnsupportedVersionError(KafkaError):
    """The broker and this client share no version of an API."""


class BrokerConnectionError(KafkaError):
    """The connection to a broker could not be made, or dropped with requests pending."""

    retriable = True


class UnknownCorrelationIdError(BrokerConnectionError):
    """A response came with a correlation id no request on the connection is waiting for: the
    stream can no longer be trusted, so the connection is reset and every request in flight on
    it fails with this error (retriable, on a new connection)."""


class RequestTimedOutError(KafkaError):
    """No response arrived within `request.timeout.ms`, or the broker did not read the request
    within it."""

    retriable = True


class AuthenticationError(KafkaError):
    """SASL or TLS authentication with the broker failed."""


class MessageTooLargeError(KafkaError, ValueError):
    """A message is larger than this client or the broker accepts."""


class UnknownTopicError(KafkaError):
    """The topic does not exist on the cluster."""


class ProducerClosedError(KafkaError):
    """The producer was closed before this message could be sent."""


class FlushInCallbackError(KafkaError):
    """`Producer.flush()` (or a call that flushes, such as `commit_transaction`) was called from
    a delivery callback (`on_delivery`, or a done-callback of a message's future): it would wait
    for the reports that the callback's own thread delivers, forever. Refused at once, as Java's flush refuses it (IllegalStateException)."""


class BufferExhaustedError(KafkaError):
    """`send` waited `max.block.ms` for room in `buffer.memory` and found none."""


class DeliveryTimeoutError(KafkaError):
    """The message was not acknowledged within `delivery.timeout.ms`, and it is not in the log:
    it never left the client, or the producer's old epoch was fenced and the log read after."""

    retriable = False
    possibly_written = False  # True on `OutcomeUnknownError`: sending it again may write it twice


class OutcomeUnknownError(DeliveryTimeoutError):
    """`delivery.timeout.ms` ran out while the message was in flight, or in a pipeline an actor
    died in, and nothing could tell whether the broker wrote it (Java's TimeoutException for an
    in-flight batch, librdkafka's "possibly persisted"). A caller that sends it again may write
    it twice; one that must not reads the topic first."""

    possibly_written = True


class LookupTimeoutError(KafkaError):
    """Looking a written batch up in a partition's log took longer than `request.timeout.ms`:
    the broker kept answering below its high watermark with no batch. Not retriable: the caller
    gives up the look-up (the batch is written; its offset stays unknown)."""


class UnknownOffsetError(KafkaError):
    """The broker took a batch (it answered DUPLICATE_SEQUENCE_NUMBER: written before, or no
    error) without saying at which offset, and the batch was not found in the partition's log
    within the look-up's bounds: written, offset unknown. Not retriable: a re-send would be a
    duplicate again, or, once the broker forgot the batch, written twice."""


class DeserializationError(KafkaError):
    """A fetched key or value does not parse with `key.deserializer` / `value.deserializer`; names
    the property, the record (topic, partition, offset) and the cause."""

    def __init__(self, prop: str, topic: str, partition: int, offset: int, cause: str):
        self.prop, self.topic, self.partition, self.offset, self.cause = prop, topic, partition, offset, cause
        super().__init__(f"{prop}: {topic}/{partition} offset {offset}: {cause}")

    def __reduce__(self) -> tuple:
        return type(self), (self.prop, self.topic, self.partition, self.offset, self.cause)


class PipelineError(KafkaError):
    """An actor of the producer's pipeline died or failed; the message names it and Ray's cause."""


class ConfigError(KafkaError, ValueError):
    """A configuration key is unknown or its value is invalid; the message names the key."""


class DataLossError(KafkaError, ValueError):
    """A range to read is no longer (or not yet) in the partition's log: its start is below the
    log start offset (deleted or compacted away) or its end beyond the high watermark (the log
    was truncated or the topic re-created). Raised under `failOnDataLoss=true`; the message
    names the partition, the range and the log's bounds."""


class TransactionError(KafkaError):
    """A transactional call failed; `code` is the broker's error code when its answer was the cause."""

    def __init__(self, message: str, code: int | None = None):
        self.code = code
        super().__init__(message)

    def __reduce__(self) -> tuple:
        return type(self), (str(self), self.code)

    @property
    def name(self) -> str | None:
        return None if self.code is None else code_for(self.code).name


class TransactionStateError(TransactionError):
    """A transactional call not legal in the transaction's state (commit before begin, begin
    twice, commit after an abortable error, anything before init_transactions)."""


class TransactionAbortableError(TransactionError):
    """The current transaction cannot commit (a send failed, a topic or group is not authorized):
    abort it, then the producer may begin the next one."""


class TransactionFatalError(TransactionError):
    """The producer can no longer take part in transactions (fenced, not authorized for its
    transactional.id, a protocol the broker refuses): close it; every later call raises this."""


class ProducerFencedError(TransactionFatalError):
    """A newer producer with the same transactional.id initialized (its epoch is higher):
    this one is a zombie, fenced for good (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH)."""


class TransactionTimeoutError(TransactionError):
    """A transactional call found no success in its time bound (the coordinator kept answering
    with retriable errors, or was unreachable); the state is unchanged, so the same call may be
    made again."""

    retriable = True


class ConfigWarning(UserWarning):
    """A configuration key was given to a client that does not read it; the message names the key."""


def raise_for_code(code: int, context: str = "", message: str | None = None) -> None:
    if code:
        raise BrokerError(code, context, message)


class ConsumerError(KafkaError):
    """A partition (or a group member) stopped consuming; the message names it and the cause."""


# Codes no retry can fix: a consumer or group member that gets one stops and says so.
FATAL_CODES = frozenset(BY_NAME[name].code for name in (
    "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
    "SASL_AUTHENTICATION_FAILED", "UNSUPPORTED_SASL_MECHANISM", "INCONSISTENT_GROUP_PROTOCOL", "INVALID_GROUP_ID",
    "INVALID_SESSION_TIMEOUT", "GROUP_MAX_SIZE_REACHED", "FENCED_INSTANCE_ID", "UNSUPPORTED_VERSION"))


def is_fatal(error: BaseException) -> bool:
    """True for an error that reconnecting and retrying cannot fix: authentication, authorization,
    a fenced static member, a config the broker refuses. Connection failures, timeouts and every
    other broker answer are retried (as librdkafka does, for as long as the client runs)."""
    if isinstance(error, (AuthenticationError, ConfigError, UnsupportedVersionError)):
        return True
    return isinstance(error, BrokerError) and error.code in FATAL_CODES

"""`raykafka produce -b HOST:PORT -t TOPIC [-K SEP] [-X key=value]... [FILE]...`: one message per line.

Lines come from each FILE in turn (`-` is stdin), or from stdin when no FILE is named.

With `-K SEP` the text before the first SEP is the key (a line without SEP has no key). Lines are
bytes as read: a line that is not UTF-8 is sent as it is. A summary goes to stderr; the exit
status is 0 only when every line was delivered.

With a Ray cluster to join (Ray initialized here, `RAY_ADDRESS`, or a `ray start` on this
machine: `driver/ray_runtime.py` `ray_to_join`) the lines go through a `Producer`, joining
it. With none, they are produced in this process and no Ray is started (starting a whole local
Ray for a terminal command costs seconds): `driver/local_pipeline.py` runs the pipeline's own
Ray-free stages (partitioner, leader state machine, aggregator, Flusher) on one asyncio loop;
its docstring says what it does not do. A `transactional.id` always takes the `Producer`.

Input of any length streams through in bounded memory: lines are read a chunk at a time
(`CHUNK` lines or `CHUNK_BYTES`), and each chunk is handed to the producer, which takes it
only when `buffer.memory` has room, so reading waits while the broker is behind. From a pipe
or a terminal a chunk is also handed on as soon as no more input is ready (kcat's habit: a
line typed, or written by a slow writer, goes out at once, not when `CHUNK` lines have come);
a file, and a pipe its writer keeps full, still go in whole chunks. Unless
`-X max.block.ms` says otherwise, it waits as long as that takes (kcat's habit) rather than
failing the lines after the producer's 60 s. Results are counted as they arrive and dropped.

A progress bar counts the bytes read on stderr when stderr is a terminal (app/progress.py),
against the input's size where it has one (files, and stdin redirected from a file).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import stat
import sys
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any, BinaryIO

from ..wire.config import INT_MAX
from .args import EXIT_ERROR, EXIT_OK, add_client_options, client_config, counted
from .progress import bar

CHUNK = 10_000  # lines handed to send_batch at a time, at most
CHUNK_BYTES = 1 << 20  # bytes of lines in one chunk, at most (a line longer than this is a chunk alone)
READ_BYTES = 1 << 16  # bytes asked of a pipe or a terminal in one read (a Linux pipe's whole buffer)
# ms a pipe's reader waits for more input before handing on the lines it holds: none, so a line
# goes out as soon as its writer pauses; a writer that keeps the pipe full still fills chunks
READY_WAIT_MS = 0
CAUSES_KEPT = 100  # distinct failure causes counted by name; the rest together


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("produce", help="send each line of files or stdin as a message")
    add_client_options(parser, "producer")
    parser.add_argument("-t", "--topic", required=True, help="the topic to send to")
    parser.add_argument("-K", dest="key_separator", metavar="SEP", help="split each line into key SEP value")
    parser.add_argument("-p", "--partition", type=int, default=None, help="send every line to this partition")
    parser.add_argument("files", nargs="*", metavar="FILE", help="read lines from these files (- is stdin)")
    parser.set_defaults(func=cmd_produce)


def cmd_produce(args: argparse.Namespace, stdin: Any = None) -> int:
    config = client_config(args, **{"max.block.ms": INT_MAX})
    stdin = stdin if stdin is not None else sys.stdin.buffer
    names = args.files or ["-"]
    with contextlib.ExitStack() as opened:
        streams = [stdin if name == "-" else opened.enter_context(open(name, "rb")) for name in names]
        sep = args.key_separator.encode() if args.key_separator else None
        tally = _Tally()
        progress = opened.enter_context(bar(f"produce {args.topic}", total=_size(streams), unit="B", unit_scale=True))
        lines = (chunk_read for stream in streams for chunk_read in chunks(stream))
        if _produces_here(config):
            _produce_here(config, args, lines, sep, tally, progress)
        else:
            _produce_with_ray(config, args, lines, sep, tally, progress)
    print(f"raykafka produce: {tally.delivered} delivered, {tally.failed} failed of {counted(tally.lines, 'line')} to "
          f"{args.topic}", file=sys.stderr)
    for cause, count in tally.causes.most_common(5):
        print(f"  {count} x {cause}", file=sys.stderr)
    return EXIT_OK if tally.failed == 0 and tally.delivered == tally.lines else EXIT_ERROR


def _produces_here(config: dict[str, Any]) -> bool:
    """Whether `produce` runs in this process, without Ray: no Ray cluster to join (none runs
    here, `RAY_ADDRESS` names none) and no transaction."""
    from ..driver.ray_runtime import ray_to_join

    return "transactional.id" not in config and not ray_to_join()


def _produce_here(config: dict[str, Any], args: argparse.Namespace, lines: Iterable[tuple[list[bytes], int]],
                  sep: bytes | None, tally: _Tally, progress: Any) -> None:
    """The lines through the in-process pipeline (`driver/local_pipeline.py`), each chunk
    handed on once `buffer.memory` has room; every line's outcome counted."""
    from ..driver.local_pipeline import LocalPipeline

    with LocalPipeline(config) as pipeline:
        for chunk, size in lines:
            keys, values, partitions = _columns(args, chunk, sep)
            tally.lines += len(chunk)
            tally.outcomes(pipeline.send_batch(args.topic, values, keys, partitions))  # waits for buffer.memory
            progress.update(size)
        while pipeline.pending():
            tally.outcomes(pipeline.wait_outcomes(pipeline.ctx.timeout))


def _produce_with_ray(config: dict[str, Any], args: argparse.Namespace, lines: Iterable[tuple[list[bytes], int]],
                      sep: bytes | None, tally: _Tally, progress: Any) -> None:
    """The lines through a `Producer`, joining Ray as `ensure_ray` says (`driver/ray_runtime.py`)."""
    from ..driver.producer import Producer
    from ..driver.ray_runtime import ensure_ray

    ensure_ray()
    with Producer(config) as producer:
        for chunk, size in lines:
            keys, values, partitions = _columns(args, chunk, sep)
            # waits while buffer.memory is full
            tally.add(producer.send_batch(args.topic, values, keys=keys, partitions=partitions), len(chunk))
            progress.update(size)
        producer.flush()
    tally.finish()


def _size(streams: list[BinaryIO]) -> int | None:
    """Bytes left to read in `streams`, where every one is a regular file; else None (a pipe or
    a terminal has no size)."""
    total = 0
    for stream in streams:
        try:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            total += info.st_size - stream.tell()
        except (AttributeError, OSError, ValueError):  # no file behind it (a test's BytesIO)
            return None
    return total


def chunks(stream: Iterable[Any]) -> Iterator[tuple[list[bytes], int]]:
    """Lines (bytes, line end removed) in chunks of at most CHUNK lines and CHUNK_BYTES, each
    with the bytes it was read from. From a pipe or a terminal a chunk ends early when no more
    input is ready (`_pipe_chunks`); a regular file, or a stream with no file descriptor, is
    read line by line into whole chunks."""
    fd = _pipe_fd(stream)
    return _line_chunks(stream) if fd is None else _pipe_chunks(fd)


def _pipe_fd(stream: Any) -> int | None:
    """The file descriptor behind `stream` when it is no regular file (a pipe, a FIFO, a
    terminal, a socket); else None."""
    try:
        fd = stream.fileno()
        return None if stat.S_ISREG(os.fstat(fd).st_mode) else fd
    except (AttributeError, OSError, ValueError):  # no file behind it (a test's BytesIO)
        return None


def _line_chunks(stream: Iterable[Any]) -> Iterator[tuple[list[bytes], int]]:
    chunk: list[bytes] = []
    size = read = 0
    for raw in stream:
        line = raw.rstrip(b"\r\n") if isinstance(raw, bytes) else raw.rstrip("\r\n").encode()
        chunk.append(line)
        size += len(line)
        read += len(raw)
        if len(chunk) >= CHUNK or size >= CHUNK_BYTES:
            yield chunk, read
            chunk, size, read = [], 0, 0
    if chunk:
        yield chunk, read


def _pipe_chunks(fd: int) -> Iterator[tuple[list[bytes], int]]:
    """`chunks` of a pipe or a terminal, read from its descriptor READ_BYTES at a time: after
    each read, the lines held are handed on unless more input is ready within READY_WAIT_MS,
    so no line waits for the ones after it. A line not ended yet is kept as its pieces (joined
    once its end comes: a long line costs no copy per read)."""
    ready = select.poll()
    ready.register(fd, select.POLLIN)
    chunk: list[bytes] = []
    size = read = 0
    pieces: list[bytes] = []  # the line being read, not ended yet
    while data := os.read(fd, READ_BYTES):
        end = data.rfind(b"\n") + 1
        if end:
            block = b"".join([*pieces, data[:end]]) if pieces else data[:end]
            pieces = [data[end:]] if end < len(data) else []
            for raw in block.split(b"\n")[:-1]:
                line = raw.rstrip(b"\r")
                chunk.append(line)
                size += len(line)
                read += len(raw) + 1
                if len(chunk) >= CHUNK or size >= CHUNK_BYTES:
                    yield chunk, read
                    chunk, size, read = [], 0, 0
        else:
            pieces.append(data)
        if chunk and not ready.poll(READY_WAIT_MS):
            yield chunk, read
            chunk, size, read = [], 0, 0
    if pieces:  # the last line, with no line end
        raw = b"".join(pieces)
        chunk.append(raw.rstrip(b"\r\n"))
        read += len(raw)
    if chunk:
        yield chunk, read


class _Tally:
    """Counts the chunks' results as they arrive, keeping only the futures still pending."""

    def __init__(self) -> None:
        self.lines = self.delivered = self.failed = 0
        self.causes: Counter[str] = Counter()
        self._pending: deque[Future] = deque()

    def add(self, future: Future, lines: int) -> None:
        self.lines += lines
        self._pending.append(future)
        while self._pending and self._pending[0].done():
            self._count(self._pending.popleft())

    def finish(self) -> None:
        while self._pending:
            self._count(self._pending.popleft())

    def outcomes(self, outcomes: list[Any]) -> None:
        """The in-process pipeline's outcomes (`Outcome`: ids, error or None)."""
        for outcome in outcomes:
            n = len(outcome.ids)
            if outcome.error is None:
                self.delivered += n
            else:
                self.failed += n
                self._cause(outcome.error, n)

    def _count(self, future: Future) -> None:
        result = future.result()
        self.delivered += result.delivered
        self.failed += result.failed
        for error in result.errors if result.failed else ():
            if error is not None:
                self._cause(error, 1)

    def _cause(self, error: Exception, n: int) -> None:
        cause = str(error)
        self.causes[cause if cause in self.causes or len(self.causes) < CAUSES_KEPT else "(other causes)"] += n


def _columns(args: argparse.Namespace, lines: list[bytes], sep: bytes | None
             ) -> tuple[list[bytes | None] | None, list[bytes], list[int] | None]:
    """A chunk's keys (split off at the first `sep`; None without -K), values and partitions
    (every line to -p's, or None: the partitioner decides)."""
    keys = None
    values = lines
    if sep is not None:
        split = [line.split(sep, 1) for line in lines]
        keys = [parts[0] if len(parts) == 2 else None for parts in split]
        values = [parts[-1] for parts in split]
    partitions = None if args.partition is None else [args.partition] * len(values)
    return keys, values, partitions

"""`raykafka produce`'s reading of its input into chunks (app/cli_produce.py `chunks`): a pipe's
lines are handed on as soon as no more input is ready, a file's in whole chunks."""

from __future__ import annotations

import fcntl
import io
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from raykafka.app import cli_produce
from raykafka.app.cli_produce import CHUNK, READ_BYTES, chunks

WAIT = 10.0  # s a test waits for a chunk that should come at once
PIPE_ROOM = 1 << 20  # bytes a test's pipe holds (Linux's default pipe-max-size)


class Taker:
    """Takes a chunk generator's next chunk on a thread, so that a test can wait for it with a
    deadline (a chunk that never comes fails the test, it does not hang it)."""

    def __init__(self, generator: Iterator[Any]):
        self.generator = generator

    def next(self, timeout: float = WAIT) -> Any:
        got: list[Any] = []
        thread = threading.Thread(target=lambda: got.append(next(self.generator, None)), daemon=True)
        thread.start()
        thread.join(timeout)
        assert got, f"no chunk within {timeout} s"
        return got[0]


@pytest.fixture()
def pipe() -> Iterator[tuple[Any, Any]]:
    r, w = os.pipe()
    reader, writer = os.fdopen(r, "rb"), os.fdopen(w, "wb", buffering=0)
    yield reader, writer
    for end in (reader, writer):
        if not end.closed:
            end.close()


def test_a_line_from_a_slow_pipe_is_handed_on_before_the_next_one_comes(pipe):
    """`(echo a; sleep 30; echo b) | raykafka produce`: `a` is handed on while the writer still
    holds the pipe open, not when `b` or the end comes."""
    reader, writer = pipe
    taker = Taker(chunks(reader))
    writer.write(b"a\n")
    assert taker.next() == ([b"a"], 2)
    writer.write(b"b\r\nc")  # a CRLF line, and one whose end comes later
    assert taker.next() == ([b"b"], 3)
    writer.write(b"c still\n")
    assert taker.next() == ([b"cc still"], 9)
    writer.write(b"last, with no line end")
    writer.close()
    assert taker.next() == ([b"last, with no line end"], 22)
    assert taker.next() is None


def test_a_pipe_with_more_input_ready_fills_whole_chunks(pipe):
    """Lines already waiting in the pipe go in chunks of CHUNK lines, not one read's worth each
    (`cat big-file | raykafka produce` keeps its big chunks); what is left once nothing more is
    ready goes at once."""
    reader, writer = pipe
    try:  # room for every line at once, so that all of them are ready before the first read
        fcntl.fcntl(writer.fileno(), fcntl.F_SETPIPE_SZ, PIPE_ROOM)
    except (AttributeError, OSError) as exc:
        pytest.skip(f"no pipe of {PIPE_ROOM} bytes here: {exc}")
    lines = 2 * CHUNK + 5
    data = b"".join(b"%d\n" % i for i in range(lines))
    assert READ_BYTES < len(data) <= PIPE_ROOM, "more than one read's worth is ready"
    writer.write(data)
    taker = Taker(chunks(reader))
    got = [taker.next() for _ in range(3)]
    assert [len(chunk) for chunk, _ in got] == [CHUNK, CHUNK, 5]
    assert [line for chunk, _ in got for line in chunk] == [b"%d" % i for i in range(lines)]
    assert sum(read for _, read in got) == len(data)
    writer.close()
    assert taker.next() is None


def test_a_line_longer_than_a_read_is_joined_whole(pipe):
    reader, writer = pipe
    long_line = b"x" * (3 * READ_BYTES + 7)
    threading.Thread(target=lambda: (writer.write(long_line + b"\nshort\n"), writer.close()), daemon=True).start()
    got = [line for chunk, _ in chunks(reader) for line in chunk]
    assert got == [long_line, b"short"]


def test_a_chunk_holds_at_most_chunk_bytes(pipe, monkeypatch):
    monkeypatch.setattr(cli_produce, "CHUNK_BYTES", 10)
    reader, writer = pipe
    writer.write(b"12345\n67890\nabc\n")
    writer.close()
    assert [chunk for chunk, _ in chunks(reader)] == [[b"12345", b"67890"], [b"abc"]]


def test_a_file_goes_in_whole_chunks(tmp_path):
    path = tmp_path / "lines"
    path.write_bytes(b"".join(b"line %d\r\n" % i for i in range(CHUNK + 1)))
    with open(path, "rb") as stream:
        got = list(chunks(stream))
    assert [len(chunk) for chunk, _ in got] == [CHUNK, 1]
    assert got[1] == ([b"line %d" % CHUNK], len(b"line %d\r\n" % CHUNK))


def test_a_stream_with_no_descriptor_is_read_line_by_line():
    text = io.TextIOWrapper(io.BytesIO(b"a\nb\n"))
    assert list(chunks(text)) == [([b"a", b"b"], 4)]

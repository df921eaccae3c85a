"""A gzip stream inflated on its own thread: the bytes, forward seeks, errors, stopping."""

from __future__ import annotations

import gzip
import io
import os
import zlib

import pytest

from server_bootstrap.inflate import Inflating


class Chunked:
    """A download: ``data`` handed out in small pieces; remembers whether it hit the end."""

    def __init__(self, data: bytes, piece: int = 7000) -> None:
        self._data = io.BytesIO(data)
        self._piece = piece
        self.ended = False

    def read(self, size: int = -1) -> bytes:
        chunk = self._data.read(min(self._piece, size) if size >= 0 else self._piece)
        self.ended = self.ended or not chunk
        return chunk


PAYLOAD = os.urandom(300_000) + b"text " * 200_000


def test_reads_seeks_forward_and_tells() -> None:
    stream = Chunked(gzip.compress(PAYLOAD))
    reader = Inflating(stream)
    try:
        assert reader.read(10) == PAYLOAD[:10] and reader.tell() == 10
        assert reader.seek(250_000) == 250_000
        assert reader.read(100_000) == PAYLOAD[250_000:350_000]
        assert reader.seek(5, 1) == 350_005
        assert reader.read() == PAYLOAD[350_005:]
        assert reader.read(10) == b""
        with pytest.raises(OSError, match="forward"):
            reader.seek(0)
    finally:
        reader.close()


def test_several_members_back_to_back_and_a_first_piece_read_already() -> None:
    data = gzip.compress(PAYLOAD[:1000]) + gzip.compress(PAYLOAD[1000:])
    reader = Inflating(Chunked(data[100:]), first=data[:100])
    try:
        assert reader.read() == PAYLOAD
    finally:
        reader.close()


def test_drain_reads_the_stream_to_its_end() -> None:
    stream = Chunked(gzip.compress(PAYLOAD))
    reader = Inflating(stream)
    assert reader.read(10) == PAYLOAD[:10]
    reader.drain()
    assert stream.ended  # a download's checksum then covers every byte


def test_a_truncated_stream_is_an_error_not_a_short_file() -> None:
    reader = Inflating(Chunked(gzip.compress(PAYLOAD)[:-50_000]))
    try:
        with pytest.raises(EOFError, match="end marker"):
            reader.read()
    finally:
        reader.close()


def test_corrupt_data_is_raised_to_the_reader() -> None:
    data = bytearray(gzip.compress(PAYLOAD))
    data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
    reader = Inflating(Chunked(bytes(data)))
    try:
        with pytest.raises(zlib.error):
            reader.read()
    finally:
        reader.close()


def test_close_stops_a_thread_that_is_ahead_of_the_reader() -> None:
    big = gzip.compress(b"\0" * 64_000_000)  # far more than the chunks held ahead
    reader = Inflating(Chunked(big, piece=1 << 16))
    assert reader.read(1) == b"\0"
    reader.close()  # returns: the thread stops although nobody reads on
    assert not reader._thread.is_alive()

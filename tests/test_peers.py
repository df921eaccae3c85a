"""The pod's ranks through their records: liveness, the leader lock, forwarding, activity."""

from __future__ import annotations

import http.server
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interactive.base import record
from interactive.distributed.peers import (
    PEER_HEADER,
    Peers,
    PeerSampler,
    PeerWatch,
    process_identity,
)
from interactive.distributed.ranks import RankInfo

TWO = RankInfo(rank=0, world_size=2, local_rank=0, local_world_size=2)
PEER = RankInfo(rank=1, world_size=2, local_rank=1, local_world_size=2)


def write(base: Path, local_rank: int, **fields: Any) -> None:
    record.write_session(base / f"rank-{local_rank}", {**process_identity(), **fields})


def test_a_peer_is_alive_only_while_its_process_is(tmp_path: Path) -> None:
    write(tmp_path, 1, state="waiting", task="t")
    assert Peers(tmp_path, TWO).others()[0].state == "waiting"
    write(tmp_path, 1, state="waiting", pid=os.getpid(), started=1.0)  # a reused pid
    assert Peers(tmp_path, TWO).others()[0].state == "gone"


def test_status_lists_every_other_local_rank(tmp_path: Path) -> None:
    info = RankInfo(0, 3, 0, 3)
    write(tmp_path, 2, state="waiting", task="t", error="E: x", rank=RankInfo(2, 3, 2, 3).as_dict())
    assert Peers(tmp_path, info).status() == [
        {"local_rank": 1, "state": "not started"},
        {
            "local_rank": 2,
            "rank": 2,
            "state": "waiting",
            "task": "t",
            "error": "E: x",
            "debug": None,
        },
    ]


def test_one_leader_per_pod_until_it_lets_go(tmp_path: Path) -> None:
    first, second = Peers(tmp_path, TWO), Peers(tmp_path, PEER)
    assert first.try_lead() and first.try_lead()
    assert not second.try_lead()
    first.release()
    assert second.try_lead()
    second.release()


def test_a_cleaned_up_rank_ends_after_the_leader_within_a_bound(tmp_path: Path) -> None:
    """torchrun ends every rank once one ends: a rank cleaned up before the leader waits
    for the leader's end (its final email, the pod's deletion), but not for ever."""
    write(tmp_path, 1, state="reaping", leader=True, task="t")
    peers, now, slept = Peers(tmp_path, TWO), [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds
        if len(slept) == 3:  # the leader's cleanup is over: its task ended
            write(tmp_path, 1, state="failed", leader=True, task="t")

    assert peers.outlive_leader(60, poll=1, sleep=sleep, clock=lambda: now[0])
    assert slept == [1, 1, 1]
    write(tmp_path, 1, state="reaping", leader=True, task="t")  # a leader that never ends
    assert not peers.outlive_leader(5, poll=1, sleep=sleep, clock=lambda: now[0])
    assert len(slept) == 3 + 5


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None, str | None]] = []

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append((self.path, self.headers["Authorization"], self.headers[PEER_HEADER]))
        self.send_response(202)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def peer_api() -> Iterator[str]:
    Recorder.seen = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_resume_is_forwarded_to_ranks_in_a_session_marked_as_from_a_peer(
    tmp_path: Path, peer_api: str, caplog: pytest.LogCaptureFixture
) -> None:
    info = RankInfo(0, 4, 0, 4)
    write(tmp_path, 1, state="waiting", control_url=peer_api, token="t1")
    write(tmp_path, 2, state="running")  # still in its task: not told, but said
    write(tmp_path, 3, state="resuming", control_url=peer_api, token="t3")  # already going
    with caplog.at_level(logging.WARNING):
        assert Peers(tmp_path, info).forward("resume") == [1]
    assert Recorder.seen == [("/api/resume", "Bearer t1", "1")]
    assert "local ranks [2] are not in a session" in caplog.text


def test_a_peer_that_does_not_answer_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, 1, state="waiting", control_url="http://127.0.0.1:9", token="t")
    with caplog.at_level(logging.WARNING):
        assert Peers(tmp_path, TWO).forward("abort") == []
    assert "could not abort local rank 1" in caplog.text


def test_sampler_adopts_peer_activity_and_counts_a_running_peer_as_busy(tmp_path: Path) -> None:
    touched: list[float] = []
    published: list[bool] = []
    sampler = PeerSampler(Peers(tmp_path, TWO), touched.append, lambda: published.append(True))
    write(tmp_path, 1, state="waiting", last_activity=1234.5)
    sample = sampler.sample(2000.0)
    assert not sample.active and touched == [1234.5] and published == [True]
    write(tmp_path, 1, state="running", last_activity=1234.5)
    assert sampler.sample(2010.0).active


def test_watch_says_once_what_this_rank_waits_on(tmp_path: Path) -> None:
    watch = PeerWatch(Peers(tmp_path, TWO))
    assert watch.check() == []
    write(tmp_path, 1, state="waiting", task="m.step", error="ValueError: x", attempt=1)
    [line] = watch.check()
    assert "local rank 1 failed in m.step (ValueError: x)" in line
    assert watch.check() == []  # once per peer session
    write(tmp_path, 1, state="waiting", task="m.step", error="ValueError: y", attempt=2)
    watch.in_session = True  # this rank's own session is open: nothing to report
    assert watch.check() == []
    assert json.loads((tmp_path / "rank-1" / "session.json").read_text())["attempt"] == 2


def test_a_rank_stopped_by_a_peers_failure_names_that_peer(tmp_path: Path) -> None:
    """Rank 1 announces its bug before breaking the group; rank 0 finds it, and a rank
    that failed only because of the group (because=...) is nobody's culprit."""
    failing, victim = Peers(tmp_path, PEER), Peers(tmp_path, TWO)
    assert victim.culprit() is None
    failing.announce_failure("IndexError: list index out of range", because=None)
    assert victim.culprit() == (1, "IndexError: list index out of range")
    victim.announce_failure("RuntimeError: Connection closed by peer", because=1)
    assert failing.culprit() is None
    failing.withdraw_failure()  # it resumes
    assert victim.culprit() is None


def test_an_announcement_of_a_process_gone_is_ignored(tmp_path: Path) -> None:
    Peers(tmp_path, PEER).announce_failure("ValueError: x", because=None)
    path = tmp_path / "rank-1" / "failure.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "started": 1.0}))
    assert Peers(tmp_path, TWO).culprit() is None


def test_what_a_broken_group_raises_is_told_from_a_bug() -> None:
    from interactive.distributed.peers import broke_with_the_group

    closed = RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                          "[127.0.0.1]:40059")
    assert broke_with_the_group(closed)
    assert not broke_with_the_group(IndexError("list index out of range"))


def test_each_rank_endpoint_names_where_that_ranks_record_is(tmp_path: Path) -> None:
    """The IDE's notebook finds another rank's control API through its record."""
    from interactive.base.settings import PortSettings
    from interactive.doors.vscode_files import RankEndpoint, rank_endpoints

    write(tmp_path, 0, state="waiting", debug={"host": "127.0.0.1", "port": 7001})
    endpoints = rank_endpoints(Peers(tmp_path, PEER), ("127.0.0.1", 7002), PortSettings())
    assert endpoints == [
        RankEndpoint(0, "127.0.0.1", 7001, str(tmp_path / "rank-0" / record.FILE)),
        RankEndpoint(1, "127.0.0.1", 7002, None),
    ]
    assert Peers(tmp_path, PEER).other_records() == {0: tmp_path / "rank-0" / record.FILE}

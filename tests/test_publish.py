"""The publisher: a phase reaches session.json, the pod's label and the ranks, tracked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from interactive.base import record
from interactive.base.identity import own_session_id, process_identity
from interactive.base.loop import LoopThread
from interactive.base.phases import CommandKind, Phase
from interactive.base.record import SessionRecord
from interactive.distributed.peers import Peers
from interactive.distributed.ranks import RankInfo
from interactive.kube.pod import PodClient
from interactive.session.publish import Publisher
from tests.fake_kube import FakeKube
from tests.waiting import wait_until

PORTS = {"code_server": 8080, "control": 8081, "debug": 5678}


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("test-publish")
    yield thread
    thread.stop()


def serving(phase: Phase) -> SessionRecord:
    return SessionRecord(phase, task="m.fit", workspace="/src", control_url="http://h:1",
                         token="t", debug_host="127.0.0.1", debug_port=5678,
                         **process_identity())


@dataclass
class FakePod:
    """A pod whose ``set_state`` can be held until the test lets it go."""

    problems: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    sessions: dict[str, str] = field(default_factory=dict)
    """Each session's own annotation, by id: its task."""

    def mark_session(self, *, task: str, state: str, owner: str | None,
                     ports: Mapping[str, int], home: str, session: str | None = None) -> None:
        self.calls.append(("mark", state))
        if session:
            self.sessions[session] = task

    def end_session(self, session: str, state: str) -> None:
        self.sessions.pop(session, None)
        self.calls.append(("end", state))

    def set_state(self, state: str) -> None:
        self.release.wait(30)
        self.calls.append(("state", state))


def test_a_phase_change_labels_the_pod_and_writes_session_json(
    fake_kube: FakeKube, loop: LoopThread, tmp_path: Path
) -> None:
    fake_kube.add_pod("train-0", "ml")
    pod = PodClient.discover(
        {"POD_NAME": "train-0", "POD_NAMESPACE": "ml", "KUBECONFIG": str(fake_kube.kubeconfig)}
    )
    assert pod is not None
    publisher = Publisher(loop, home=tmp_path, base_home=tmp_path, leader=True)
    publisher.publish(lambda: serving(Phase.WAITING))
    loop.call(publisher.mark_pod(pod, task="m.fit", owner="bo@example.com", ports=PORTS))
    meta = fake_kube.pod("train-0", "ml")["metadata"]  # type: ignore[index]
    assert meta["labels"] == {"podcode.io/session": "true", "podcode.io/state": "waiting"}
    assert meta["annotations"]["podcode.io/task"] == "m.fit"
    assert meta["annotations"]["podcode.io/owner"] == "bo@example.com"
    assert json.loads(meta["annotations"]["podcode.io/ports"]) == PORTS
    assert meta["annotations"]["podcode.io/home"] == str(tmp_path)
    own = f"sessions.podcode.io/{own_session_id()}"  # this session's own annotation
    assert json.loads(meta["annotations"][own]) == {"task": "m.fit", "pid": os.getpid(),
                                                    "ports": PORTS}
    assert [event["reason"] for event in fake_kube.events] == ["PodcodeWaiting"]

    publisher.publish(lambda: serving(Phase.RESUMING))
    publisher.publish(lambda: serving(Phase.RUNNING))
    publisher.close()  # waits for the labels
    assert publisher.pending() == []
    labels = fake_kube.pod("train-0", "ml")["metadata"]["labels"]  # type: ignore[index]
    assert labels["podcode.io/state"] == "running"
    for path in (record.session_dir(tmp_path) / "session.json", tmp_path / "session.json"):
        assert json.loads(path.read_text())["state"] == "running"

    patches = len([r for r in fake_kube.requests if r.method == "PATCH"])
    publisher.finish(SessionRecord(Phase.DONE, task="m.fit", workspace="/src",
                                   **process_identity()))
    assert len([r for r in fake_kube.requests if r.method == "PATCH"]) == patches + 1
    labels = fake_kube.pod("train-0", "ml")["metadata"]["labels"]  # type: ignore[index]
    assert labels["podcode.io/state"] == "done"
    annotations = fake_kube.pod("train-0", "ml")["metadata"]["annotations"]  # type: ignore[index]
    assert own not in annotations  # the session closed: its annotation went with it
    assert record.read_session(tmp_path) == {"state": "done", "task": "m.fit", "error": None,
                                             "workspace": "/src", **process_identity()}
    pod.close()


def test_labels_follow_the_phases_in_order(loop: LoopThread, tmp_path: Path) -> None:
    pod = FakePod()
    publisher = Publisher(loop, home=tmp_path, base_home=tmp_path, leader=False)
    publisher.publish(lambda: serving(Phase.WAITING))
    loop.call(publisher.mark_pod(pod, task="m.fit", owner=None, ports=PORTS))
    for phase in (Phase.RESUMING, Phase.RUNNING, Phase.WAITING):
        publisher.publish(lambda phase=phase: serving(phase))
    pod.release.set()
    publisher.close()
    assert pod.calls == [("mark", "waiting"), ("state", "resuming"), ("state", "running"),
                         ("state", "waiting")]
    assert not (tmp_path / "session.json").exists()  # not the leader: the home is not claimed
    assert record.SessionRecord.load(record.session_dir(tmp_path) / "session.json") == serving(
        Phase.WAITING)


def test_close_leaves_no_publishing_work_behind(loop: LoopThread, tmp_path: Path) -> None:
    pod = FakePod()  # its label calls hang until released
    publisher = Publisher(loop, home=tmp_path, base_home=tmp_path, leader=True)
    loop.call(publisher.mark_pod(pod, task="m.fit", owner=None, ports=PORTS))
    publisher.publish(lambda: serving(Phase.WAITING))
    publisher.publish(lambda: serving(Phase.RESUMING))
    assert publisher.pending() == ["label the pod waiting", "label the pod resuming"]
    publisher.close(timeout=0.05)  # gives up on the hanging calls: cancelled
    assert publisher.pending() == []
    publisher.publish(lambda: serving(Phase.RUNNING))  # after close: the record only
    assert publisher.pending() == []
    assert record.read_session(tmp_path)["state"] == "running"  # type: ignore[index]
    pod.release.set()


def test_peers_are_told_in_the_background_and_tracked(
    loop: LoopThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    told: list[CommandKind] = []
    release = threading.Event()

    def forward(self: Peers, command: CommandKind) -> list[int]:
        release.wait(30)
        told.append(command)
        return [1]

    monkeypatch.setattr(Peers, "forward", forward)
    peers = Peers(tmp_path, RankInfo(0, 2, 0, 2))
    publisher = Publisher(loop, home=tmp_path / "rank-0", base_home=tmp_path, leader=True,
                          peers=peers)
    publisher.tell_peers(CommandKind.ABORT)
    assert publisher.pending() == ["tell the ranks abort"]
    release.set()
    publisher.close()
    assert told == [CommandKind.ABORT] and publisher.pending() == []


def test_a_failing_pod_is_logged_and_never_stops_the_session(
    loop: LoopThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class BrokenPod(FakePod):
        def set_state(self, state: str) -> Any:
            raise RuntimeError("API down")

        def end_session(self, session: str, state: str) -> Any:
            raise RuntimeError("API down")

    publisher = Publisher(loop, home=tmp_path, base_home=tmp_path, leader=True)
    loop.call(publisher.mark_pod(BrokenPod(), task="m.fit", owner=None, ports=PORTS))
    publisher.publish(lambda: serving(Phase.WAITING))
    publisher.close()
    publisher.finish(SessionRecord(Phase.FAILED, task="m.fit", **process_identity()))
    assert "could not label the pod waiting" in caplog.text
    assert "could not label the pod failed" in caplog.text
    assert record.read_session(tmp_path)["state"] == "failed"  # type: ignore[index]


def test_sessions_of_one_process_label_their_pod_with_the_phase_that_needs_a_person(
    loop: LoopThread, tmp_path: Path
) -> None:
    """A session that waits keeps the pod findable while another one of its process runs
    again or ends; the last one to end says how it ended."""
    pod = FakePod()
    pod.release.set()
    first, second = (Publisher(loop, home=tmp_path, base_home=tmp_path, leader=True,
                               session=name) for name in ("9-1", "9-1-2"))
    first.publish(lambda: serving(Phase.WAITING))
    loop.call(first.mark_pod(pod, task="m.fit", owner=None, ports=PORTS))
    second.publish(lambda: serving(Phase.WAITING))
    loop.call(second.mark_pod(pod, task="m.fit", owner=None, ports=PORTS))
    assert pod.sessions == {"9-1": "m.fit", "9-1-2": "m.fit"}  # each has its annotation
    monitored = second.labelling(pod)  # what the second's idle monitor labels with
    monitored.set_state("reaping")  # cleaned up: the first one still waits
    assert pod.calls[-1] == ("state", "waiting") and monitored.sessions is pod.sessions
    second.publish(lambda: serving(Phase.RESUMING))  # the other one still waits
    second.publish(lambda: serving(Phase.RUNNING))
    second.close()
    second.finish(SessionRecord(Phase.DONE, task="m.fit", **process_identity()))
    assert pod.sessions == {"9-1": "m.fit"}  # the ended one's annotation is gone
    first.publish(lambda: serving(Phase.RESUMING))  # alone now
    first.close()
    first.finish(SessionRecord(Phase.FAILED, task="m.fit", **process_identity()))
    assert pod.calls == [("mark", "waiting"), ("mark", "waiting"), ("state", "waiting"),
                         ("state", "waiting"), ("state", "waiting"), ("end", "waiting"),
                         ("state", "resuming"), ("end", "failed")]


def test_a_worker_whose_session_ends_leaves_a_shared_pod_marked_for_anothers_waiting(
    loop: LoopThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Ray workers of one pod, each with a session (other processes, one home): the
    one that resumes and ends labels the pod with the other's ``waiting``, so ``podcode
    attach POD`` still reaches it."""
    from interactive.base.identity import process_started, session_id
    from interactive.session import publish

    monkeypatch.setattr(publish, "pod_shared", lambda: True)  # a Ray node
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = wait_until(lambda: process_started(other.pid), "the other worker", 10, 0.05)
        theirs = SessionRecord(Phase.WAITING, task="m.other", workspace="/src",
                               control_url="http://h:2", token="u", pid=other.pid,
                               started=started)
        record.write_records(theirs, tmp_path, tmp_path, claim=False,
                             session=session_id(other.pid, started))
        pod = FakePod()
        pod.release.set()
        ours = Publisher(loop, home=tmp_path, base_home=tmp_path, leader=True)
        ours.publish(lambda: serving(Phase.WAITING))
        loop.call(ours.mark_pod(pod, task="m.fit", owner=None, ports=PORTS))
        ours.publish(lambda: serving(Phase.RESUMING))
        ours.close()
        ours.finish(SessionRecord(Phase.DONE, task="m.fit", **process_identity()))
        assert pod.calls[-1] == ("end", "waiting"), pod.calls  # the other still waits
        other.kill()
        other.wait(10)
        again = Publisher(loop, home=tmp_path, base_home=tmp_path, leader=True)
        again.publish(lambda: serving(Phase.WAITING))
        loop.call(again.mark_pod(pod, task="m.fit", owner=None, ports=PORTS))
        again.close()
        again.finish(SessionRecord(Phase.DONE, task="m.fit", **process_identity()))
        assert pod.calls[-1] == ("end", "done"), "a gone worker's record does not count"
    finally:
        other.kill()
        other.wait(10)

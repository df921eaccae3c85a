"""One session per bug across a job's pods, against a real torch ``TCPStore``: a server
in this process (``is_master=True`` on a free port) and, for each pod, clients of its
own, as :class:`JobStore` opens them in a pod."""

from __future__ import annotations

import datetime
import gc
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest

dist = pytest.importorskip("torch.distributed")

from interactive.base.errors import ResumeConflict  # noqa: E402
from interactive.distributed import jobfiles, jobsecret, jobsession, jobstore  # noqa: E402
from interactive.distributed.jobbeats import Beats, spacing, wardens  # noqa: E402
from interactive.distributed.jobfiles import apply_fix, edits_since  # noqa: E402
from interactive.distributed.jobfix import FixRefused, Verdict  # noqa: E402
from interactive.distributed.jobsession import (  # noqa: E402
    ABORT,
    ASKED,
    END,
    RESUME,
    JobCommand,
    JobSession,
    several_pods,
)
from interactive.distributed.jobstore import Bug, JobStore, StoreAddress  # noqa: E402
from interactive.distributed.ranks import RankInfo  # noqa: E402
from interactive.session.across_pods import JobRole, JobSampler  # noqa: E402
from interactive.storage.workspace import Snapshot  # noqa: E402
from tests.waiting import in_threads  # noqa: E402

if TYPE_CHECKING:
    from interactive.session.core import Session

SECRET = "a shared secret of the job, 32 b"
GROUP_BROKE = "RuntimeError: Connection closed by peer"
_runs = itertools.count(1)


@pytest.fixture(autouse=True)
def job_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pod holds the job's secret unless a test says otherwise."""
    monkeypatch.setenv(jobsecret.ENV, SECRET)
    monkeypatch.delenv(jobsecret.ENV_FILE, raising=False)


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    """One store for the module; each test runs a job of its own (:class:`Job`)."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=30))
    yield store


@pytest.fixture(scope="module")
def clients() -> dict[str, tuple[Any, Any]]:
    """Each pod's two clients, connected once for the module (torch's client at times
    takes seconds to connect); they hold nothing of a test: its keys are its own."""
    return {}


@dataclass
class Job:
    """One run of a job in the store: its keys lie under a restart count of their own."""

    port: int
    clients: dict[str, tuple[Any, Any]]
    restart: int = field(default_factory=lambda: next(_runs))
    named: set[str] = field(default_factory=set)

    def pod(self, name: str) -> JobStore:
        """A pod's channel, as :meth:`JobStore.open` makes it: two clients of its own."""
        assert name not in self.named, f"pod {name} joined this job twice"
        self.named.add(name)
        where = StoreAddress("127.0.0.1", self.port, self.restart)
        if name not in self.clients:
            self.clients[name] = (jobstore.connect(where), jobstore.connect(where))
        client, waiter = self.clients[name]
        return JobStore(client, where.namespace, name, where, waiter=waiter)

    def pods(self, count: int) -> list[JobStore]:
        return [self.pod(f"train-{index}") for index in range(count)]


@pytest.fixture
def job(server: Any, clients: dict[str, tuple[Any, Any]]) -> Job:
    return Job(server.port, clients)


def on_pod(monkeypatch: pytest.MonkeyPatch, store: JobStore) -> None:
    """This process's channel is ``store`` (as if opened from the pod's environment)."""
    monkeypatch.setattr(jobsession, "channel", lambda: store)


def claim(monkeypatch: pytest.MonkeyPatch, store: JobStore, rank: int,
          error: BaseException) -> None:
    on_pod(monkeypatch, store)
    jobsession.claim_failure(rank, error)


def join(monkeypatch: pytest.MonkeyPatch, store: JobStore, rank: int = 0,
         error: str | None = GROUP_BROKE) -> JobSession:
    on_pod(monkeypatch, store)
    session = JobSession.join(rank, error)
    assert session is not None
    return session


def joined(monkeypatch: pytest.MonkeyPatch, job: Job, count: int) -> list[JobSession]:
    """``count`` pods in the job's session for a bug of ``train-0`` (which serves it)."""
    stores = job.pods(count)
    claim(monkeypatch, stores[0], 0, IndexError("list index out of range"))
    return [join(monkeypatch, store, rank=8 * index) for index, store in enumerate(stores)]


class Waiting:
    """:meth:`JobSession.next_command` on a thread of its own."""

    def __init__(self, session: JobSession) -> None:
        self.got: list[JobCommand | None] = []
        self.thread = threading.Thread(target=lambda: self.got.append(session.next_command()),
                                       daemon=True)
        self.thread.start()

    def still_waiting(self) -> bool:
        self.thread.join(0.2)
        return self.thread.is_alive()

    def result(self) -> JobCommand | None:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the wait for the job's command did not end"
        assert len(self.got) == 1
        return self.got[0]


# -- workspaces ------------------------------------------------------------------------------

ORIGINAL = {
    "train.py": b"loss = model(x)[0]\n",
    "model/layers.py": b"WIDTH = 128\n",
    "run.sh": b"#!/bin/sh\npython train.py\n",
    "weights.bin": b"\0\1\2\3",
    "notes.txt": b"to be deleted\n",
}
FIXED = {
    "train.py": b"loss = model(x).mean()\n",
    "run.sh": b"#!/bin/sh\nexec python train.py\n",
    "model/init.py": b"from .layers import WIDTH\n",
}


def workspace(root: Path, files: dict[str, bytes] = ORIGINAL) -> Path:
    """A pod's copy of the code (``run.sh`` executable)."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    (root / "run.sh").chmod(0o755)
    return root


def contents(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def edit(root: Path) -> Snapshot:
    """The engineer's fix on the failing pod: two files edited, one new, a binary file
    edited and a file deleted (neither of which a fix carries). The snapshot of the
    failure, taken before."""
    snapshot = Snapshot.take(root)
    for rel, content in FIXED.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    (root / "weights.bin").write_bytes(b"\0\4\5\6\7")
    (root / "notes.txt").unlink()
    return snapshot


def edits_of(snapshot: Snapshot) -> jobfiles.Edits:
    return edits_since(snapshot.root, snapshot.changed(), snapshot.texts,
                       set(snapshot.stamps))


# -- the bug and the pod that serves the session -------------------------------------------


def test_every_pod_joins_the_session_of_the_pod_whose_rank_failed(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = job.pods(3)
    claim(monkeypatch, stores[1], 9, ValueError("bad shape"))
    sessions = [join(monkeypatch, store, rank) for store, rank in zip(stores, (0, 9, 17))]
    failed = Bug(9, "train-1", "ValueError", "bad shape")
    assert [(s.generation, s.bug, s.serving) for s in sessions] == [(0, failed, "train-1")] * 3
    assert [s.owner for s in sessions] == [False, True, False]
    where = sessions[0].where()
    assert "on pod train-1" in where and "rank 9" in where and "ValueError: bad shape" in where
    status = sessions[2].status()
    assert status == {"pod": "train-2", "session_pod": "train-1", "generation": 0,
                      "failed_rank": 9, "failed_pod": "train-1",
                      "error": "ValueError: bad shape", "serves_session": False,
                      "command": None}


def test_a_pod_that_finds_no_bug_claimed_claims_it_and_serves_the_session(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, later = job.pod("train-1"), job.pod("train-0")
    mine = join(monkeypatch, first, 5, GROUP_BROKE)
    assert mine.bug == Bug(5, "train-1", "RuntimeError", "Connection closed by peer")
    assert mine.owner and mine.serving == "train-1"
    theirs = join(monkeypatch, later, 0, "KeyError: 'x'")
    assert theirs.bug == mine.bug and theirs.serving == "train-1" and not theirs.owner


def test_the_pod_serving_the_session_stays_for_the_next_bug_on_another_pod(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = joined(monkeypatch, job, 3)
    assert {s.serving for s in first} == {"train-0"}
    assert first[0].store.bump_generation() == 1  # resumed
    stores = [session.store for session in first]
    claim(monkeypatch, stores[2], 17, KeyError("step"))
    second = [join(monkeypatch, store, 8 * index) for index, store in enumerate(stores)]
    assert {(s.generation, s.bug.pod, s.bug.error) for s in second} == {(1, "train-2", "KeyError")}
    assert [s.serving for s in second] == ["train-0"] * 3
    assert [s.owner for s in second] == [True, False, False]
    assert "on pod train-0" in second[1].where() and "pod train-2 failed" in second[1].where()


def test_the_channel_is_opened_from_the_launchers_variables(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobsession, "_store", None)
    monkeypatch.setattr(jobsession, "_tried", False)
    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(job.port),
                        jobstore.RESTART: str(job.restart), "POD_NAME": "train-3"}.items():
        monkeypatch.setenv(name, value)
    jobsession.claim_failure(27, TypeError("unsupported operand"))
    channel = jobsession.channel()
    assert channel is not None and channel.pod == "train-3"
    assert job.pod("train-0").bug(0) == Bug(27, "train-3", "TypeError", "unsupported operand")


def test_a_job_spans_several_pods_when_its_world_outgrows_one_pod() -> None:
    assert several_pods(RankInfo(3, 16, 3, 8))
    assert not several_pods(RankInfo(3, 8, 3, 8))
    assert not several_pods(RankInfo())


def test_a_command_reads_back_as_posted_and_garbage_reads_as_none() -> None:
    command = JobCommand(RESUME, "train-0", fix=True, why="asked")
    assert JobCommand.decode(command.encode()) == command
    for raw in (None, b"", b"not json", b'{"pod": "x"}', b"[1]"):
        assert JobCommand.decode(raw) is None


# -- commands --------------------------------------------------------------------------------


def test_the_first_command_posted_stands_when_a_resume_and_an_abort_cross(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, other, third = joined(monkeypatch, job, 3)
    stood = in_threads([lambda: owner.post(RESUME), lambda: other.post(ABORT, "wrong fix")])
    assert stood[0] == stood[1] == third.command()
    assert stood[0] in (JobCommand(RESUME, "train-0"),
                        JobCommand(ABORT, "train-1", why="wrong fix"))
    assert third.post(END, "cleaned up") == stood[0]
    assert third.status(stood[0])["command"] == stood[0].kind  # as far as the pod knows
    assert third.status()["command"] is None  # a status never asks the store


def test_pods_that_do_not_serve_the_session_wake_on_the_command(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, *others = joined(monkeypatch, job, 3)
    waiting = [Waiting(session) for session in others]
    assert all(wait.still_waiting() for wait in waiting)
    owner.request_resume()  # a request wakes the serving pod only
    assert all(wait.still_waiting() for wait in waiting)
    owner.post(ABORT, "the engineer aborted")
    expected = JobCommand(ABORT, "train-0", why="the engineer aborted")
    assert [wait.result() for wait in waiting] == [expected, expected]


def test_the_serving_pod_wakes_on_a_resume_asked_by_another_pod(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    waiting = Waiting(owner)
    assert waiting.still_waiting()
    other.request_resume()
    assert waiting.result() == JobCommand(RESUME, "train-1", why=ASKED)
    assert owner.command() is None  # asked, not posted


def test_the_serving_pod_wakes_on_a_command_posted_by_another_pod(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    waiting = Waiting(owner)
    assert waiting.still_waiting()
    other.post(END, "pod train-1 is being stopped (SIGTERM)")
    assert waiting.result() == JobCommand(END, "train-1",
                                          why="pod train-1 is being stopped (SIGTERM)")


# -- the fix ---------------------------------------------------------------------------------


def test_a_fix_posted_by_the_serving_pod_is_applied_on_another_pods_copy(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    failing, copy = workspace(tmp_path / "pod-0"), workspace(tmp_path / "pod-1")
    edits = edits_of(edit(failing))
    assert sorted(e.path for e in edits.files) == sorted(FIXED)
    assert [line.split(" ")[0] for line in edits.left] == ["notes.txt", "weights.bin"]
    assert "was deleted" in edits.left[0] and "binary or large" in edits.left[1]

    command = owner.post_fix(edits)
    assert command == JobCommand(RESUME, "train-0", fix=True)
    assert other.command() == command and owner.store.generation() == 1

    decisions = apply_fix(other.fetch_fix(), copy, "train-1")
    assert {d.path: d.verdict for d in decisions} == dict.fromkeys(FIXED, Verdict.APPLY)
    assert contents(copy) == {**ORIGINAL, **FIXED}  # the binary file and the deleted one stay
    assert (copy / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (copy / "model/init.py").stat().st_mode & 0o777 == 0o644
    again = apply_fix(other.fetch_fix(), copy, "train-1")
    assert {d.verdict for d in again} == {Verdict.ALREADY}


def test_a_copy_that_differs_in_one_file_takes_none_of_the_fix(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, _, other = joined(monkeypatch, job, 3)
    failing = workspace(tmp_path / "pod-0")
    copy = workspace(tmp_path / "pod-2", {**ORIGINAL, "run.sh": b"#!/bin/sh\necho local\n"})
    before = contents(copy)
    owner.post_fix(edits_of(edit(failing)))
    decisions = apply_fix(other.fetch_fix(), copy, "train-2")
    assert decisions[0].verdict is Verdict.REFUSE and decisions[0].path == "run.sh"
    assert decisions[0].reason.startswith("pod train-2 does not apply the fix to run.sh")
    assert "pod train-0 had at the failure" in decisions[0].reason
    assert [d.verdict for d in decisions[1:]] == [Verdict.APPLY, Verdict.APPLY]
    assert contents(copy) == before


def test_a_pod_with_another_secret_refuses_the_fix(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    owner.post_fix(edits_of(edit(workspace(tmp_path / "pod-0"))))
    monkeypatch.setenv(jobsecret.ENV, "another secret of 32 bytes, ok!!")
    with pytest.raises(FixRefused, match="not signed with this pod's job secret"):
        other.fetch_fix()


def test_without_a_secret_the_resume_is_posted_without_a_fix(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    edits = edits_of(edit(workspace(tmp_path / "pod-0")))
    monkeypatch.delenv(jobsecret.ENV)
    posted = owner.post_fix(edits)
    assert (posted.kind, posted.pod, posted.fix) == (RESUME, "train-0", False)
    assert "pod train-0 has no job secret" in posted.why  # what the other pods say
    assert other.command() == posted
    assert owner.store.generation() == 1
    monkeypatch.setenv(jobsecret.ENV, SECRET)
    with pytest.raises(FixRefused, match="not in the job's store"):
        other.fetch_fix()


def test_a_fix_carries_files_up_to_its_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(jobfiles, "MAX_FIX_BYTES", 1 << 20)
    files = {"a.py": b"a" * 1000, "big.py": b"b" * (1 << 20), "z.py": b"z" * 1000}
    root = workspace(tmp_path, {**files, "run.sh": b""})
    edits = edits_since(root, sorted(files), {}, set())
    assert [e.path for e in edits.files] == ["a.py", "z.py"]
    assert [e.base_sha256 for e in edits.files] == [None, None]
    assert edits.left == ["big.py is not carried: the fix would pass 1 MiB"]


# -- liveness --------------------------------------------------------------------------------


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watched(sessions: list[JobSession], clock: Clock, lost_after: float = 12) -> list[Beats]:
    pulses = []
    for session in sessions:
        pulse = Beats(session.store, lost_after=lost_after, clock=clock)
        pulse.watch(session, lambda why: None)
        pulses.append(pulse)
    return pulses


def tick_until(clock: Clock, pulses: list[Beats], end: float) -> dict[float, list[str | None]]:
    """Each pulse ticks every 4 s from the clock's time until ``end``; what they said."""
    said: dict[float, list[str | None]] = {}
    while clock.now <= end:
        said[clock.now] = [pulse.tick() for pulse in pulses]
        clock.now += 4
    return said


def test_nothing_is_lost_while_every_pod_beats(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions, clock = joined(monkeypatch, job, 3), Clock()
    said = tick_until(clock, watched(sessions[1:] + sessions[:1], clock), 40)
    assert all(why is None for whys in said.values() for why in whys)
    # the other pods beat once more as they start watching (listed before wardens are chosen)
    assert sessions[0].store.beats() == {"train-0": 11, "train-1": 12, "train-2": 12}


def test_the_serving_pod_finds_another_pod_lost(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, other, third = joined(monkeypatch, job, 3)
    clock = Clock()
    pulses = watched([other, third, owner], clock)
    tick_until(clock, pulses, 16)
    said = tick_until(clock, [pulses[1], pulses[2]], 40)  # train-1 stops after 16 s
    assert said[20] == said[24] == [None, None]
    assert said[28] == [None, "pod train-1 of the job stopped answering for 12 s "
                                "(lost: preempted, or its node failed)"]


def test_another_pod_finds_the_serving_pod_lost(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    clock = Clock()
    pulses = watched([owner, other], clock)
    tick_until(clock, pulses, 8)
    said = tick_until(clock, pulses[1:], 24)  # train-0 stops after 8 s
    assert said[12] == said[16] == [None]
    assert said[20] == ["pod train-0 of the job stopped answering for 12 s "
                        "(lost: preempted, or its node failed)"]


def test_past_64_pods_the_pods_that_do_not_serve_beat_less_often() -> None:
    assert spacing(2) == spacing(64) == 4.0
    assert spacing(128) == 8.0 and spacing(1024) == 64.0


def test_in_a_large_job_the_serving_pod_waits_three_of_their_beats(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 128 pods the others beat every 8 s: the serving pod counts one lost only after
    24 s of silence, and beats every 4 s itself (its wardens still wait 12 s)."""
    owner, other = joined(monkeypatch, job, 2)
    clock = Clock()
    serving, beating = Beats(owner.store, clock=clock), Beats(other.store, clock=clock)
    serving.watch(owner, lambda why: None, pods=128)
    beating.watch(other, lambda why: None, pods=128)
    assert (serving.pace, beating.pace) == (4.0, 8.0)
    said = {}
    while clock.now <= 40:
        if clock.now % 8 == 0 and clock.now <= 8:
            beating.tick()  # then train-1 falls silent, after its beat at 8 s
        said[clock.now] = serving.tick()
        clock.now += 4
    assert said[28] is None
    assert said[32] == ("pod train-1 of the job stopped answering for 24 s (lost: "
                        "preempted, or its node failed)")


def test_the_first_two_other_pods_watch_the_serving_pod() -> None:
    assert wardens(["a", "b", "c", "d"], "b") == ["a", "c"]
    assert wardens(["b"], "b") == []
    assert wardens(["a", "b", "c"], "a", count=1) == ["b"]


def test_only_the_wardens_read_the_serving_pods_beat(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's host pays one read per warden and beat, not one per pod."""
    owner, *others = joined(monkeypatch, job, 4)
    clock = Clock()
    pulses = watched([owner, *others], clock)
    tick_until(clock, pulses, 8)
    said = tick_until(clock, pulses[1:], 24)  # train-0 stops after 8 s
    lost = "pod train-0 of the job stopped answering for 12 s (lost: preempted, or its node failed)"
    assert said[20] == [lost, lost, None]  # train-3, the third other pod, never looks


def test_a_store_that_stops_answering_ends_the_job_after_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    where = StoreAddress("127.0.0.1", host.port)
    store = JobStore(jobstore.connect(where), where.namespace, "train-1", where,
                     waiter=jobstore.connect(where))
    store.client.set_timeout(datetime.timedelta(seconds=1))  # a call never waits long
    session = join(monkeypatch, store, 8)
    clock = Clock()
    pulse = watched([session], clock)[0]
    del host  # the store's host goes away
    gc.collect()
    with pytest.raises(jobstore.JobStoreError):
        store.beat()
    said = {now: pulse.tick() for now in (0.0, 6.0, 11.0)}
    assert said == {0.0: None, 6.0: None, 11.0: None}
    clock.now = 12.0
    why = pulse.tick()
    assert why is not None and why.startswith("the job's store stopped answering (")
    assert f"127.0.0.1:{where.port}" in why


# -- the role of a session in the job's session ----------------------------------------------


class Notes:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)


@dataclass
class StandIn:
    """What :class:`JobRole` uses of a session; it records what it was asked."""

    workspace: Path
    info: RankInfo
    resume_base: Snapshot | None = None
    leader: bool = True
    job: JobRole | None = None
    state: Notes = field(default_factory=Notes)
    calls: list[str] = field(default_factory=list)

    @property
    def peers(self) -> SimpleNamespace:
        return SimpleNamespace(info=self.info)

    def save_edits(self) -> str:
        self.calls.append("save_edits")
        return "file:///saved/edits.diff"

    def resume(self, peer: bool = False, job: bool = False, wait: bool = False) -> dict[str, Any]:
        self.calls.append(f"resume(job={job})")
        return {}

    def abort(self, peer: bool = False, job: bool = False) -> None:
        self.calls.append(f"abort(job={job})")


def role(job: JobSession, root: Path, snapshot: Snapshot | None = None) -> JobRole:
    index = int(job.pod.rsplit("-", 1)[1])
    session = StandIn(root, RankInfo(8 * index, 16, 0, 8), snapshot)
    made = JobRole(cast("Session", session), job)
    session.job = made
    return made


def standin(made: JobRole) -> StandIn:
    return cast(StandIn, made.session)


def test_a_session_joins_the_job_only_over_several_pods(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    on_pod(monkeypatch, job.pod("train-1"))
    over_pods = StandIn(tmp_path, RankInfo(8, 16, 0, 8))
    made = JobRole.join(cast("Session", over_pods), GROUP_BROKE)
    assert made is not None and made.serves and made.job.bug.pod == "train-1"
    one_pod = StandIn(tmp_path, RankInfo(3, 8, 3, 8))
    assert JobRole.join(cast("Session", one_pod), GROUP_BROKE) is None


def test_a_resume_asked_on_another_pod_asks_the_serving_pod(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    assert role(owner, tmp_path).before_resume() is None  # it resumes there
    answer = role(other, tmp_path).before_resume()
    assert answer == {"job": {"asked": "train-0", "generation": 0}, "patched": [],
                      "not_loaded": [], "not_executed": []}
    assert owner.next_command() == JobCommand(RESUME, "train-1", why=ASKED)


def test_a_resume_after_the_job_was_aborted_is_refused(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    other.post(ABORT, "wrong data")
    for session in (owner, other):
        with pytest.raises(ResumeConflict,
                           match=r"ended by pod train-1 \(abort: wrong data\)"):
            role(session, tmp_path).before_resume()


def test_a_sessions_status_says_the_command_it_posted_without_asking_the_store(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    aborting = role(other, tmp_path)
    assert aborting.status()["command"] is None
    aborting.post(ABORT, "wrong data")
    assert aborting.status()["command"] == "abort"
    assert role(owner, tmp_path).status()["command"] is None  # not seen there yet


def test_a_resume_on_the_serving_pod_resumes_every_pod_with_the_fix(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    failing, copy = workspace(tmp_path / "pod-0"), workspace(tmp_path / "pod-1")
    serving, applying = role(owner, failing, edit(failing)), role(other, copy)
    watch = threading.Thread(target=applying._watch, daemon=True)
    watch.start()
    answer = serving.post_resume()
    assert answer == {"job": {"posted": True, "fix": sorted(FIXED),
                              "generation": 0}}
    watch.join(30)
    assert not watch.is_alive()
    assert standin(applying).calls == ["resume(job=True)"]
    assert contents(copy) == {**ORIGINAL, **FIXED}
    notes = standin(serving).state.lines
    assert len(notes) == 2 and "notes.txt was deleted" in notes[0]


def test_a_pod_whose_copy_differs_does_not_resume_and_says_why(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    failing = workspace(tmp_path / "pod-0")
    copy = workspace(tmp_path / "pod-1", {**ORIGINAL, "train.py": b"loss = 0\n"})
    before = contents(copy)
    command = owner.post_fix(edits_of(edit(failing)))
    applying = role(other, copy)
    applying._act(command)
    assert standin(applying).calls == []
    assert contents(copy) == before
    notes = standin(applying).state.lines
    assert notes[0].startswith("pod train-1 does not apply the fix to train.py")
    assert "pod train-0" in notes[0]
    assert notes[-1].startswith("this pod's ranks wait on")


def test_a_resume_without_a_fix_resumes_the_pods_own_copy(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, other = joined(monkeypatch, job, 2)
    copy = workspace(tmp_path)
    applying = role(other, copy)
    applying._act(JobCommand(RESUME, "train-0", fix=False))
    assert standin(applying).calls == ["resume(job=True)"]
    assert contents(copy) == ORIGINAL
    assert "without sending a fix" in standin(applying).state.lines[0]


def test_a_fix_that_cannot_be_fetched_is_refused(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, other = joined(monkeypatch, job, 2)
    applying = role(other, workspace(tmp_path))
    applying._act(JobCommand(RESUME, "train-0", fix=True))  # no fix in the store
    assert standin(applying).calls == []
    assert standin(applying).state.lines[0].startswith(
        "the fix from pod train-0 is not applied: the fix of generation 0 is not in")


def test_abort_and_end_from_another_pod_end_this_pods_ranks(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, other = joined(monkeypatch, job, 2)
    aborted, ended = role(other, tmp_path), role(other, tmp_path)
    aborted._act(JobCommand(ABORT, "train-0"))
    assert standin(aborted).calls == ["abort(job=True)"]
    ended._act(JobCommand(END, "train-0", why="the job's session was cleaned up"))
    assert standin(ended).calls == ["save_edits", "abort(job=True)"]
    assert standin(ended).state.lines == [
        "podcode: pod train-0 ended the job's session: the job's session was cleaned up; "
        "this pod's ranks end (edits saved in file:///saved/edits.diff)"]
    assert other.command() is None  # acting on a command posts none


def test_a_pods_own_commands_are_not_acted_on_again(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, _ = joined(monkeypatch, job, 2)
    serving = role(owner, tmp_path)
    for kind in (RESUME, ABORT, END):
        serving._act(JobCommand(kind, "train-0", fix=True))
    assert standin(serving).calls == [] and standin(serving).state.lines == []
    serving._act(JobCommand(RESUME, "train-1", why=ASKED))  # asked by another pod
    assert standin(serving).calls == ["resume(job=False)"]


def test_a_lost_pod_ends_the_job_on_every_pod(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    waiting = Waiting(owner)
    watcher = role(other, tmp_path)
    watcher._lost("pod train-0 of the job stopped answering for 12 s")
    assert standin(watcher).calls == ["save_edits", "abort(job=True)"]
    assert waiting.result() == JobCommand(END, "train-1",
                                          why="pod train-0 of the job stopped answering for 12 s")


def test_only_a_pod_that_does_not_serve_the_session_is_kept_from_idling(
    job: Job, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    owner, other = joined(monkeypatch, job, 2)
    kept = JobSampler(cast("Session", standin(role(other, tmp_path)))).sample(0.0)
    assert kept.active and kept.detail == "the job's session is on pod train-0"
    free = JobSampler(cast("Session", standin(role(owner, tmp_path)))).sample(0.0)
    assert not free.active

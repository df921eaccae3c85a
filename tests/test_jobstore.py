"""The job-wide channel against a real torch ``TCPStore``: a server in this process
(``is_master=True`` on a free port) and several clients of its own, as pods would be."""

from __future__ import annotations

import datetime
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

dist = pytest.importorskip("torch.distributed")

from interactive.distributed import jobfix, jobsecret, jobstore  # noqa: E402
from interactive.distributed.jobfix import FileEdit, FileEntry, FixRefused, Manifest, Verdict  # noqa: E402
from interactive.distributed.jobstore import Bug, JobStore, StoreAddress  # noqa: E402
from tests.waiting import in_threads  # noqa: E402

SECRET = b"a shared secret of the job, 32 b"


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    """One store for the module (torch's server can take seconds to stop); each test
    keeps to keys of its own (:func:`pod`)."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=30))
    yield store


@pytest.fixture
def pod(server: Any, request: pytest.FixtureRequest) -> Callable[..., JobStore]:
    """A pod's channel: clients of its own to the server, under this test's keys."""
    test = request.node.name

    def make(name: str = "train-0", restart: int = 0, timeout: float = 10,
             waiter: bool = False) -> JobStore:
        where = StoreAddress("127.0.0.1", server.port, restart)

        def client() -> Any:
            return jobstore.connect(where, datetime.timedelta(seconds=timeout))

        return JobStore(client(), f"{test}/{where.namespace}", name, where,
                        waiter=client() if waiter else None)

    return make


def put(server: Any, key: str, value: bytes) -> None:
    """Set ``key`` as an intruder would; a store's ``set`` has no answer, so a ``get`` on
    the same connection waits until it is applied."""
    server.set(key, value)
    server.get(key)


def edits(sizes: dict[str, int]) -> list[FileEdit]:
    return [
        FileEdit(path, os.urandom(size), jobfix.sha256_hex(f"old {path}".encode()))
        for path, size in sizes.items()
    ]


# -- the bug -------------------------------------------------------------------------------------


def test_two_claimers_race_for_the_bug_and_exactly_one_owns_it(
    pod: Callable[..., JobStore],
) -> None:
    pods = [pod("train-0"), pod("train-1")]
    bugs = [Bug(0, "train-0", "IndexError", "list index out of range"),
            Bug(5, "train-1", "ValueError", "bad shape")]
    claims = in_threads([functools.partial(p.claim_bug, 0, b) for p, b in zip(pods, bugs)])
    assert sorted(claim.won for claim in claims) == [False, True]
    winner = next(claim.owner for claim in claims if claim.won)
    assert winner in bugs
    assert all(claim.owner == winner for claim in claims)
    assert pod("train-2").bug(0) == winner
    assert pod("train-2").bug(1) is None


def test_a_later_claim_reads_the_owner(pod: Callable[..., JobStore]) -> None:
    first, later = pod("a"), pod("b")
    owner = Bug(3, "a", "KeyError", "'x'")
    assert first.claim_bug(2, owner).won
    claim = later.claim_bug(2, Bug(1, "b", "RuntimeError", "Connection closed by peer"))
    assert not claim.won and claim.owner == owner


# -- the fix -------------------------------------------------------------------------------------


def test_a_20_mib_fix_is_posted_in_chunks_and_read_back_equal(
    pod: Callable[..., JobStore], server: Any
) -> None:
    poster, reader = pod("train-0"), pod("train-1")
    posted = edits({"train.py": 12 << 20, "model/layers.py": 8 << 20, "empty.py": 0})
    manifest = poster.post_fix(0, posted, SECRET)
    assert len(manifest.chunks) == 20
    chunk = server.get(poster.key("fix", 0, manifest.post, 19))
    assert 0 < len(chunk) <= jobfix.CHUNK_BYTES
    fix = reader.read_fix(0, SECRET)
    assert fix is not None
    assert fix.manifest == manifest and fix.manifest.pod == "train-0"
    assert dict(fix.contents) == {edit.path: edit.content for edit in posted}
    assert [entry.base_sha256 for entry in manifest.files] == [e.base_sha256 for e in posted]


def test_waiting_pods_get_the_fix_once_posted_and_none_without(
    pod: Callable[..., JobStore],
) -> None:
    waiting = [pod(f"train-{i}", waiter=True) for i in range(1, 4)]
    posted = edits({"train.py": 5000})
    got: list[Any] = []
    threads = [threading.Thread(target=lambda p=p: got.append(
        p.wait_fix(0, SECRET, datetime.timedelta(seconds=60)))) for p in waiting]
    for thread in threads:
        thread.start()
    for p in waiting:  # a waiting pod still beats: the wait holds its other client
        p.beat()
    pod("train-0").post_fix(0, posted, SECRET)
    for thread in threads:
        thread.join(60)
    assert [fix.contents["train.py"] for fix in got] == [posted[0].content] * 3
    assert waiting[0].wait_fix(1, SECRET, datetime.timedelta(seconds=0.2)) is None


def test_a_second_fix_for_the_same_generation_is_refused(pod: Callable[..., JobStore]) -> None:
    first, second = pod("a"), pod("b")
    kept = edits({"train.py": 100})
    first.post_fix(1, kept, SECRET)
    with pytest.raises(FixRefused, match="posted already"):
        second.post_fix(1, edits({"train.py": 200}), SECRET)
    fix = second.read_fix(1, SECRET)
    assert fix is not None and fix.contents["train.py"] == kept[0].content


def test_a_tampered_chunk_is_refused(pod: Callable[..., JobStore], server: Any) -> None:
    poster, reader = pod("a"), pod("b")
    manifest = poster.post_fix(0, edits({"train.py": 3 << 20}), SECRET)
    key = poster.key("fix", 0, manifest.post, 1)
    chunk = bytearray(server.get(key))
    chunk[10] ^= 1
    put(server, key, bytes(chunk))
    with pytest.raises(FixRefused, match="chunk 1 of the fix was altered"):
        reader.read_fix(0, SECRET)
    server.delete_key(key)
    with pytest.raises(FixRefused, match="chunk 1 of the fix is missing"):
        reader.read_fix(0, SECRET)


def test_a_tampered_manifest_or_a_wrong_secret_is_refused(
    pod: Callable[..., JobStore], server: Any
) -> None:
    poster, reader = pod("a"), pod("b")
    poster.post_fix(0, edits({"train.py": 1000}), SECRET)
    with pytest.raises(FixRefused, match="not signed with this pod's job secret"):
        reader.read_fix(0, b"another secret, 32 bytes long..")
    key = poster.key("fix", 0, "manifest")
    raw = server.get(key)
    put(server, key, raw.replace(b'"pod":"a"', b'"pod":"z"'))
    with pytest.raises(FixRefused, match="not signed with this pod's job secret"):
        reader.read_fix(0, SECRET)


def test_a_signed_fix_replayed_for_another_generation_is_refused(
    pod: Callable[..., JobStore], server: Any
) -> None:
    poster, reader = pod("a"), pod("b")
    manifest = poster.post_fix(0, edits({"train.py": 1000}), SECRET)
    for old, new in [(("fix", 0, manifest.post, 0), ("fix", 1, manifest.post, 0)),
                     (("fix", 0, "manifest"), ("fix", 1, "manifest"))]:
        put(server, poster.key(*new), server.get(poster.key(*old)))
    with pytest.raises(FixRefused, match="posted for generation 0"):
        reader.read_fix(1, SECRET)


def test_a_fix_that_leaves_the_workspace_is_never_packed() -> None:
    for path in ("/etc/passwd", "../x.py", "a/../../x.py", "a//b.py", "", "a\\b.py"):
        with pytest.raises(FixRefused, match="not a plain relative path"):
            jobfix.pack([FileEdit(path, b"x", None)], secret=SECRET, namespace="n",
                        generation=0, pod="p", post="q")


# -- the secret ----------------------------------------------------------------------------------


def test_without_a_secret_the_refusal_says_how_to_set_one() -> None:
    with pytest.raises(jobsecret.JobSecretError) as error:
        jobsecret.load({})
    message = str(error.value)
    assert "PODCODE_JOB_SECRET " in message and "PODCODE_JOB_SECRET_FILE" in message
    assert "docs/frameworks/distributed.md" in message


def test_the_secret_comes_from_the_variable_or_the_file(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(SECRET + b"\n")
    assert jobsecret.load({"PODCODE_JOB_SECRET_FILE": str(path)}) == SECRET
    assert jobsecret.load({"PODCODE_JOB_SECRET": "x" * 20,
                           "PODCODE_JOB_SECRET_FILE": str(path)}) == b"x" * 20
    with pytest.raises(jobsecret.JobSecretError, match="cannot be read"):
        jobsecret.load({"PODCODE_JOB_SECRET_FILE": str(tmp_path / "none")})
    with pytest.raises(jobsecret.JobSecretError, match="fewer than 16"):
        jobsecret.load({"PODCODE_JOB_SECRET": "short"})


# -- where a fix applies (pure) ------------------------------------------------------------------

OLD, NEW, OTHER = "a" * 64, "b" * 64, "c" * 64


@pytest.mark.parametrize(
    ("base", "local", "verdict", "reason"),
    [
        (OLD, OLD, Verdict.APPLY, "pod train-1 applies the fix to train.py"),
        (OLD, NEW, Verdict.ALREADY, "pod train-1 already has the fixed train.py"),
        (OLD, OTHER, Verdict.REFUSE,
         "pod train-1 does not apply the fix to train.py: its copy (sha256 cccccccccccc) is "
         "not the one pod train-0 had at the failure (sha256 aaaaaaaaaaaa)"),
        (OLD, None, Verdict.REFUSE,
         "pod train-1 does not apply the fix to train.py: pod train-1 has no train.py, "
         "which pod train-0 had at the failure"),
        (None, None, Verdict.APPLY, "pod train-1 applies the fix to train.py"),
        (None, OTHER, Verdict.REFUSE,
         "pod train-1 does not apply the fix to train.py: pod train-0 had no train.py at "
         "the failure, pod train-1 has one"),
    ],
)
def test_a_pod_applies_a_file_only_where_its_copy_is_the_failing_pods(
    base: str | None, local: str | None, verdict: Verdict, reason: str
) -> None:
    manifest = Manifest("n", 0, "train-0", "p", (FileEntry("train.py", 3, NEW, base),), ())
    local_hashes = {} if local is None else {"train.py": local}
    decision = jobfix.decide(manifest, local_hashes, "train-1")
    assert [(d.path, d.verdict, d.reason) for d in decision] == [("train.py", verdict, reason)]


# -- the generation, missing keys, restarts ------------------------------------------------------


def test_the_generation_is_one_counter_across_clients(pod: Callable[..., JobStore]) -> None:
    pods = [pod(f"train-{i}") for i in range(4)]
    assert pods[0].generation() == 0
    bumped = in_threads([p.bump_generation for p in pods])
    assert sorted(bumped) == [1, 2, 3, 4]
    assert {p.generation() for p in pods} == {4}
    assert pod("late").generation() == 4


def test_a_missing_key_never_blocks(pod: Callable[..., JobStore]) -> None:
    reader = pod("a", timeout=600)  # a blocking get would wait 10 minutes
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.extend(
        [reader.read(reader.key("nothing")), reader.bug(0), reader.read_fix(0, SECRET),
         reader.pods(), reader.beats()]))
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "a read of a missing key blocked"
    assert results == [None, None, None, [], {}]


def test_keys_are_kept_apart_per_restart(pod: Callable[..., JobStore]) -> None:
    before, after = pod("a", restart=0), pod("a", restart=1)
    assert before.claim_bug(0, Bug(0, "a", "E", "m")).won
    before.bump_generation()
    assert after.bug(0) is None and after.generation() == 0
    assert after.namespace.endswith("/podcode/job/restart-1")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"MASTER_ADDR": "train-0.train", "MASTER_PORT": "29500"},
         StoreAddress("train-0.train", 29500, 0)),
        ({"MASTER_ADDR": "h", "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "2"},
         StoreAddress("h", 29500, 2)),
        ({"MASTER_PORT": "29500"}, None),
        ({"MASTER_ADDR": "h", "MASTER_PORT": "x"}, None),
        ({"MASTER_ADDR": "h", "MASTER_PORT": "0"}, None),
        ({}, None),
    ],
)
def test_the_store_address_comes_from_the_launchers_variables(
    environ: dict[str, str], expected: StoreAddress | None
) -> None:
    assert jobstore.address(environ) == expected


def test_open_reaches_the_store_named_by_the_environment(server: Any) -> None:
    channel = JobStore.open({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server.port),
                             "TORCHELASTIC_RESTART_COUNT": "3", "POD_NAME": "train-7"})
    assert channel is not None and channel.pod == "train-7"
    assert channel.key("bug", 0) == "podcode/job/restart-3/bug/0"
    assert JobStore.open({}) is None


SERVE = """
import datetime, sys
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=30))
print(store.port, flush=True)
sys.stdin.read()
"""


def test_a_store_that_is_gone_is_an_error_naming_it() -> None:
    with subprocess.Popen([sys.executable, "-c", SERVE], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as host:
        assert host.stdout is not None
        try:
            where = StoreAddress("127.0.0.1", int(host.stdout.readline()))
            channel = JobStore(jobstore.connect(where, datetime.timedelta(seconds=5)), "n",
                               "p", where)
            assert channel.bump_generation() == 1
        finally:
            host.kill()
    with pytest.raises(jobstore.JobStoreError, match=f"127.0.0.1:{where.port}"):
        channel.bump_generation()
    with pytest.raises(jobstore.JobStoreError, match="did not answer \\(connect\\)"):
        jobstore.connect(where, datetime.timedelta(seconds=1))


# -- liveness ------------------------------------------------------------------------------------


def test_every_pod_beats_and_a_watcher_reads_the_counters(pod: Callable[..., JobStore]) -> None:
    pods = [pod(f"train-{i}") for i in range(3)]
    for _ in range(2):
        for p in pods:
            p.beat()
    pods[1].beat()
    assert pod("watcher").beats() == {"train-0": 2, "train-1": 3, "train-2": 2}


def test_a_pod_whose_counter_stops_is_lost_after_the_limit() -> None:
    liveness = jobstore.Liveness(lost_after=6.0)
    assert liveness.update({"a": 1, "b": 1}, now=100.0) == []
    assert liveness.update({"a": 2, "b": 1}, now=103.0) == []
    assert liveness.update({"a": 3, "b": 1}, now=106.0) == ["b"]
    assert liveness.update({"a": 3, "b": 2}, now=108.0) == []
    assert liveness.update({"a": 3}, now=112.0) == ["a"]

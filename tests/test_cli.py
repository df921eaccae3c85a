"""The podcode CLI: list, the local session's verbs, and every verb's error paths.

The session side is real: ``interactive.doors.control``'s API served on loopback,
the session.json the core writes; the cluster is the in-process API server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from interactive.cli import Console, Exit, install_cmd, run
from interactive.cli.errors import CliError
from interactive.cli.output import clock_time
from interactive.cli.ray_target import ray_pod
from interactive.kube.cluster import SessionInfo
from interactive.kube.errors import NotFound, SessionEnded
from tests.cli_fixture import NOW, LiveSession, errors, output
from tests.fake_kube import FakeKube

POD_VERBS = (["attach"], ["debug"], ["status"], ["resume"], ["keepalive"], ["abort"])


# --- list -------------------------------------------------------------------------------------


def test_list_shows_sessions_with_idle_and_cleanup(fake_kube: FakeKube, console: Console) -> None:
    fake_kube.session_pod("train-a", state="warned", extra_annotations={
        "podcode.io/owner": "ana@example.com",
        "podcode.io/idle-since": "2027-01-15T07:20:00Z",
        "podcode.io/reap-at": "2027-01-15T08:10:00Z",
    })
    fake_kube.session_pod("train-b", "other")
    fake_kube.add_pod("web")
    assert run(["list"], console) == Exit.OK
    lines = output(console).splitlines()
    assert lines[0].split() == ["POD", "NAMESPACE", "STATE", "TASK", "OWNER", "IDLE", "CLEANUP"]
    assert lines[1].split() == ["train-a", "default", "warned", "train.fit", "ana@example.com",
                                "40m", "in", "10m"]
    assert len(lines) == 2


def test_list_shows_the_raycluster_and_rayjob_of_kuberay_pods(
    fake_kube: FakeKube, console: Console
) -> None:
    ray = {"ray.io/cluster": "train-raycluster-x7k", "ray.io/node-type": "worker",
           "ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "train"}
    fake_kube.add_pod("train-raycluster-x7k-gpu-a", labels={
        "podcode.io/session": "true", "podcode.io/state": "waiting", **ray})
    fake_kube.session_pod("plain")
    assert run(["list"], console) == Exit.OK
    lines = output(console).splitlines()
    assert lines[0].split()[-1] == "RAY"
    assert lines[1].endswith("-") and "plain" in lines[1]
    assert lines[2].endswith("RayJob/train train-raycluster-x7k (worker)"), lines[2]
    console.out.seek(0)
    console.out.truncate()
    assert run(["list", "-o", "json"], console) == Exit.OK
    listed = {s["pod"]: s["ray"] for s in json.loads(output(console))}
    assert listed == {"plain": None,
                      "train-raycluster-x7k-gpu-a": "RayJob/train train-raycluster-x7k (worker)"}


def test_list_counts_the_sessions_of_a_pod(fake_kube: FakeKube, console: Console) -> None:
    """Two workers of a Ray node wait in sessions: the row says there is one more."""
    sessions = {f"sessions.podcode.io/{pid}-1": json.dumps({"task": task, "pid": pid,
                                                             "ports": {"control": port}})
                for pid, task, port in ((11, "jobs.train", 8081), (12, "jobs.eval", 8091))}
    fake_kube.session_pod("ray-worker-a", task="jobs.eval", extra_annotations=sessions)
    assert run(["list"], console) == Exit.OK
    assert "jobs.eval (+1 more)" in output(console).splitlines()[1]
    console.out.seek(0)
    console.out.truncate()
    assert run(["list", "-o", "json"], console) == Exit.OK
    (listed,) = json.loads(output(console))
    assert listed["sessions"] == {"11-1": {"task": "jobs.train", "pid": 11,
                                           "ports": {"control": 8081}},
                                  "12-1": {"task": "jobs.eval", "pid": 12,
                                           "ports": {"control": 8091}}}


def _job(pod: str, ranks: list[int], serves: bool, job: str = "10.0.0.5:29500/restart-0",
         session_pod: str = "train-worker-1") -> dict[str, str]:
    """The annotations of a pod whose session is part of a job over several pods."""
    return {"podcode.io/job": json.dumps({"id": job, "session_pod": session_pod,
                                          "ranks": ranks, "serves_session": serves})}


def test_list_shows_the_pods_of_a_job_as_one_entry(fake_kube: FakeKube, console: Console) -> None:
    """Two pods of one torchrun job: one row, by the pod that serves the session (its state
    and cleanup); a pod whose mark is damaged, and a job's pod in another namespace, alone."""
    fake_kube.session_pod("train-worker-0", state="running",
                          extra_annotations=_job("train-worker-0", [0, 1], False))
    fake_kube.session_pod("train-worker-1", state="warned", extra_annotations={
        **_job("train-worker-1", [2, 3], True),
        "podcode.io/idle-since": "2027-01-15T07:20:00Z",
        "podcode.io/reap-at": "2027-01-15T08:10:00Z"})
    fake_kube.session_pod("train-worker-2", extra_annotations={"podcode.io/job": '{"id": 7'})
    fake_kube.session_pod("eval-0", "other", extra_annotations=_job("eval-0", [0], True))
    assert run(["list", "-A"], console) == Exit.OK
    lines = output(console).splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [
        ["train-worker-1", "default"], ["train-worker-2", "default"], ["eval-0", "other"]]
    assert lines[1].split()[2:] == ["warned", "train.fit", "(job:", "2", "pods,", "4", "ranks)",
                                    "-", "40m", "in", "10m"]
    assert "(job: 1 pod, 1 rank)" in lines[3]
    assert "job" not in lines[2]
    console.out.seek(0)
    console.out.truncate()
    assert run(["list", "-A", "-o", "json"], console) == Exit.OK
    job, damaged, alone = json.loads(output(console))
    assert (job["pod"], job["state"], job["job"]) == (
        "train-worker-1", "warned", "10.0.0.5:29500/restart-0")
    assert job["reap_at"] == "2027-01-15T08:10:00Z"
    assert job["pods"] == [
        {"pod": "train-worker-1", "state": "warned", "ranks": [2, 3], "serves_session": True},
        {"pod": "train-worker-0", "state": "running", "ranks": [0, 1], "serves_session": False},
    ]
    assert damaged["pod"] == "train-worker-2" and damaged["job"] is None
    assert "pods" not in damaged and damaged["ports"] and damaged["sessions"] == {}
    assert [p["pod"] for p in alone["pods"]] == ["eval-0"]


def test_pods_of_two_runs_of_a_job_are_two_entries(
    fake_kube: FakeKube, console: Console
) -> None:
    """torchrun restarted the job: a pod still marked with the last run is not this run's."""
    fake_kube.session_pod("train-worker-0", state="done", extra_annotations=_job(
        "train-worker-0", [0, 1], True, session_pod="train-worker-0"))
    fake_kube.session_pod("train-worker-1", extra_annotations=_job(
        "train-worker-1", [2, 3], True, job="10.0.0.5:29500/restart-1"))
    assert run(["list"], console) == Exit.OK
    rows = output(console).splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["train-worker-0", "train-worker-1"]
    assert all("(job: 1 pod, 2 ranks)" in r for r in rows)


def test_list_shows_the_cleanup_of_the_pods_session_cleaned_up_first(
    fake_kube: FakeKube, console: Console
) -> None:
    """Two sessions of one Ray pod were warned at different times: each has its own idle
    and cleanup times; the row shows the one cleaned up first (not the last one written)."""
    times = {11: ("2027-01-15T07:20:00Z", "2027-01-15T08:10:00Z"),
             12: ("2027-01-15T07:55:00Z", "2027-01-15T08:45:00Z")}
    sessions = {f"sessions.podcode.io/{pid}-1": json.dumps(
        {"task": f"jobs.t{pid}", "pid": pid, "idle_since": idle, "reap_at": reap})
        for pid, (idle, reap) in times.items()}
    sessions["sessions.podcode.io/13-1"] = json.dumps({"task": "jobs.t13", "pid": 13})
    fake_kube.session_pod("ray-worker-a", state="warned", extra_annotations={
        **sessions, "podcode.io/idle-since": times[12][0], "podcode.io/reap-at": times[12][1]})
    assert run(["list"], console) == Exit.OK
    assert output(console).splitlines()[1].split()[-3:] == ["40m", "in", "10m"]
    console.out.seek(0)
    console.out.truncate()
    assert run(["list", "-o", "json"], console) == Exit.OK
    (listed,) = json.loads(output(console))
    assert (listed["idle_since"], listed["reap_at"]) == times[11]
    assert listed["sessions"]["12-1"]["reap_at"] == times[12][1]


def test_list_all_namespaces_as_json(fake_kube: FakeKube, console: Console) -> None:
    fake_kube.session_pod("train-a")
    fake_kube.session_pod("train-b", "other", state="done")
    assert run(["list", "-A", "-o", "json"], console) == Exit.OK
    listed = json.loads(output(console))
    assert [(s["namespace"], s["pod"], s["state"]) for s in listed] == [
        ("default", "train-a", "waiting"), ("other", "train-b", "done")]
    assert listed[0]["ports"] == {"code_server": 8080, "control": 8081, "debug": 5678}


def test_list_a_thousand_sessions(fake_kube: FakeKube, console: Console) -> None:
    for i in range(1000):
        fake_kube.session_pod(f"s-{i:04d}", f"ns-{i % 4}")
    assert run(["list", "-A", "-o", "json"], console) == Exit.OK
    assert len(json.loads(output(console))) == 1000
    assert len([r for r in fake_kube.requests if r.path == "/api/v1/pods"]) == 2


def test_list_nothing(fake_kube: FakeKube, console: Console) -> None:
    assert run(["list", "-n", "empty"], console) == Exit.OK
    assert output(console) == ""
    assert "no podcode sessions in namespace empty" in errors(console)


# --- the local session ------------------------------------------------------------------------


def test_local_status(live: LiveSession, console: Console) -> None:
    assert run(["status"], console) == Exit.OK
    text = output(console)
    assert "Session:" in text and "local session" in text
    assert "State:" in text and "waiting" in text
    assert "ValueError: nan" in text
    assert live.token not in text
    assert "Cleanup:  2027-01-15T08:40:00Z (in 40m) if nobody works in it until then" in text


def test_local_status_json(live: LiveSession, console: Console) -> None:
    assert run(["status", "-o", "json"], console) == Exit.OK
    status = json.loads(output(console))
    assert (status["session"], status["state"], status["task"]) == (
        "local session", "waiting", "train.fit")


def test_local_resume_then_conflict(live: LiveSession, console: Console) -> None:
    assert run(["resume"], console) == Exit.OK
    assert live.controls.calls == ["resume"]
    assert "podcode: resumed local session" in output(console)
    assert run(["resume"], console) == Exit.CONFLICT
    assert "cannot resume local session: the task is resuming" in errors(console)


def test_local_keepalive_and_abort(live: LiveSession, console: Console) -> None:
    assert run(["keepalive", "--seconds", "7200"], console) == Exit.OK
    assert live.controls.calls == [("keepalive", 7200.0)]
    said = output(console)  # the warning waits 2 h; cleanup comes a grace period later
    assert said.startswith(f"podcode: kept local session for 7200 s more, until "
                           f"{clock_time(NOW + 7200, NOW)}; cleanup not before "
                           f"{clock_time(NOW + 7800, NOW)} (in 2h10m): 10m after the idle "
                           "warning"), said
    assert run(["abort"], console) == Exit.OK
    assert live.controls.calls[-1] == "abort"


def test_keepalive_rejects_bad_seconds(live: LiveSession, console: Console,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        run(["keepalive", "--seconds", "-5"], console)
    assert raised.value.code == Exit.USAGE
    assert live.controls.calls == []


def test_no_local_session(console: Console) -> None:
    assert run(["status"], console) == Exit.NOT_FOUND
    assert "no local podcode session" in errors(console)
    assert len(errors(console).splitlines()) == 1


def test_local_session_whose_process_is_gone(podcode_home: Path, console: Console) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    podcode_home.mkdir(parents=True)
    (podcode_home / "session.json").write_text(json.dumps({
        "state": "waiting", "control_url": f"http://127.0.0.1:{port}", "token": "t",
        "pid": dead.pid,
    }))
    assert run(["resume"], console) == Exit.NOT_FOUND
    assert f"its process {dead.pid} is gone" in errors(console)


def test_a_wrong_token_is_reported(live: LiveSession, console: Console) -> None:
    live.write_record(token="stale")
    assert run(["status"], console) == Exit.FORBIDDEN
    assert "refused the token" in errors(console)


# --- a pod's session, through the API ---------------------------------------------------------


@pytest.fixture
def in_pod(fake_kube: FakeKube, live: LiveSession) -> LiveSession:
    fake_kube.session_pod("train-0", "ml", ports=live.ports, home=str(live.home))
    return live


def test_status_of_a_pod(in_pod: LiveSession, fake_kube: FakeKube, console: Console) -> None:
    assert run(["status", "train-0", "-n", "ml"], console) == Exit.OK
    assert "pod ml/train-0" in output(console)
    assert "waiting" in output(console)
    assert any(r.path.endswith("/train-0/portforward") for r in fake_kube.requests)
    assert any(r.path.endswith("/train-0/exec") for r in fake_kube.requests)


KUBERAY = {"ray.io/cluster": "train-raycluster-x7k", "ray.io/node-type": "worker",
           "ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "train"}


def test_a_pods_session_found_by_its_rayjob_or_raycluster(
    live: LiveSession, fake_kube: FakeKube, console: Console
) -> None:
    """KubeRay: the engineer names the job, not the worker pod the task failed in."""
    fake_kube.add_pod("train-raycluster-x7k-head", "ml", labels={**KUBERAY, "ray.io/node-type":
                                                                 "head"})  # no session there
    fake_kube.session_pod("train-raycluster-x7k-gpu-a", "ml", ports=live.ports,
                          home=str(live.home), extra_labels=KUBERAY)
    fake_kube.session_pod("train-raycluster-x7k-gpu-b", "ml", state="done", extra_labels=KUBERAY)
    for name in ("train", "train-raycluster-x7k"):
        assert run(["status", "--ray", name, "-n", "ml"], console) == Exit.OK, errors(console)
        assert "pod ml/train-raycluster-x7k-gpu-a" in output(console)
        assert f"{name}: the session in pod ml/train-raycluster-x7k-gpu-a" in errors(console)
    assert run(["resume", "--ray", "train", "-n", "ml"], console) == Exit.OK
    assert live.controls.calls == ["resume"]
    assert run(["status", "--ray", "other", "-n", "ml"], console) == Exit.NOT_FOUND
    assert "no pod of a RayCluster or RayJob named other" in errors(console)
    assert run(["status", "gpu-a", "--ray", "train", "-n", "ml"], console) == Exit.USAGE


def test_the_ray_pod_is_the_one_whose_session_waits() -> None:
    def pod(name: str, state: str, job: str = "train") -> SessionInfo:
        return SessionInfo(name, "ml", True, state=state, task="t.f",
                           ray_names=frozenset({job, f"{job}-raycluster"}))

    waits, runs, other = pod("w-1", "waiting"), pod("w-2", "running"), pod("o-1", "waiting", "x")
    assert ray_pod([runs, waits, other], "train", "ml") is waits  # the one that needs you
    assert ray_pod([runs, other], "train-raycluster", "ml") is runs  # else the one open
    with pytest.raises(CliError, match=r"2 pods of train in namespace ml hold a session: name "
                                       r"the pod instead of --ray \(w-1 \(waiting, t.f\); w-3"):
        ray_pod([waits, pod("w-3", "warned")], "train", "ml")
    with pytest.raises(SessionEnded, match="sessions of train in namespace ml have ended"):
        ray_pod([pod("w-4", "done")], "train", "ml")
    with pytest.raises(NotFound):
        ray_pod([other], "train", "ml")


def test_resume_keepalive_abort_a_pod(in_pod: LiveSession, console: Console) -> None:
    assert run(["keepalive", "train-0", "-n", "ml", "--seconds", "600"], console) == Exit.OK
    assert run(["resume", "train-0", "-n", "ml"], console) == Exit.OK
    assert run(["abort", "train-0", "-n", "ml", "-o", "json"], console) == Exit.OK
    assert in_pod.controls.calls == [("keepalive", 600.0), "resume", "abort"]
    assert json.loads(output(console)[output(console).index("{"):])["session"] == "pod ml/train-0"


# --- error paths of every verb ----------------------------------------------------------------


def _one_line(console: Console) -> str:
    text = errors(console)
    assert len(text.splitlines()) == 1, text
    assert "Traceback" not in text
    return text


@pytest.mark.parametrize("verb", [["list"], *POD_VERBS], ids=lambda v: v[0])
def test_no_kubeconfig(verb: list[str], tmp_path: Path, console: Console,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    argv = verb if verb == ["list"] else [*verb, "train-0"]
    assert run(argv, console) == Exit.UNREACHABLE
    assert "no Kubernetes configuration" in _one_line(console)


def test_a_malformed_kubeconfig_is_one_line(tmp_path: Path, console: Console) -> None:
    broken = tmp_path / "config"
    broken.write_text("apiVersion: v1\nclusters: [\n  - bad: {\n")
    assert run(["list", "--kubeconfig", str(broken)], console) == Exit.UNREACHABLE
    assert _one_line(console).startswith(
        f"podcode: cannot use the kubeconfig {broken}: it is not valid YAML at line 3, column 3 "
        "(expected the node content, but found '-')"
    )


@pytest.mark.parametrize("verb", [["list"], *POD_VERBS], ids=lambda v: v[0])
def test_api_server_down(verb: list[str], fake_kube: FakeKube, console: Console) -> None:
    fake_kube.session_pod("train-0")
    argv = verb if verb == ["list"] else [*verb, "train-0"]
    with fake_kube.offline():
        assert run(argv, console) == Exit.UNREACHABLE
    assert "cannot reach the Kubernetes API server" in _one_line(console)


@pytest.mark.parametrize("verb", [["list"], *POD_VERBS], ids=lambda v: v[0])
def test_forbidden(verb: list[str], fake_kube: FakeKube, console: Console) -> None:
    fake_kube.session_pod("train-0")
    fake_kube.fail(403, method="GET")
    argv = verb if verb == ["list"] else [*verb, "train-0"]
    assert run(argv, console) == Exit.FORBIDDEN
    assert "permission denied" in _one_line(console)


@pytest.mark.parametrize("verb", POD_VERBS, ids=lambda v: v[0])
def test_unknown_pod(verb: list[str], fake_kube: FakeKube, console: Console) -> None:
    assert run([*verb, "ghost", "-n", "ml"], console) == Exit.NOT_FOUND
    assert "no pod ghost in namespace ml" in _one_line(console)


@pytest.mark.parametrize("verb", POD_VERBS, ids=lambda v: v[0])
def test_not_a_session(verb: list[str], fake_kube: FakeKube, console: Console) -> None:
    fake_kube.add_pod("web")
    assert run([*verb, "web"], console) == Exit.NOT_FOUND
    assert "not a podcode session" in _one_line(console)


@pytest.mark.parametrize("verb", POD_VERBS, ids=lambda v: v[0])
def test_session_ended(verb: list[str], fake_kube: FakeKube, console: Console) -> None:
    fake_kube.session_pod("old", state="done")
    assert run([*verb, "old"], console) == Exit.NOT_FOUND
    assert "has ended" in _one_line(console)


@pytest.mark.parametrize("verb", POD_VERBS, ids=lambda v: v[0])
def test_no_session_file_in_the_pod(verb: list[str], fake_kube: FakeKube, console: Console,
                                    tmp_path: Path) -> None:
    fake_kube.session_pod("train-0", home=str(tmp_path / "nothing-here"))
    assert run([*verb, "train-0"], console) == Exit.NOT_FOUND
    assert "has ended or is not open yet" in _one_line(console)


@pytest.mark.parametrize("verb", POD_VERBS, ids=lambda v: v[0])
def test_exec_forbidden(verb: list[str], in_pod: LiveSession, fake_kube: FakeKube,
                        console: Console) -> None:
    fake_kube.fail(403, path="/exec$")
    assert run([*verb, "train-0", "-n", "ml"], console) == Exit.FORBIDDEN
    assert "may not create pods/exec" in _one_line(console)


def test_the_console_script_prints_no_traceback(tmp_path: Path) -> None:
    environ = {**os.environ, "KUBECONFIG": str(tmp_path / "missing")}
    done = subprocess.run([sys.executable, "-m", "interactive.cli", "attach", "train-0"],
                          capture_output=True, text=True, env=environ, timeout=60, check=False)
    assert done.returncode == Exit.UNREACHABLE
    assert done.stderr.startswith("podcode: no Kubernetes configuration")
    assert "Traceback" not in done.stderr


def test_usage_errors_exit_2(console: Console) -> None:
    with pytest.raises(SystemExit) as raised:
        run(["debug"], console)
    assert raised.value.code == Exit.USAGE


# --- install ----------------------------------------------------------------------------------


def test_install_is_handed_to_server_bootstrap(console: Console,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        run(["install", "--help"], console)
    assert raised.value.code == 0
    assert "--method" in capsys.readouterr().out


def test_install_without_its_module(console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install_cmd, "MODULE", "server_bootstrap.not_here")
    assert run(["install"], console) == Exit.FAILED
    assert "podcode install is not available" in _one_line(console)


def test_options_before_the_verb_count_too(in_pod: LiveSession, console: Console) -> None:
    assert run(["-n", "ml", "-o", "json", "status", "train-0"], console) == Exit.OK
    assert json.loads(output(console))["session"] == "pod ml/train-0"


@pytest.mark.parametrize("verb", POD_VERBS, ids=lambda v: v[0])
def test_a_session_whose_control_api_is_gone(verb: list[str], fake_kube: FakeKube,
                                            live: LiveSession, console: Console) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    fake_kube.session_pod("train-0", ports={**live.ports, "control": port}, home=str(live.home))
    live.write_record(control_url=f"http://127.0.0.1:{port}")
    assert run([*verb, "train-0"], console) == Exit.UNREACHABLE
    assert f"control API (port {port} in the pod) does not answer" in _one_line(console)


def test_status_of_a_rank_lists_the_pods_other_ranks() -> None:
    from interactive.cli.control_cmds import _rank_lines

    status = {
        "rank": {"rank": 1, "world_size": 4, "local_rank": 1},
        "ranks": [{"local_rank": 0, "state": "waiting", "error": "RuntimeError: closed"}],
    }
    assert _rank_lines(status) == [
        ("Rank", "1/4 (local 1)"),
        ("Local rank 0", "waiting: RuntimeError: closed"),
    ]
    assert _rank_lines({"state": "waiting"}) == []


def test_status_of_a_rank_of_a_job_over_several_pods_says_where_its_session_is() -> None:
    from interactive.cli.control_cmds import _job_lines

    job = {"pod": "train-worker-0", "session_pod": "train-worker-1", "generation": 2,
           "failed_rank": 3, "failed_pod": "train-worker-1", "error": "ValueError: nan",
           "serves_session": False, "command": None}
    assert _job_lines({"job": job}) == [
        ("Job", "session on pod train-worker-1: open the IDE there"),
        ("Failed", "rank 3 on pod train-worker-1: ValueError: nan"),
        ("Generation", "2"),
    ]
    serving = {**job, "pod": "train-worker-1", "serves_session": True, "command": "resume"}
    assert _job_lines({"job": serving}) == [
        ("Job", "session on pod train-worker-1 (this pod serves it)"),
        ("Failed", "rank 3 on pod train-worker-1: ValueError: nan"),
        ("Generation", "2 (command: resume)"),
    ]
    assert _job_lines({"rank": {"rank": 1}}) == []


def test_a_resume_of_a_job_over_several_pods_says_what_the_job_was_told() -> None:
    from interactive.cli.control_cmds import _resumed_lines

    asked = _resumed_lines("pod ml/train-0", {"job": {"asked": "train-1", "generation": 0},
                                             "patched": []})
    assert asked == ("podcode: asked pod train-1, which serves the job's session, to resume "
                     "the job: it sends its fix to every pod and every rank runs again")
    sent = _resumed_lines("pod ml/train-1", {"patched": ["train.step"], "job": {
        "posted": True, "fix": ["train.py"], "generation": 0}})
    assert sent.splitlines()[1:] == ["  patched: train.step",
                                     "  sent to the job's other pods: train.py"]
    unsent = _resumed_lines("pod ml/train-1", {"patched": ["train.step"], "job": {
        "posted": True, "fix": [], "generation": 0}})
    assert "their own copy (no fix sent)" in unsent

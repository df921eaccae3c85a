"""No dead end for a newcomer (issue 34), each case as a new user hit it: through the real
``podcode`` command (a subprocess, or ``run``), against real local sessions.

The first session on a fresh machine installs code-server: a stand-in npm on ``PATH``
that never ends plays the install, since what matters is how the session and the CLI
behave meanwhile, not the download.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from interactive.base.identity import is_running
from interactive.cli import Console, Exit, run
from interactive.cli import checks as doctor
from interactive.cli.control_cmds import kept_line
from interactive.cli.output import clock_time
from server_bootstrap.installs import install_name
from tests.cli_fixture import NOW, LiveSession, errors, output
from tests.session_fixture import Job
from tests.waiting import wait_until

FAILING = """
from interactive import vscode

@vscode(port=0, control_port=0, debug_port=0, ssh_port=0)
def compute(steps):
    if steps > 2:
        raise ValueError(f"diverged at step {steps}")
    return steps

print("RESULT", compute(3))
"""

NPM = """#!/bin/sh
# A stand-in npm: an install that would take far longer than any test.
echo $$ >> "{pids}"
exec sleep 600
"""


def podcode(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The ``podcode`` console script, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "interactive.cli", *argv], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=120, check=False)


@pytest.fixture
def fresh_machine(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A machine where code-server was never installed, whose npm never finishes."""
    bin_dir, cache = tmp_path / "bin", tmp_path / "cache"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(NPM.format(pids=tmp_path / "npm.pids"))
    npm.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PODCODE_CODE_SERVER_CACHE": str(cache)}
    yield env
    for pid in _npm_pids(tmp_path):  # a failed test leaves none behind
        if is_running(pid, None):
            os.kill(pid, 9)


def _npm_pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "npm.pids"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def installing(job: Job, env: dict[str, str], tmp_path: Path) -> None:
    """The failing job started on the fresh machine: its session waits, npm runs."""
    job.write("job.py", FAILING)
    job.start(env=env)
    job.wait_state("waiting")
    wait_until(lambda: _npm_pids(tmp_path), "the install to start")
    wait_until(lambda: "then podcode resume" in job.output(), "the session's announcement")


def test_while_code_server_installs_the_session_says_what_and_where_and_abort_ends_it_at_once(
    job: Job, fresh_machine: dict[str, str], tmp_path: Path
) -> None:
    installing(job, fresh_machine, tmp_path)
    cache = Path(fresh_machine["PODCODE_CODE_SERVER_CACHE"])
    said = job.output()
    notice = next(line for line in said.splitlines() if "is not installed" in line)
    assert f"into {cache / install_name('4.139.1')}" in notice
    assert "npm registry" in notice and "255 MB" in notice and "800 MB" in notice
    assert "podcode install" in notice and "PODCODE_CODE_SERVER_CACHE" in notice
    assert "docs/deploy.md" in notice
    assert "VS Code when code-server is ready (podcode open" in said

    opened = podcode("open", env=fresh_machine)  # the link is not there yet: it says why
    assert opened.returncode == Exit.OK, opened.stderr
    assert "VS Code:   none now (see the notes below)" in opened.stdout
    assert notice.split("note: ", 1)[-1] in opened.stdout
    status = podcode("status")
    assert "IDE:      installing (see the notes)" in status.stdout, status.stdout

    aborted = podcode("abort")
    assert aborted.returncode == Exit.OK, aborted.stderr
    assert aborted.stdout.startswith("podcode: aborted local session")
    assert job.wait_exit(timeout=60) != 0  # not after the install: it would take 10 minutes
    assert "ValueError: diverged at step 3" in job.output()
    assert not any(is_running(pid, None) for pid in _npm_pids(tmp_path))
    assert not list(cache.glob(".tmp-*")), "the half-built install was kept"


def test_a_fix_resumed_while_code_server_installs_ends_the_task_at_once(
    job: Job, fresh_machine: dict[str, str], tmp_path: Path
) -> None:
    installing(job, fresh_machine, tmp_path)
    job.write("job.py", FAILING.replace("steps > 2", "steps > 5"))
    resumed = podcode("resume")
    assert resumed.returncode == Exit.OK, resumed.stderr
    assert job.wait_exit(timeout=60) == 0
    assert "RESULT 3" in job.output()
    assert not any(is_running(pid, None) for pid in _npm_pids(tmp_path))


def test_when_code_server_cannot_start_the_advice_works_locally(
    job: Job, tmp_path: Path
) -> None:
    broken = tmp_path / "code-server"
    broken.write_text("#!/bin/sh\necho 'cannot start: no display' >&2\nexit 1\n")
    broken.chmod(0o755)
    job.write("job.py", FAILING)
    job.start(env={"PODCODE_CODE_SERVER_PATH": str(broken)})
    job.wait_state("waiting")
    wait_until(lambda: "then podcode resume" in job.output(), "the session's announcement")
    said = job.output()
    assert "no IDE (code-server) for this session" in said
    assert "VS Code when code-server is ready" not in said  # it said it cannot start
    assert "podcode status says where" in said
    status = podcode("status")
    assert status.returncode == Exit.OK, status.stderr
    assert "IDE:      none (see the notes)" in status.stdout
    debug = next(line for line in status.stdout.splitlines() if line.startswith("Debug:"))
    assert debug.split()[-1].startswith("127.0.0.1:")  # where desktop VS Code attaches


# --- podcode open / attach without POD ---------------------------------------------------------


@pytest.fixture
def with_links(podcode_home: Path) -> Iterator[LiveSession]:
    """A live local session that hands out one-time login links."""
    session = LiveSession(podcode_home, login=True)
    yield session
    session.close()


@pytest.mark.parametrize("argv", [["open"], ["attach"]], ids=["open", "attach"])
def test_open_prints_the_login_link_and_where_the_password_is(
    argv: list[str], with_links: LiveSession, podcode_home: Path
) -> None:
    done = podcode(*argv)
    assert done.returncode == Exit.OK, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "podcode: local session: task train.fit, state waiting, error " \
                       "ValueError: nan"
    values = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
              for line in lines[1:] if line.startswith("  ") and ":" in line}
    assert values["VS Code"] == f"http://127.0.0.1:{with_links.ide_port}/"
    assert values["Password"] == with_links.password
    assert f"\"password\" in {podcode_home / 'session.json'}" in done.stdout
    assert values["Debugger"].startswith("127.0.0.1:5678")
    link = values["Open"]
    with urllib.request.urlopen(link, timeout=10) as page:  # the link logs a browser in
        body = page.read().decode()
    assert f"action=\"http://127.0.0.1:{with_links.ide_port}/login\"" in body
    with pytest.raises(urllib.error.HTTPError) as spent:  # once
        urllib.request.urlopen(link, timeout=10)
    assert spent.value.code == 404
    spent.value.close()
    assert with_links.token not in done.stdout + done.stderr


def test_open_as_json_and_in_the_browser(with_links: LiveSession, console: Console) -> None:
    opened: list[str] = []
    console.open_browser = opened.append
    assert run(["open", "-o", "json"], console) == Exit.OK
    answer = json.loads(output(console))
    assert answer["url"] == f"http://127.0.0.1:{with_links.ide_port}/"
    assert answer["login_url"].startswith(f"http://127.0.0.1:{with_links.control_port}/login/")
    assert answer["password_file"].endswith("session.json") and answer["debug"]
    assert run(["open", "--browser"], console) == Exit.OK
    assert len(opened) == 1 and "/login/" in opened[0]


def test_open_chooses_among_several_local_sessions(
    two_of_one_task: tuple[LiveSession, LiveSession], console: Console
) -> None:
    assert run(["open"], console) == Exit.USAGE
    assert "--session ID" in errors(console)
    assert run(["open", "--session", "1-1-2"], console) == Exit.OK
    assert output(console).startswith(f"podcode: local session (pid {os.getpid()}): task wf.square")
    assert f"http://127.0.0.1:{two_of_one_task[1].ide_port}/" in output(console)


@pytest.fixture
def two_of_one_task(tmp_path: Path, podcode_home: Path
                    ) -> Iterator[tuple[LiveSession, LiveSession]]:
    """Two sessions of one task in this process (a fan-out): told apart by their id."""
    first, second = LiveSession(tmp_path / "first"), LiveSession(tmp_path / "second")
    for live, session in ((first, "1-1"), (second, "1-1-2")):
        data = {**json.loads((live.home / "session.json").read_text()), "task": "wf.square",
                "session": session}
        folder = podcode_home / "sessions" / session
        folder.mkdir(parents=True)
        (folder / "session.json").write_text(json.dumps(data))
        (folder / "session.json").chmod(0o600)
    yield first, second
    first.close()
    second.close()


def test_list_local_tells_two_sessions_of_one_task_apart(
    two_of_one_task: tuple[LiveSession, LiveSession], console: Console
) -> None:
    assert run(["list", "--local"], console) == Exit.OK
    lines = output(console).splitlines()
    assert lines[0].split() == ["PID", "SESSION", "TASK", "STATE", "STARTED", "ERROR"]
    assert sorted(line.split()[1] for line in lines[1:]) == ["1-1", "1-1-2"]
    console.out = io.StringIO()
    assert run(["list", "--local", "-o", "json"], console) == Exit.OK
    listed = json.loads(output(console))
    assert sorted(s["session"] for s in listed) == ["1-1", "1-1-2"]
    assert {"pid", "task", "state", "process", "record"} <= set(listed[0])


# --- keepalive --------------------------------------------------------------------------------


def test_keepalive_answers_in_the_seconds_asked_for(live: LiveSession, console: Console) -> None:
    assert run(["keepalive", "--seconds", "600"], console) == Exit.OK
    said = output(console).strip()
    assert said == (
        f"podcode: kept local session for 600 s more, until {clock_time(NOW + 600, NOW)}; "
        f"cleanup not before {clock_time(NOW + 2400, NOW)} (in 40m): the keep-alive counts "
        "as activity, so the idle limit (30m) runs from now, and cleanup comes 10m after its "
        "warning; working in it postpones both")
    console.out = io.StringIO()
    assert run(["keepalive", "--seconds", "600", "-o", "json"], console) == Exit.OK
    answer = json.loads(output(console))
    assert (answer["seconds"], answer["max_idle_seconds"], answer["grace_seconds"]) == (
        600, 1800, 600)


def test_keepalive_answer_of_an_older_session() -> None:
    """A session from before the answer named its limits: still in terms of the ask."""
    answer = {"reap_at": NOW + 7800, "keepalive_until": NOW + 7200}
    assert kept_line("pod ml/a", 7200, answer, NOW) == (
        f"podcode: kept pod ml/a for 7200 s more, until {clock_time(NOW + 7200, NOW)}; "
        f"cleanup not before {clock_time(NOW + 7800, NOW)} (in 2h10m), later if someone "
        "works in it")
    held = {**answer, "keepalive_until": NOW + 9000}
    assert "(an earlier keep-alive holds it until" in kept_line("x", 7200, held, NOW)


# --- usage errors, ssh without a session, messages -------------------------------------------


@pytest.mark.parametrize("argv, verb", [
    (["keepalive", "--seconds", "-5"], "keepalive"),
    (["edits"], "edits"),
    (["frobnicate"], None),
    (["status", "--bogus"], "status"),
    (["debug"], "debug"),
])
def test_a_usage_error_is_one_line_and_a_hint(argv: list[str], verb: str | None) -> None:
    done = podcode(*argv)
    assert done.returncode == Exit.USAGE
    first, hint = done.stderr.splitlines()
    assert first.startswith("podcode: error: ")
    assert hint == f"podcode: see podcode{' ' + verb if verb else ''} --help"
    assert "usage:" not in done.stderr and done.stdout == ""
    if verb == "debug":  # it needs a pod: the local way is said too
        assert "podcode open says where" in first


def test_ssh_without_a_session_says_what_to_run_here_and_for_a_pod() -> None:
    done = podcode("ssh")
    assert done.returncode == Exit.NOT_FOUND
    [line] = done.stderr.splitlines()
    assert line.startswith("podcode: no local podcode session")
    assert "podcode ssh POD -n NAMESPACE" in line and "PODCODE_HOME" in line
    assert "PODCODE_ENABLE=1" in line
    assert "podcode status POD" not in line


def test_every_message_starts_with_podcode(live: LiveSession, console: Console) -> None:
    for argv in (["resume"], ["keepalive"], ["abort"], ["open"]):
        console.out = io.StringIO()
        assert run(argv, console) == Exit.OK
        first = output(console).splitlines()[0]
        assert first.startswith("podcode: "), (argv, first)


# --- podcode edits TASK -----------------------------------------------------------------------


def _save_fix(task: str, workspace: Path) -> bytes:
    from interactive.storage.backends import open_store
    from interactive.storage.edits import save_edits
    from interactive.storage.workspace import Snapshot

    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "job.py").write_text("steps = 2\n")
    snapshot = Snapshot.take(workspace)
    (workspace / "job.py").write_text("steps = 5\n")
    stamp = (workspace / "job.py").stat().st_mtime_ns + 10_000_000
    os.utime(workspace / "job.py", ns=(stamp, stamp))
    save_edits(snapshot, open_store(), task, NOW)
    return snapshot.diff(snapshot.changed()).encode()


def test_edits_finds_a_scripts_task_by_its_last_part(tmp_path: Path) -> None:
    patch = _save_fix("job.py:compute", tmp_path / "ws")
    done = podcode("edits", "compute")
    assert done.returncode == Exit.OK, done.stderr
    assert done.stdout.encode() == patch and "+steps = 5" in done.stdout
    assert podcode("edits", "job.py:compute").stdout == done.stdout


def test_edits_names_the_tasks_when_the_name_is_ambiguous_or_unknown(tmp_path: Path) -> None:
    _save_fix("job.py:compute", tmp_path / "one")
    _save_fix("features.compute", tmp_path / "two")
    done = podcode("edits", "compute")
    assert done.returncode == Exit.USAGE
    assert "2 tasks with a saved fix match compute" in done.stderr
    assert "features.compute, job.py:compute" in done.stderr
    missing = podcode("edits", "train")
    assert missing.returncode == Exit.NOT_FOUND
    assert "fixes saved there: features.compute, job.py:compute" in missing.stderr
    assert len(missing.stderr.splitlines()) == 1


# --- podcode doctor ---------------------------------------------------------------------------


def test_doctor_names_where_it_looked_for_code_server(tmp_path: Path) -> None:
    cache = tmp_path / "nowhere"
    environ = {"PATH": str(tmp_path), "PODCODE_CODE_SERVER_CACHE": str(cache),
               "HOME": str(tmp_path)}
    check = doctor.check_code_server(environ)
    assert check.status == doctor.WARN
    assert str(cache / install_name("4.139.1")) in check.detail
    assert "PODCODE_CODE_SERVER_CACHE moves it" in check.detail
    assert f"podcode install (into {cache})" in check.fix and "docs/deploy.md" in check.fix
    console = Console(out=io.StringIO(), err=io.StringIO(), environ=environ)
    assert run(["doctor", "--pod", "-o", "json"], console) in (Exit.OK, Exit.FAILED)
    [shown] = [c for c in json.loads(output(console)) if c["name"] == "code-server"]
    assert shown["detail"] == check.detail
    here = Console(out=io.StringIO(), err=io.StringIO(),  # a laptop where tasks run
                   environ={**environ, "PODCODE_ENABLE": "1",
                            "KUBECONFIG": str(tmp_path / "no-kubeconfig")})
    assert run(["doctor", "-o", "json"], here) == Exit.OK
    first = json.loads(output(here))[0]
    assert first["name"] == "code-server" and first["detail"] == check.detail


# --- where to edit ----------------------------------------------------------------------------


def test_the_session_says_which_folder_to_edit_and_a_resume_of_nothing_says_it_again(
    job: Job,
) -> None:
    """The user edits their checkout instead of the session's folder (a Ray worker's copy, a
    pod's image): every place that shows the session names the folder, and a resume that
    patched nothing says where the code is and how to send files edited elsewhere."""
    job.write("job.py", FAILING.replace("@vscode(", '@vscode(ide="none", '))
    job.start().wait_state("waiting")
    folder = str(job.workspace.resolve())
    wait_until(lambda: "then podcode resume" in job.output(), "the session's announcement")
    assert f"fix the code in {folder}, then podcode resume" in job.output()
    status = podcode("status")
    assert status.returncode == Exit.OK, status.stderr
    code = next(line for line in status.stdout.splitlines() if line.startswith("Code:"))
    assert folder in code and "podcode resume --push" in code
    listed = json.loads(podcode("list", "--local", "-o", "json").stdout)
    assert [session["workspace"] for session in listed] == [folder]
    resumed = podcode("resume")
    assert resumed.returncode == Exit.OK, resumed.stderr
    assert "nothing patched" in resumed.stdout
    assert f"the session's code is in {folder}: edit it there" in resumed.stdout
    job.wait_state("waiting")  # it failed again, as nothing changed
    podcode("abort")
    job.wait_exit()

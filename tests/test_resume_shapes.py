"""Resume on code as people write it: each a real failing program in a child process,
fixed on disk and resumed over the control API; the workflow's output and exit code are
checked, and that the upstream work ran once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.session_fixture import Job

OFF = 'ide="none", port=0, control_port=0, debug_port=0'
FAILS = f"from interactive import vscode\n\n@vscode({OFF})\ndef t():\n    1 / 0\n\nt()\n"


def resume_ok(job: Job) -> dict:
    status, body = job.api("POST", "/api/resume")
    assert status == 202, body
    assert job.wait_exit() == 0, job.output()
    return body


def test_top_level_script_without_main_guard_and_task_in_a_module(job: Job) -> None:
    job.write(
        "steps.py",
        f"""
        from interactive import vscode

        @vscode({OFF})
        def normalize(values):
            mean = sum(values) / len(values)
            std = 0.0
            return [(v - mean) / std for v in values]
        """,
    )
    job.write(
        "train.py",
        """
        from steps import normalize
        print("UPSTREAM RAN")
        data = [1.0, 1.0, 1.0]
        result = normalize(data)
        print("RESULT", result)
        """,
    )
    job.start("train.py").wait_state("waiting")
    job.write("steps.py", (job.workspace / "steps.py").read_text().replace("/ std", "/ (std or 1)"))
    said = subprocess.run(  # as the engineer would: podcode resume
        [sys.executable, "-m", "interactive.cli", "resume"],
        capture_output=True,
        text=True,
        env={**os.environ, "PODCODE_HOME": str(job.home)},
        check=True,
    ).stdout
    assert "patched: steps.normalize" in said
    assert job.wait_exit() == 0, job.output()
    out = job.output()
    assert out.count("UPSTREAM RAN") == 1 and "RESULT [0.0, 0.0, 0.0]" in out
    assert "in use; using" not in out  # no second session opened inside the resume


def test_fix_in_a_method_of_the_input_class(job: Job) -> None:
    job.write(
        "data.py",
        """
        class Scaler:
            def __init__(self, factor):
                self.factor = factor

            def apply(self, v):
                return v / self.factr
        """,
    )
    job.write(
        "job.py",
        f"""
        from interactive import vscode
        from data import Scaler

        @vscode({OFF})
        def run(scaler, values):
            return [scaler.apply(v) for v in values]

        print("RESULT", run(Scaler(2), [2, 4]))
        """,
    )
    job.start().wait_state("waiting")
    job.write("data.py", (job.workspace / "data.py").read_text().replace("factr", "factor"))
    resume_ok(job)
    assert "RESULT [1.0, 2.0]" in job.output()


def test_python_dash_m_package_module_with_a_helper_imported_by_name(job: Job) -> None:
    package = job.workspace / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    job.write("pkg/helpers.py", "def scale(v):\n    return v * undefined_name\n")
    job.write(
        "pkg/main.py",
        f"""
        from interactive import vscode
        from pkg.helpers import scale

        @vscode({OFF})
        def task(v):
            return scale(v) + 1

        if __name__ == "__main__":
            print("RESULT", task(5))
        """,
    )
    job.start("-m", args=["pkg.main"]).wait_state("waiting")
    job.write("pkg/helpers.py", "def scale(v):\n    return v * 10\n")
    body = resume_ok(job)
    assert body["patched"] == ["pkg.helpers.scale"]
    assert "RESULT 51" in job.output()


def test_a_nested_task_function(job: Job) -> None:
    job.write(
        "job.py",
        f"""
        from interactive import vscode

        def main():
            offset = 1

            @vscode({OFF})
            def step(v):
                return v / 0 + offset

            print("RESULT", step(4))

        main()
        """,
    )
    job.start().wait_state("waiting")
    job.write("job.py", (job.workspace / "job.py").read_text().replace("v / 0", "v * 2"))
    resume_ok(job)
    assert "RESULT 9" in job.output()


def test_a_changed_signature_that_the_inputs_no_longer_fit_is_refused(job: Job) -> None:
    job.write(
        "job.py",
        f"""
        from interactive import vscode

        @vscode({OFF})
        def task(a, b):
            return a / b

        print("RESULT", task(1, 0))
        """,
    )
    job.start().wait_state("waiting")
    job.write("job.py", (job.workspace / "job.py").read_text().replace("(a, b)", "(a, b, c)"))
    status, body = job.api("POST", "/api/resume")
    assert status == 409
    assert "captured inputs (2 positional) do not fit task(a, b, c)" in body["error"]
    assert job.api("GET", "/api/status")[1]["state"] == "waiting"
    source = (job.workspace / "job.py").read_text()
    job.write("job.py", source.replace("(a, b, c)", "(a, b, c=2)").replace("a / b", "a / c"))
    resume_ok(job)
    assert "RESULT 0.5" in job.output()


def test_a_changed_class_layout_is_refused_by_name(job: Job) -> None:
    job.write(
        "job.py",
        f"""
        from dataclasses import dataclass
        from interactive import vscode

        @dataclass
        class Config:
            lr: float

        @vscode({OFF})
        def task(config):
            return 1 / config.lr

        print("RESULT", task(Config(0.0)))
        """,
    )
    job.start().wait_state("waiting")
    job.write("job.py", (job.workspace / "job.py").read_text().replace("lr: float", "lr: int"))
    status, body = job.api("POST", "/api/resume")
    assert status == 409
    assert "job.py:6: Config cannot be patched in place" in body["error"]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def test_the_fix_is_saved_as_a_patch_git_applies_in_the_checkout(job: Job, tmp_path: Path) -> None:
    checkout = job.workspace  # the task lives in a subfolder of a git checkout
    git("init", "-q", cwd=checkout)
    tasks = checkout / "tasks"
    tasks.mkdir()
    source = (
        f"from interactive import vscode\n\n@vscode({OFF})\ndef task(v):\n"
        '    return v / 0\n\nprint("RESULT", task(3))'
    )
    (tasks / "job.py").write_text(source)  # no newline at the end, as editors may leave it
    git("add", ".", cwd=checkout)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x", cwd=checkout)
    pristine = tmp_path / "pristine"
    shutil.copytree(checkout, pristine)
    job.workspace = tasks
    job.start("job.py").wait_state("waiting")
    (tasks / "job.py").write_text(source.replace("v / 0", "v * 3"))
    os.utime(tasks / "job.py", ns=(1, 1))  # a stamp the session cannot miss
    resume_ok(job)
    out = job.output()
    assert "RESULT 9" in out and "podcode edits job.py:task | git apply" in out
    patch = subprocess.run(
        [sys.executable, "-m", "interactive.cli", "edits", "job.py:task"],
        capture_output=True,
        text=True,
        env={**os.environ, "PODCODE_HOME": str(job.home)},
        check=True,
    ).stdout
    assert "b/tasks/job.py" in patch
    subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=pristine, check=True)
    assert (pristine / "tasks" / "job.py").read_text() == (tasks / "job.py").read_text()


def read_only(folder: Path) -> list[str]:
    """A command prefix that runs the job with ``folder`` read-only (root writes anywhere,
    so a read-only bind mount in a mount namespace of its own)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return []
    if not shutil.which("unshare"):
        pytest.skip("needs unshare to make a folder read-only for root")
    mount = f"mount --bind -o ro {folder} {folder} && exec \"$@\""
    return ["unshare", "--mount", "sh", "-c", mount, "sh"]


def test_read_only_workspace_keeps_configurations_in_the_home(job: Job) -> None:
    job.write("job.py", FAILS)
    try:
        record = job.start(wrapper=read_only(job.workspace)).wait_state("waiting")
        assert not (job.workspace / ".vscode").exists()
        status = job.api("GET", "/api/status")[1]
        assert any("read-only" in note for note in status["notes"])
        assert (job.home / "ide-workspace" / ".vscode" / "launch.json").exists()
        assert record["state"] == "waiting"
    finally:
        job.workspace.chmod(0o755)


def test_an_unwritable_home_keeps_the_tasks_own_error(job: Job, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # PODCODE_HOME under a file: not creatable, even as root
    job.write("job.py", FAILS)
    job.start(env={"PODCODE_HOME": str(blocker / "home")})
    assert job.wait_exit() == 1
    out = job.output()
    assert "ZeroDivisionError: division by zero" in out
    assert "podcode could not open a debug session for job.py:t: PODCODE_HOME=" in out
    assert "wait_for_client" not in out


def test_startup_mode_without_a_session_runs_the_task(job: Job, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    job.write(
        "job.py",
        f'from interactive import vscode\n\n@vscode(mode="startup", {OFF})\n'
        'def t():\n    return 7\n\nprint("RESULT", t())\n',
    )
    job.start(env={"PODCODE_HOME": str(blocker / "home")})
    assert job.wait_exit() == 0
    assert "RESULT 7" in job.output() and "the task runs without one" in job.output()


def test_a_slow_code_server_install_never_holds_the_session_back(job: Job, tmp_path: Path) -> None:
    """The mirror answers only after a while (an install taking minutes): the session opens
    at once without the IDE, says so, and the task's own exception survives an abort."""
    import http.server
    import threading

    release = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            release.wait(60)
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        job.write("job.py", FAILS.replace('ide="none", ', ""))
        env = {
            "PODCODE_CODE_SERVER_CACHE": str(tmp_path / "empty-cache"),
            "PODCODE_CODE_SERVER_URL": f"http://127.0.0.1:{server.server_port}/cs.tar.gz",
            "PODCODE_CODE_SERVER_SHA256": "0" * 64,
            "PATH": os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin",
        }
        job.start(env=env).wait_state("waiting", timeout=30)
        notes = job.api("GET", "/api/status")[1]["notes"]
        assert any("is not installed: installing it" in note for note in notes), notes
        release.set()  # the install fails now: the session goes on without an IDE
        assert job.api("POST", "/api/abort")[0] == 202
        assert job.wait_exit() == 1
        assert "ZeroDivisionError: division by zero" in job.output()
    finally:
        release.set()
        server.shutdown()
        server.server_close()

"""A mistyped ``PODCODE_*`` variable, as a user meets it: ``python job.py`` in an
environment that carries it, podcode off and on. The job ends with its own exit code,
says one ``podcode:`` line naming the variable, and prints no traceback; with podcode on
the task runs without a session (a failing startup task would otherwise wait)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = """\
import asyncio
import sys

from interactive import vscode


@vscode
def add(a, b):
    return a + b


@vscode(mode="startup", ide="none")
async def fails():
    raise KeyError("the task's own")


total = add(1, 2) + add(2, 2)
try:
    asyncio.run(fails())
except KeyError:
    total += 10
sys.exit(total)
"""
EXIT = 17
SECRET = "s3cret-Pw"
BAD = [
    ("PODCODE_MAX_IDLE_SECONDS", "abc", "finite number > 0"),
    ("PODCODE_ON_REAP", "nomod:fn", "No module named 'nomod'"),
    ("PODCODE_ENABLE", "maybe", "true or false"),
    ("PODCODE_SMTP_URL", f"smtp://ana:{SECRET}@mail.example.com:587?starttls=maybe",
     "starttls=true|false"),
]


def _run(tmp_path: Path, variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.py").write_text(JOB)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PODCODE_") and k != "KUBERNETES_SERVICE_HOST"}
    env.update(PODCODE_HOME=str(tmp_path / "home"), **variables)
    return subprocess.run([sys.executable, "job.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("variable", "value", "accepted"), BAD)
@pytest.mark.parametrize("on", [False, True])
def test_a_bad_variable_is_one_line_and_the_task_runs_as_its_own(
    tmp_path: Path, variable: str, value: str, accepted: str, on: bool
) -> None:
    switch = {"KUBERNETES_SERVICE_HOST": "127.0.0.1"} if variable == "PODCODE_ENABLE" else {
        "PODCODE_ENABLE": "1"}
    done = _run(tmp_path, {**(switch if on else {}), variable: value})
    output = done.stdout + done.stderr
    assert done.returncode == EXIT, output
    assert "Traceback" not in output and SECRET not in output
    [line] = output.splitlines()  # nothing else is printed
    assert line.startswith(f"podcode: {variable}=") and accepted in line
    assert ("runs without a debug session" in line) is on, line
    assert not (tmp_path / "home").exists()  # no session, no captured inputs


def test_a_good_environment_says_nothing(tmp_path: Path) -> None:
    """The control: the same job with podcode off and a good variable is silent."""
    done = _run(tmp_path, {"PODCODE_MAX_IDLE_SECONDS": "60", "PODCODE_ENABLE": "0"})
    assert (done.returncode, done.stdout, done.stderr) == (EXIT, "", "")

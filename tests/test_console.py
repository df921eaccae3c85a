"""podcode's log lines on the task's output start with ``podcode:``, and only while the
task configures no logging of its own."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interactive.base.console import LastResort, install, others_take, prefixed


def test_every_line_is_prefixed_once() -> None:
    assert prefixed("port 8081 is in use") == "podcode: port 8081 is in use"
    assert prefixed("failed\nTraceback (most recent call last):\n  boom") == (
        "podcode: failed\npodcode: Traceback (most recent call last):\npodcode:   boom"
    )
    assert prefixed("podcode: said already") == "podcode: said already"


@pytest.fixture
def lone_logger() -> Iterator[logging.Logger]:
    """A podcode logger that does not propagate, so that pytest's handlers on the root
    logger are out of its way, as they are out of a task's process."""
    logger = logging.getLogger("interactive.tests_console_probe")
    logger.propagate = False
    yield logger
    logger.handlers.clear()
    logger.propagate = True


def test_the_handler_prints_when_no_other_handler_would(
    lone_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = LastResort()
    lone_logger.handlers[:] = [handler]  # pytest puts its capture on a lone logger too
    assert not others_take(lone_logger, handler)
    lone_logger.info("not shown: below WARNING, as Python's last resort")
    lone_logger.warning("the IDE is slow to start")
    assert capsys.readouterr().err == "podcode: the IDE is slow to start\n"

    lone_logger.addHandler(logging.NullHandler())  # the task configured logging
    assert others_take(lone_logger, handler)
    lone_logger.error("now the task's handlers say it")
    assert capsys.readouterr().err == ""


def test_install_is_idempotent() -> None:
    install()
    install()
    for name in ("interactive", "server_bootstrap", "vscode_config"):
        mine = [h for h in logging.getLogger(name).handlers if isinstance(h, LastResort)]
        assert len(mine) == 1, name


JOB = """\
import logging
from interactive import vscode


@vscode
def task():
    return 0


log = logging.getLogger("interactive.session.core")
log.warning("first")
log.error("second\\nline")
logging.basicConfig(format="TASK %(levelname)s %(message)s")
log.warning("third")
raise SystemExit(task())
"""


def test_a_task_process_sees_podcodes_lines_prefixed_until_it_configures_logging(
    tmp_path: Path,
) -> None:
    (tmp_path / "job.py").write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCODE_")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    done = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "podcode: first", "podcode: second", "podcode: line", "TASK WARNING third",
    ]

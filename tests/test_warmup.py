"""A task that fails at once, while the background imports still run, opens its session."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.session_fixture import Job

JOB = """
from interactive import vscode

@vscode(ide="none", port=0, control_port=0, debug_port=0)
def instant():
    raise RuntimeError("at once")

if __name__ == "__main__":
    instant()
"""


def test_instant_failure_races_no_import(job: Job) -> None:
    job.write("job.py", JOB)
    for _ in range(3):
        job.start().wait_state("waiting")
        assert job.api("POST", "/api/abort")[0] == 202
        assert job.wait_exit() == 1
        assert "RuntimeError: at once" in job.output() and "ImportError" not in job.output()
        (job.home / "session.json").unlink()


PROBE = """
import json, sys
from interactive.task import warmup
from debugpy.common import log as debugpy_log
reports = []
debugpy_log.get_environment_description = lambda header: reports.append(header) or header
hook = sys.breakpointhook
warmup.warm_up()
warmup._thread.join(60)
during_task = sys.breakpointhook is hook
pydevd_loaded = "pydevd" in sys.modules
debugpy_log.describe_environment("quiet")
debugpy_log.stderr.levels = set(debugpy_log.stderr.levels) | {"info"}
debugpy_log.describe_environment("asked for")
from vscode_config import templates
compiled = templates.required.cache_info().currsize
import jinja2
from vscode_config.vscode import TEMPLATES
compiles = []
compile_source = jinja2.Environment._compile
def counted(env, source, name):
    compiles.append(name)
    return compile_source(env, source, name)
jinja2.Environment._compile = counted
for name in TEMPLATES:  # as render() finds them
    templates.environment(False).get_template(name)
warmup.settle()
print(json.dumps({
    "during_task": during_task,
    "pydevd": pydevd_loaded,
    "session_hook": getattr(sys.breakpointhook, "__name__", ""),
    "reports": reports,
    "compiled": compiled,
    "compiled_again": compiles,
}))
"""


def test_warm_up_prepares_the_debugger_and_templates_without_taking_breakpoint() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["pydevd"] and seen["during_task"]  # the task's breakpoint() is its own
    # the session's debugger takes breakpoint() once a session opens
    assert seen["session_hook"] in ("debugpy_breakpointhook", "pydevd_breakpointhook")
    assert seen["reports"] == ["asked for"]  # the environment report only for a log that keeps it
    assert seen["compiled"] == 3
    # the session renders the templates compiled ahead (compiling them again holds the
    # GIL long enough to stall an event loop while a session opens)
    assert seen["compiled_again"] == []

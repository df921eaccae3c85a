"""End to end: a real failing task in a child process marks its "pod" in the in-process API
server; the CLI finds it, reads its secrets by exec and steers it through the port-forward."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from interactive.cli import Exit
from tests.cli_fixture import cli, labels
from tests.fake_kube import FakeKube
from tests.session_fixture import Job

JOB = """
from interactive import vscode

@vscode(ide="none", port=0, control_port=0, debug_port=0, owner="ana@example.com")
def train(steps):
    if steps > 2:
        raise ValueError(f"diverged at step {steps}")
    return steps

if __name__ == "__main__":
    print("RESULT", train(3))
"""


def wait_for(predicate: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_real_session_is_listed_inspected_and_resumed_through_the_cluster(
    job: Job, fake_kube: FakeKube
) -> None:
    fake_kube.add_pod("train-job-0", "ml")
    job.write("job.py", JOB)
    job.start(env={"POD_NAME": "train-job-0", "POD_NAMESPACE": "ml"})
    token = job.wait_state("waiting")["token"]
    wait_for(lambda: labels(fake_kube).get("podcode.io/session") == "true", "the pod's labels")

    code, out, err = cli("list", "-n", "ml", "-o", "json")
    assert code == Exit.OK, err
    [listed] = json.loads(out)
    assert (listed["pod"], listed["task"], listed["owner"]) == (
        "train-job-0", "job.py:train", "ana@example.com")
    wait_for(lambda: any(e["reason"] == "PodcodeWaiting" for e in fake_kube.events),
             "the PodcodeWaiting event")

    code, out, err = cli("status", "train-job-0", "-n", "ml", "-o", "json")
    assert code == Exit.OK, err
    status = json.loads(out)
    assert status["state"] == "waiting"
    assert "diverged at step 3" in status["error"]

    job.write("job.py", JOB.replace("steps > 2", "steps > 5"))
    code, out, err = cli("resume", "train-job-0", "-n", "ml")
    assert code == Exit.OK, err
    assert job.wait_exit() == 0
    assert "RESULT 3" in job.output()
    dumped = json.dumps(fake_kube.pod("train-job-0", "ml")) + json.dumps(fake_kube.events)
    assert token not in dumped
    wait_for(lambda: labels(fake_kube).get("podcode.io/state") == "done", "the final state")
    code, out, err = cli("attach", "train-job-0", "-n", "ml")
    assert code == Exit.NOT_FOUND
    assert "has ended" in err

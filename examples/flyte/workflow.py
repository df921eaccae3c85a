"""A Flyte workflow whose middle task fails; ``@vscode`` sits under ``@task``.

    PODCODE_ENABLE=1 python examples/flyte/workflow.py

Run locally (or in a Flyte pod, where podcode is on by default), ``normalize``
fails on its real input; fix it in the session and resume: the workflow goes
on with the edited code and ``report`` gets the real output.
"""

from __future__ import annotations

from flytekit import task, workflow

from interactive import vscode


@task
def load(n: int) -> list[float]:
    return [float(i) for i in range(n)]


@task
@vscode(ide="none")
def normalize(values: list[float]) -> list[float]:
    total = sum(values)
    return [v / (total - total) for v in values]  # the bug: divide by total


@task
def report(values: list[float]) -> str:
    return f"normalized {len(values)} values, sum {sum(values):.2f}"


@workflow
def pipeline(n: int = 4) -> str:
    return report(values=normalize(values=load(n=n)))


if __name__ == "__main__":
    print("INTERFACE", dict(normalize.python_interface.inputs), normalize.name, flush=True)
    print("RESULT", pipeline(n=4), flush=True)

"""``podcode list`` over a thousand sessions, against the in-process API server.

``run()`` returns one entry ``{"name", "value", "unit", "baseline", "goal"}`` with the
median, ``min`` and ``max`` of several interleaved runs (:mod:`benchmarks.harness`):

- ``list_1000_pods_s``: wall time of ``podcode list -A`` (kubeconfig loading,
  the paginated label-selector list, the table) over 1000 session pods among
  1200 pods in 4 namespaces. Baseline, measured in the same run: one bare
  ``CoreV1Api.list_pod_for_all_namespaces(label_selector=...)`` call of the
  official client (which builds a model object per pod). Goal: no slower
  than the bare client call.

Run: ``python benchmarks/bench_cli_list.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client, config  # noqa: E402

from benchmarks.harness import figure, interleaved, seconds  # noqa: E402
from interactive import cli  # noqa: E402
from tests.fake_kube import FakeKube  # noqa: E402

SESSIONS = 1000
OTHERS = 200
def _populate(fake: FakeKube) -> None:
    for i in range(SESSIONS):
        fake.session_pod(f"train-{i:04d}", f"team-{i % 4}", extra_annotations={
            "podcode.io/owner": f"user{i % 17}@example.com",
            "podcode.io/idle-since": "2030-01-01T00:00:00Z",
        })
    for i in range(OTHERS):
        fake.add_pod(f"web-{i:03d}", f"team-{i % 4}")


def _bare_list(api: client.CoreV1Api) -> Callable[[], object]:
    def call() -> object:
        pods = api.list_pod_for_all_namespaces(label_selector="podcode.io/session=true")
        assert len(pods.items) == SESSIONS
        return pods

    return call


@contextlib.contextmanager
def _bare_client(kubeconfig: Path) -> Iterator[client.CoreV1Api]:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    with client.ApiClient(configuration) as api_client:
        yield client.CoreV1Api(api_client)


def _podcode_list(kubeconfig: Path) -> Callable[[], object]:
    def call() -> object:
        out = io.StringIO()
        console = cli.Console(out=out, err=io.StringIO(), environ={"KUBECONFIG": str(kubeconfig)})
        assert cli.run(["list", "-A"], console) == 0
        assert len(out.getvalue().splitlines()) == SESSIONS + 1
        return out

    return call


def run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        fake = FakeKube(Path(folder)).start()
        try:
            _populate(fake)
            with _bare_client(fake.kubeconfig) as api:
                bare = _bare_list(api)
                ours, baseline = interleaved(lambda: seconds(_podcode_list(fake.kubeconfig)),
                                             lambda: seconds(bare))
        finally:
            fake.stop()
    return [figure(
        "list_1000_pods_s", ours, unit="s", baseline=baseline,
        goal="<= baseline (one bare kubernetes-client list of the same pods)",
    )]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))

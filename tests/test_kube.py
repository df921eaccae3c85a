"""The pod's side of Kubernetes, against the in-process API server with the real client."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interactive.kube.client import ServiceAccount
from interactive.kube.labels import parse_rfc3339, rfc3339
from interactive.kube.pod import PodClient
from tests.fake_kube import FakeKube

PORTS = {"code_server": 8080, "control": 8081, "debug": 5678}


def test_a_session_imports_the_kubernetes_client_only_where_it_finds_its_pod(
    fake_kube: FakeKube,
) -> None:
    """A session's modules do not import the Kubernetes client (0.2 s and more, which would
    stop the event loop serving the control API and login links); ``discover_pod``, which
    the session calls in a worker thread, does, in a pod only: outside Kubernetes it
    imports nothing (a session that ends at once does not wait at exit for that import)."""
    fake_kube.add_pod("train-0", "ml")
    code = (
        "import sys, interactive.session.core, interactive.doors.control\n"
        "from interactive.kube import discover_pod\n"
        "before = 'kubernetes' in sys.modules\n"
        "print(before, discover_pod() is not None, 'kubernetes' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items()
           if k not in ("POD_NAME", "KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    in_a_pod = {**env, "POD_NAME": "train-0", "POD_NAMESPACE": "ml",
                "KUBECONFIG": str(fake_kube.kubeconfig)}
    said = [subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                           text=True, check=True, timeout=120).stdout.split()
            for environ in (env, in_a_pod)]
    assert said == [["False", "False", "False"], ["False", "True", "True"]]


@pytest.fixture
def pod(fake_kube: FakeKube) -> Iterator[PodClient]:
    fake_kube.add_pod("train-0", "ml", annotations={"podcode.io/owner": " ana@example.com "})
    client = PodClient.discover(
        {"POD_NAME": "train-0", "POD_NAMESPACE": "ml", "KUBECONFIG": str(fake_kube.kubeconfig)}
    )
    assert client is not None
    yield client
    client.close()


def test_not_in_a_pod_without_pod_name_or_service_host(fake_kube: FakeKube) -> None:
    assert PodClient.discover({}) is None
    assert PodClient.discover({"KUBECONFIG": str(fake_kube.kubeconfig)}) is None


def test_pod_name_without_credentials_is_not_usable(caplog: pytest.LogCaptureFixture) -> None:
    assert PodClient.discover({"POD_NAME": "p"}) is None
    assert "no Kubernetes credentials" in caplog.text


def test_finds_itself_from_hostname_and_namespace_file(fake_kube: FakeKube, tmp_path: Path) -> None:
    (tmp_path / "namespace").write_text("team-a\n")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBECONFIG": str(fake_kube.kubeconfig)}
    client = PodClient.discover(environ, account=ServiceAccount(tmp_path))
    assert client is not None
    assert (client.name, client.namespace) == (socket.gethostname(), "team-a")
    client.close()


def test_mark_session_labels_annotates_and_says_waiting(
    pod: PodClient, fake_kube: FakeKube
) -> None:
    pod.mark_session(task="train.fit", state="waiting", owner="bo@example.com", ports=PORTS,
                     home="/home/me/.podcode")
    meta = fake_kube.pod("train-0", "ml")["metadata"]  # type: ignore[index]
    assert meta["labels"] == {"podcode.io/session": "true", "podcode.io/state": "waiting"}
    assert meta["annotations"]["podcode.io/task"] == "train.fit"
    assert meta["annotations"]["podcode.io/owner"] == "bo@example.com"
    assert json.loads(meta["annotations"]["podcode.io/ports"]) == PORTS
    assert meta["annotations"]["podcode.io/home"] == "/home/me/.podcode"
    [event] = fake_kube.events
    assert event["reason"] == "PodcodeWaiting"
    assert event["involvedObject"]["name"] == "train-0"
    assert event["involvedObject"]["uid"] == meta["uid"]
    assert "podcode attach -n ml train-0" in event["message"]
    patch = next(r for r in fake_kube.requests if r.method == "PATCH")
    assert patch.content_type == "application/strategic-merge-patch+json"


def test_mark_session_keeps_the_users_owner_when_none_given(
    pod: PodClient, fake_kube: FakeKube
) -> None:
    pod.mark_session(task="t", state="waiting", owner=None, ports=PORTS, home="/h")
    patch = next(r for r in fake_kube.requests if r.method == "PATCH")
    assert "podcode.io/owner" not in patch.body["metadata"]["annotations"]
    assert pod.owner_annotation() == "ana@example.com"


def test_state_reap_at_and_idle_since(pod: PodClient, fake_kube: FakeKube) -> None:
    """Warned: the pod's annotations and the session's own say when it went idle and when
    it is cleaned up (a pod that holds several sessions shows each one's); cleared after."""
    pod.mark_session(task="t", state="waiting", owner=None, ports=PORTS, home="/h",
                     session="7-1")
    own = "sessions.podcode.io/7-1"
    pod.set_state("warned")
    patches = len([r for r in fake_kube.requests if r.method == "PATCH"])
    pod.set_idle(1_699_999_000.0, 1_700_000_000.0)
    assert len([r for r in fake_kube.requests if r.method == "PATCH"]) == patches + 1
    meta = fake_kube.pod("train-0", "ml")["metadata"]  # type: ignore[index]
    assert meta["labels"]["podcode.io/state"] == "warned"
    assert meta["annotations"]["podcode.io/reap-at"] == "2023-11-14T22:13:20Z"
    assert parse_rfc3339(meta["annotations"]["podcode.io/idle-since"]) == 1_699_999_000.0
    assert json.loads(meta["annotations"][own]) == {
        "task": "t", "pid": os.getpid(), "ports": PORTS,
        "idle_since": "2023-11-14T21:56:40Z", "reap_at": "2023-11-14T22:13:20Z"}
    pod.set_idle(None, None)
    annotations = fake_kube.pod("train-0", "ml")["metadata"]["annotations"]  # type: ignore[index]
    assert "podcode.io/reap-at" not in annotations
    assert "podcode.io/idle-since" not in annotations
    assert json.loads(annotations[own]) == {"task": "t", "pid": os.getpid(), "ports": PORTS}
    pod.end_session("7-1", "done")
    pod.set_idle(None, None)  # late: the ended session's annotation stays gone
    annotations = fake_kube.pod("train-0", "ml")["metadata"]["annotations"]  # type: ignore[index]
    assert own not in annotations


def test_events_carry_reason_type_and_message(pod: PodClient, fake_kube: FakeKube) -> None:
    pod.event("PodcodeIdleWarning", "idle for 30m; cleanup at 12:00", type="Warning")
    [event] = fake_kube.events
    assert (event["reason"], event["type"]) == ("PodcodeIdleWarning", "Warning")
    assert event["source"]["component"] == "podcode"
    assert parse_rfc3339(event["firstTimestamp"]) is not None


def test_delete_sends_the_grace_period(pod: PodClient, fake_kube: FakeKube) -> None:
    assert pod.delete(grace_seconds=30) is True
    assert fake_kube.pod("train-0", "ml") is None
    delete = [r for r in fake_kube.requests if r.method == "DELETE"]
    assert delete[-1].path == "/api/v1/namespaces/ml/pods/train-0"
    assert delete[-1].query.get("gracePeriodSeconds") == ["30"]
    assert pod.delete() is True  # already gone: nothing left to do


@pytest.mark.parametrize("status", [403, 500])
def test_refusals_are_logged_once_and_never_raise(
    pod: PodClient, fake_kube: FakeKube, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    fake_kube.fail(status, method="PATCH")
    fake_kube.fail(status, method="DELETE")
    with caplog.at_level(logging.WARNING, logger="interactive.kube.pod"):
        pod.set_state("warned")
        pod.set_state("reaping")
        pod.set_idle(None, 1.0)
        assert pod.delete() is False
    warnings = [r.getMessage() for r in caplog.records]
    assert len([w for w in warnings if "patch pods in namespace ml" in w]) == 1
    assert any("delete pods in namespace ml" in w for w in warnings)
    if status == 403:
        assert "needs permission to patch pods in namespace ml" in warnings[0]
    assert len(pod.problems) == 2
    assert fake_kube.pod("train-0", "ml") is not None


def test_an_unreachable_api_server_is_survived(
    pod: PodClient, fake_kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    with fake_kube.offline():
        pod.mark_session(task="t", state="waiting", owner=None, ports=PORTS, home="/h")
        assert pod.owner_annotation() is None
        assert pod.delete() is False
    assert "cannot reach the Kubernetes API server" in caplog.text
    pod.set_state("done")  # back up: calls work again
    assert fake_kube.pod("train-0", "ml")["metadata"]["labels"]["podcode.io/state"] == "done"  # type: ignore[index]


def test_rfc3339_round_trip() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert parse_rfc3339("1970-01-01T00:01:00Z") == 60.0
    assert parse_rfc3339("yesterday") is None
    assert parse_rfc3339(None) is None

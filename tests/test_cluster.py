"""The CLI's cluster access: kubeconfig, listing, sessions, secrets by exec, access reviews."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from interactive.base.sessionfile import parse_session
from interactive.kube.cluster import Cluster, session_from_pod
from interactive.kube.errors import (
    Forbidden,
    KubeConfigError,
    KubeConfigMissing,
    KubeError,
    NotASession,
    NotFound,
    ServerError,
    SessionEnded,
    Unauthorized,
    Unreachable,
)
from tests.fake_kube import FakeKube


@pytest.fixture
def cluster(fake_kube: FakeKube) -> Iterator[Cluster]:
    with Cluster.connect() as connected:
        yield connected


def _pod_home(tmp_path: Path, **overrides: object) -> Path:
    home = tmp_path / "pod-home"
    home.mkdir()
    record = {
        "state": "waiting", "task": "train.fit", "error": "ValueError: nan", "workspace": "/src",
        "control_url": "http://0.0.0.0:8081", "token": "tok-123",
        "debug": {"host": "127.0.0.1", "port": 5678},
        "code_server_url": "http://127.0.0.1:8080", "password": "pw-456", "pid": 7,
        **overrides,
    }
    (home / "session.json").write_text(json.dumps(record))
    return home


def test_session_from_pod_reads_labels_and_annotations() -> None:
    info = session_from_pod({
        "metadata": {
            "name": "p", "namespace": "ml",
            "labels": {"podcode.io/session": "true", "podcode.io/state": "warned"},
            "annotations": {
                "podcode.io/task": "m.f", "podcode.io/owner": "a@b.c",
                "podcode.io/reap-at": "1970-01-01T01:00:00Z",
                "podcode.io/idle-since": "1970-01-01T00:30:00Z",
                "podcode.io/ports": '{"code_server": 8080, "control": 8081, "bad": "x"}',
                "podcode.io/home": "/root/.podcode",
                "kubectl.kubernetes.io/default-container": "side",
            },
        },
        "spec": {"containers": [{"name": "main"}, {"name": "side"}]},
        "status": {"phase": "Running"},
    })
    assert (info.pod, info.namespace, info.state, info.task) == ("p", "ml", "warned", "m.f")
    assert (info.idle_since, info.reap_at) == (1800.0, 3600.0)
    assert info.ports == {"code_server": 8080, "control": 8081}
    assert info.container() == "side" and info.container("main") == "main"
    assert info.is_session and not info.ended


def test_an_ended_or_foreign_pod_is_recognised() -> None:
    assert not session_from_pod({"metadata": {"name": "x"}}).is_session
    done = {"metadata": {"labels": {"podcode.io/session": "true", "podcode.io/state": "done"}}}
    assert session_from_pod(done).ended
    assert session_from_pod({"metadata": {}, "status": {"phase": "Succeeded"}}).ended


def test_missing_kubeconfig_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigMissing) as raised:
        Cluster.connect(environ={"KUBECONFIG": str(tmp_path / "nope")})
    assert "--kubeconfig" in str(raised.value)


def test_broken_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "config"
    broken.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    with pytest.raises(KubeConfigError) as raised:
        Cluster.connect(str(broken), environ={})
    assert not isinstance(raised.value, KubeConfigMissing)
    assert str(raised.value).startswith(f"cannot use the kubeconfig {broken}: ")


def test_namespace_comes_from_the_context(fake_kube: FakeKube, tmp_path: Path) -> None:
    path = fake_kube.write_kubeconfig(tmp_path / "team", namespace="team-a")
    with Cluster.connect(str(path), environ={}) as cluster:
        assert cluster.namespace == "team-a"


def test_list_pages_through_a_thousand_sessions(cluster: Cluster, fake_kube: FakeKube) -> None:
    for i in range(1000):
        fake_kube.session_pod(f"s-{i:04d}", f"ns-{i % 3}")
    for i in range(50):
        fake_kube.add_pod(f"other-{i}", "ns-0")
    fake_kube.clear_requests()
    sessions = cluster.list_sessions(None, page_size=300)
    assert len(sessions) == 1000
    assert len({(s.namespace, s.pod) for s in sessions}) == 1000
    lists = [r for r in fake_kube.requests if r.path == "/api/v1/pods"]
    assert len(lists) == 4
    assert all(r.query["labelSelector"] == ["podcode.io/session=true"] for r in lists)
    assert all(r.query["limit"] == ["300"] for r in lists)
    assert len(cluster.list_sessions("ns-1")) == 333


def test_unknown_and_foreign_and_ended_pods(cluster: Cluster, fake_kube: FakeKube) -> None:
    fake_kube.add_pod("web")
    fake_kube.session_pod("old", state="done")
    with pytest.raises(NotFound, match="no pod ghost in namespace default"):
        cluster.session("ghost")
    with pytest.raises(NotASession, match="not a podcode session"):
        cluster.session("web")
    with pytest.raises(SessionEnded, match="has ended"):
        cluster.live_session("old")


@pytest.mark.parametrize(("status", "kind"), [(403, Forbidden), (401, Unauthorized),
                                              (500, ServerError)])
def test_api_refusals_become_one_line_errors(
    cluster: Cluster, fake_kube: FakeKube, status: int, kind: type[KubeError]
) -> None:
    fake_kube.fail(status, method="GET")
    with pytest.raises(kind) as raised:
        cluster.list_sessions("default")
    assert raised.value.status == status
    assert "\n" not in str(raised.value)


def test_a_refusal_names_what_the_role_lacks(cluster: Cluster, fake_kube: FakeKube) -> None:
    fake_kube.fail(403, method="GET")
    with pytest.raises(Forbidden) as raised:
        cluster.list_sessions("ml")
    assert (raised.value.verb, raised.value.resource, raised.value.namespace) == (
        "list", "pods", "ml")


def test_an_api_server_that_is_down(cluster: Cluster, fake_kube: FakeKube) -> None:
    with fake_kube.offline(), pytest.raises(Unreachable, match="cannot reach") as raised:
        cluster.session("any")
    assert f"at {fake_kube.url} (connection refused)" in str(raised.value)


def test_secrets_are_read_from_the_pod_by_exec(
    cluster: Cluster, fake_kube: FakeKube, tmp_path: Path
) -> None:
    home = _pod_home(tmp_path)
    fake_kube.session_pod("job", home=str(home), containers=("main", "sidecar"),
                          extra_annotations={"kubectl.kubernetes.io/default-container": "main"})
    [(where, data)] = cluster.read_session_records(cluster.session("job"))
    session = parse_session(data, where)
    assert (session.token, session.password) == ("tok-123", "pw-456")
    assert session.control_url == "http://127.0.0.1:8081"
    listing, reading = [r for r in fake_kube.requests if r.path.endswith("/exec")]
    assert listing.query["command"] == ["ls", "-1", f"{home}/sessions"]
    assert reading.query["command"] == ["cat", f"{home}/session.json"]
    assert reading.query["container"] == ["main"]
    assert "tok-123" not in json.dumps(fake_kube.pod("job")) + json.dumps(fake_kube.events)


def test_every_session_record_of_a_pod_is_read_in_one_cat(
    cluster: Cluster, fake_kube: FakeKube, tmp_path: Path
) -> None:
    home = _pod_home(tmp_path, pid=7, started=1.0)
    for pid in (7, 8):
        folder = home / "sessions" / f"{pid}-100"
        folder.mkdir(parents=True)
        (folder / "session.json").write_text(json.dumps({"pid": pid, "started": 1.0}))
    (home / "sessions" / "9-100").mkdir()  # a session still starting: no record yet
    fake_kube.session_pod("job", home=str(home))
    records = cluster.read_session_records(cluster.session("job"))
    assert sorted(data["pid"] for _, data in records) == [7, 7, 8]
    reading = [r for r in fake_kube.requests if r.path.endswith("/exec")][-1]
    assert reading.query["command"][0] == "cat" and len(reading.query["command"]) == 5


def test_no_session_file_means_the_session_ended(
    cluster: Cluster, fake_kube: FakeKube, tmp_path: Path
) -> None:
    fake_kube.session_pod("job", home=str(tmp_path / "empty"))
    with pytest.raises(SessionEnded, match="has ended or is not open yet"):
        cluster.read_session_records(cluster.session("job"))


def test_exec_refused(cluster: Cluster, fake_kube: FakeKube, tmp_path: Path) -> None:
    fake_kube.session_pod("job", home=str(_pod_home(tmp_path)))
    info = cluster.session("job")
    fake_kube.fail(403, path="/exec$")
    with pytest.raises(Forbidden, match="may not create pods/exec"):
        cluster.read_session_records(info)


def test_access_review(cluster: Cluster, fake_kube: FakeKube) -> None:
    fake_kube.deny("create", "pods/exec")
    assert cluster.can_i("list", "pods", "default")
    assert not cluster.can_i("create", "pods", "default", "exec")
    review = [r for r in fake_kube.requests if "selfsubjectaccessreviews" in r.path][-1]
    assert review.body["spec"]["resourceAttributes"]["subresource"] == "exec"

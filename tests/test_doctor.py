"""podcode doctor: each check against real peers (SMTP server, sockets, the API server)."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from interactive.cli import Console, Exit, run
from interactive.cli import checks as doctor
from interactive.kube.cluster import Cluster
from tests.fake_kube import FakeKube
from tests.smtp_fixture import SmtpServer, client_context


def test_smtp_says_ehlo(smtp_server: SmtpServer) -> None:
    check = doctor.check_smtp({"PODCODE_SMTP_URL": smtp_server.url})
    assert check.status == doctor.OK
    assert "EHLO 250" in check.detail


def test_smtp_starttls_and_login(
    make_smtp_server: Callable[..., SmtpServer], smtp_tls_cert: tuple[Path, Path]
) -> None:
    server = make_smtp_server(tls="starttls", users={"mailer": "s3cret"})
    check = doctor.check_smtp({"PODCODE_SMTP_URL": server.url},
                              context=client_context(smtp_tls_cert))
    assert check.status == doctor.OK, check
    assert "STARTTLS" in check.detail and "login ok" in check.detail
    assert "s3cret" not in check.detail


def test_smtp_wrong_password(
    make_smtp_server: Callable[..., SmtpServer], smtp_tls_cert: tuple[Path, Path]
) -> None:
    server = make_smtp_server(tls="starttls", users={"mailer": "right"})
    url = server.url.replace(":right@", ":wrong@")
    check = doctor.check_smtp({"PODCODE_SMTP_URL": url}, context=client_context(smtp_tls_cert))
    assert check.status == doctor.FAIL
    assert "refused the login" in check.detail
    assert "wrong" not in check.detail


def test_smtp_unreachable_and_unset_and_malformed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    down = doctor.check_smtp({"PODCODE_SMTP_URL": f"smtp://127.0.0.1:{port}"}, timeout=5)
    assert down.status == doctor.FAIL and down.fix
    assert doctor.check_smtp({}).status == doctor.WARN
    bad = doctor.check_smtp({"PODCODE_SMTP_URL": "http://user:pw@host"})
    assert bad.status == doctor.FAIL
    assert "pw" not in bad.detail.replace("PODCODE", "")


def test_ports_free_and_busy() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        checks = doctor.check_ports({"PODCODE_PORT": str(port), "PODCODE_CONTROL_PORT": "0"})
    by_name = {c.name: c for c in checks}
    assert by_name["port (code-server)"].status == doctor.WARN
    assert "PODCODE_PORT" in by_name["port (code-server)"].fix
    assert by_name["port (control API)"].status == doctor.OK
    bad = doctor.check_ports({"PODCODE_DEBUG_PORT": "99999"})
    assert bad[0].status == doctor.FAIL and "debug_port" in bad[0].detail


def test_node_missing_or_old(tmp_path: Path) -> None:
    """An old Node is fine: installing from the npm registry brings its own, so the node
    check agrees with the code-server check's advice (podcode install) on one machine."""
    assert doctor.check_node({"PATH": str(tmp_path)}).status == doctor.WARN
    for name, say in (("node", "echo v18.19.0"), ("npm", "echo 10.0.0")):
        fake = tmp_path / name
        fake.write_text(f"#!/bin/sh\n{say}\n")
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    old = doctor.check_node({"PATH": str(tmp_path)})
    assert old.status == doctor.OK and "v18.19.0" in old.detail and "its own Node" in old.detail


def test_code_server_setting_that_is_not_a_program(tmp_path: Path) -> None:
    check = doctor.check_code_server({"PODCODE_CODE_SERVER_PATH": str(tmp_path / "nope"),
                                      "PATH": ""})
    assert check.status == doctor.FAIL
    assert "PODCODE_CODE_SERVER_PATH" in check.detail


def test_nvml_never_raises() -> None:
    assert doctor.check_nvml().status in (doctor.OK, doctor.WARN)


def test_user_permissions(fake_kube: FakeKube) -> None:
    fake_kube.deny("create", "pods/exec")
    checks = doctor.check_kubernetes(Cluster.connect, {}, "ml")
    by_name = {c.name: c for c in checks}
    assert by_name["kubernetes"].status == doctor.OK
    assert by_name["k8s you: create pods/portforward"].status == doctor.OK
    refused = by_name["k8s you: create pods/exec"]
    assert refused.status == doctor.FAIL and "podcode-user Role" in refused.fix
    assert "k8s pod: patch pods" not in by_name


def test_both_verbs_of_the_websocket_subresources_and_logs_are_checked(
    fake_kube: FakeKube,
) -> None:
    fake_kube.deny("get", "pods/portforward")
    by_name = {c.name: c for c in doctor.check_kubernetes(Cluster.connect, {}, "ml")}
    assert by_name["k8s you: create pods/portforward"].status == doctor.OK
    assert by_name["k8s you: get pods/portforward"].status == doctor.FAIL
    assert by_name["k8s you: get pods/exec"].status == doctor.OK
    assert by_name["k8s you: get pods/log"].status == doctor.OK


def test_an_unreachable_api_server_is_not_reported_as_ok(fake_kube: FakeKube) -> None:
    with fake_kube.offline():
        checks = doctor.check_kubernetes(Cluster.connect, {}, "ml")
    [check] = checks
    assert (check.name, check.status) == ("kubernetes", doctor.FAIL)
    assert "cannot reach the Kubernetes API server" in check.detail
    assert "kubectl cluster-info" in check.fix and "Role" not in check.fix


def test_pod_permissions(fake_kube: FakeKube) -> None:
    fake_kube.deny("delete", "pods")
    checks = doctor.check_kubernetes(Cluster.connect, {"POD_NAME": "p", "POD_NAMESPACE": "ml"},
                                     None)
    by_name = {c.name: c for c in checks}
    assert by_name["k8s pod: patch pods"].status == doctor.OK
    assert by_name["k8s pod: create events"].status == doctor.OK
    assert by_name["k8s pod: delete pods"].status == doctor.FAIL
    reviews = [r.body["spec"]["resourceAttributes"] for r in fake_kube.requests
               if "selfsubjectaccessreviews" in r.path]
    assert {r["namespace"] for r in reviews} == {"ml"}


def test_no_cluster_is_a_warning_on_a_laptop(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    [check] = doctor.check_kubernetes(Cluster.connect, {}, None)
    assert check.status == doctor.WARN and "--kubeconfig" in check.fix


def test_cli_doctor_table_and_exit_code(fake_kube: FakeKube,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_kube.deny("list", "pods")
    monkeypatch.setenv("PODCODE_SMTP_URL", "smtp://127.0.0.1:1")
    console = Console(out=io.StringIO(), err=io.StringIO(), environ=os.environ)
    assert run(["doctor"], console) == Exit.FAILED
    text = console.out.getvalue()  # type: ignore[attr-defined]
    assert text.splitlines()[0].split() == ["CHECK", "STATUS", "DETAIL"]
    assert "TO FIX" in text and "podcode-user Role" in text
    laptop = [line.split()[0] for line in text.splitlines()[1:] if line.startswith(("k8s", "kub"))]
    assert laptop and "code-server" not in text and "smtp" not in text  # a laptop run
    json_console = Console(out=io.StringIO(), err=io.StringIO(), environ=os.environ)
    assert run(["doctor", "--pod", "-o", "json"], json_console) == Exit.FAILED
    checks = json.loads(json_console.out.getvalue())  # type: ignore[attr-defined]
    names = [c["name"] for c in checks]
    assert names[:4] == ["code-server", "node", "gpu (nvml)", "smtp"]
    assert any(name.startswith("k8s pod: ") for name in names)

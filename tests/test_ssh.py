"""SSH into a waiting session as a user does: Debian's OpenSSH client (``ssh``, ``sftp``,
``scp``, with ``-F`` and ``BatchMode=yes``) against a real failing task, through the config
``podcode ssh-config`` prints, locally and through the in-process Kubernetes API server's
port-forward."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from interactive.cli import Exit
from tests.cli_fixture import cli, labels
from tests.fake_kube import FakeKube
from tests.session_fixture import Job
from tests.ssh_fixture import openssh, ssh_config
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")

JOB = """
from interactive import vscode

@vscode(ide="none", port=0, control_port=0, debug_port=0, ssh_port=0, poll_seconds=0.2)
def train(steps, lr=0.1):
    if steps > 2:
        raise ValueError(f"diverged at step {steps}")
    return steps * 10

if __name__ == "__main__":
    print("RESULT", train(3))
"""
FIXED = JOB.replace("steps > 2", "steps > 5")


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The laptop's config folder: podcode's key pair and pinned host keys go there."""
    folder = tmp_path / "laptop-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))
    return folder


def waiting(job: Job, **env: str) -> dict[str, Any]:
    """Start the failing job; its record once its session waits."""
    job.write("job.py", JOB)
    job.start(env=env)
    return job.wait_state("waiting")


def test_ssh_sftp_scp_and_a_tunnel_into_a_local_session_then_resume_from_its_shell(
    job: Job, xdg: Path, tmp_path: Path
) -> None:
    job.write("job.py", JOB)
    job.start(env={"PODCODE_SMTP_URL": "smtp://mailer:hunter2@localhost:2525"})
    record = job.wait_state("waiting")
    assert record["ssh"]["host_key"].startswith("ssh-ed25519 ")
    config = ssh_config(tmp_path)
    assert config.read_text().startswith("Host podcode-local\n")

    probe = ("pwd; command -v python; echo session=$PODCODE_SESSION_ID; "
             "echo smtp=${PODCODE_SMTP_URL:-none}; "
             "python -c 'from interactive import load_inputs; print(load_inputs())'")
    done = openssh("ssh", config, "podcode-local", probe)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == str(job.workspace)
    assert Path(lines[1]).parent == Path(sys.executable).parent  # the task's Python first
    assert lines[2] == f"session={record['session']}"
    assert lines[3] == "smtp=none"  # podcode's secrets stay out of what an SSH user runs
    assert lines[4] == "((3,), {})"  # load_inputs() finds this session's capture
    assert openssh("ssh", config, "podcode-local", "exit 7").returncode == 7

    fix = tmp_path / "job.py"
    fix.write_text(FIXED)
    put = openssh("sftp", config, "-b", "-", "podcode-local", stdin=f"put {fix} job.py\n")
    assert put.returncode == 0, put.stderr
    assert "steps > 5" in (job.workspace / "job.py").read_text()
    notes = tmp_path / "notes.txt"
    notes.write_text("scp works\n")
    copied = openssh("scp", config, str(notes), "podcode-local:notes.txt")
    assert copied.returncode == 0, copied.stderr
    assert (job.workspace / "notes.txt").read_text() == "scp works\n"

    control = int(record["control_url"].rsplit(":", 1)[1])
    with socket.create_server(("127.0.0.1", 0)) as probe:
        local = probe.getsockname()[1]
    tunnel = subprocess.Popen(
        ["ssh", "-F", str(config), "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
         "-N", "-L", f"127.0.0.1:{local}:127.0.0.1:{control}", "podcode-local"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _accepts(local), "the tunnel's local port", timeout=30)
        request = urllib.request.Request(f"http://127.0.0.1:{local}/api/status",
                                         headers={"Authorization": f"Bearer {record['token']}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read())["state"] == "waiting"
    finally:
        tunnel.terminate()
        tunnel.wait(10)

    elsewhere = openssh("ssh", config, "-W", "192.0.2.1:80", "podcode-local")
    assert elsewhere.returncode == 255
    assert "administratively prohibited" in elsewhere.stderr  # tunnels reach loopback only

    resumed = openssh("ssh", config, "podcode-local", "podcode resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "patched: __main__.train" in resumed.stdout
    assert job.wait_exit() == 0
    assert "RESULT 30" in job.output()


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_a_wrong_key_and_a_password_are_refused_and_ssh_listens_on_loopback_only(
    job: Job, xdg: Path, tmp_path: Path
) -> None:
    record = waiting(job)
    port = record["ssh"]["port"]
    assert job.proc is not None
    listening = {c.laddr for c in psutil.Process(job.proc.pid).net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN}
    assert [addr.ip for addr in listening if addr.port == port] == ["127.0.0.1"]

    config = ssh_config(tmp_path)  # pins the host key; no key is pushed (only the proxy does)
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = xdg / "podcode" / "ssh" / "known_hosts"
    direct = ["-o", f"UserKnownHostsFile={known}", "-o", "HostKeyAlias=podcode-local",
              "-o", "StrictHostKeyChecking=yes", "-p", str(port)]
    wrong = openssh("ssh", Path("/dev/null"), *direct, "-i", str(other), "-o",
                    "IdentitiesOnly=yes", "127.0.0.1", "true")
    assert wrong.returncode == 255
    assert "Permission denied (publickey)" in wrong.stderr
    password = openssh("ssh", Path("/dev/null"), *direct, "-o", "PubkeyAuthentication=no",
                       "-o", "PasswordAuthentication=yes", "127.0.0.1", "true")
    assert password.returncode == 255
    assert "Permission denied (publickey)" in password.stderr  # the only method offered

    # A host key that is not the session's is refused by the client (checking stays on).
    known.write_text(known.read_text().replace("podcode-local ", "podcode-elsewhere "))
    other_host = openssh("ssh", Path("/dev/null"), *direct, "-i", str(xdg / "podcode" / "ssh" /
                         "id_ed25519"), "127.0.0.1", "true")
    assert other_host.returncode == 255
    assert "podcode-local" in other_host.stderr or "Host key" in other_host.stderr
    assert openssh("ssh", config, "podcode-local", "true").returncode == 0  # the proxy re-pins


def test_ssh_activity_keeps_the_session_from_counting_as_idle(
    job: Job, xdg: Path, tmp_path: Path
) -> None:
    record = waiting(job)
    code, out, _ = cli("status")
    assert code == Exit.OK
    assert f"port {record['ssh']['port']} (podcode ssh-config)" in out
    config = ssh_config(tmp_path)
    wait_until(lambda: job.api("GET", "/api/status")[1]["idle_seconds"] >= 2,
               "two idle seconds", timeout=30)
    assert openssh("ssh", config, "podcode-local", "true").returncode == 0
    assert job.api("GET", "/api/status")[1]["idle_seconds"] < 2


@pytest.mark.slow
def test_ssh_and_resume_push_through_the_kubernetes_port_forward(
    job: Job, fake_kube: FakeKube, xdg: Path, tmp_path: Path
) -> None:
    fake_kube.add_pod("train-job-0", "ml")
    job.write("job.py", JOB)
    job.start(env={"POD_NAME": "train-job-0", "POD_NAMESPACE": "ml", "PODCODE_SSH_PORT": "0"})
    job.wait_state("waiting")
    wait_until(lambda: labels(fake_kube).get("podcode.io/session") == "true", "the pod's labels")
    pod = fake_kube.pod("train-job-0", "ml") or {}
    assert '"ssh"' in pod["metadata"]["annotations"]["podcode.io/ports"]

    config = ssh_config(tmp_path, "train-job-0", "-n", "ml")
    assert "ssh-proxy train-job-0 --namespace ml" in config.read_text()
    done = openssh("ssh", config, "podcode-train-job-0", "pwd")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(job.workspace)
    forwards = [r for r in fake_kube.requests if r.path.endswith("/portforward")]
    assert forwards, "the SSH bytes went through the API server's port-forward"

    laptop = tmp_path / "checkout"
    laptop.mkdir()
    (laptop / "job.py").write_text(FIXED)
    code, out, err = cli("resume", "train-job-0", "-n", "ml", "--push",
                         str(laptop / "job.py"), "--local-root", str(laptop))
    assert code == Exit.OK, err
    assert "pushed 1 file(s)" in out.lower() and "patched: __main__.train" in out
    assert job.wait_exit() == 0
    assert "RESULT 30" in job.output()


def test_podcode_ssh_runs_a_command_and_says_when_a_session_serves_no_ssh(
    job: Job, xdg: Path, tmp_path: Path
) -> None:
    job.write("job.py", JOB)
    job.start(env={"PODCODE_SSH": "0"})
    job.wait_state("waiting")
    code, _, err = cli("ssh-config")
    assert code == Exit.NOT_FOUND
    assert "serves no SSH" in err and "ssh=False" in err
    job.api("POST", "/api/abort")
    job.wait_exit()

    second = Job(tmp_path / "second", job.home)
    second.workspace.mkdir()
    second.write("job.py", JOB)
    second.start()
    try:
        second.wait_state("waiting")
        code = subprocess.run([sys.executable, "-m", "interactive.cli", "ssh", "--", "echo",
                               "ran in", "$PWD"], capture_output=True, text=True, timeout=60,
                              env=os.environ.copy(), check=False)
        assert code.returncode == 0, code.stderr
        assert code.stdout.strip() == f"ran in {second.workspace}"
    finally:
        second.stop()


FLOOD_JOB = """
import resource
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))  # a task with few descriptors
""" + JOB


def flood(port: int, count: int) -> list[socket.socket]:
    """``count`` connections to ``port`` that never say a word (as many as open)."""
    opened = []
    for _ in range(count):
        try:
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        except OSError:
            break
    return opened


def said_before_closing(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(4096):
            data += chunk
    return data


def test_a_flood_of_connections_that_never_log_in_starves_neither_healthz_nor_a_key_login(
    job: Job, xdg: Path, tmp_path: Path
) -> None:
    """250 connections that never log in, against a task allowed 200 file descriptors
    (issue 34: /healthz timed out): those beyond the bound are told why and closed."""
    job.write("job.py", FLOOD_JOB)
    record = job.start().wait_state("waiting")
    opened = flood(record["ssh"]["port"], 250)
    try:
        assert len(opened) == 250
        with urllib.request.urlopen(record["control_url"] + "/healthz", timeout=10) as answer:
            assert answer.status == 200
        refused = said_before_closing(opened[-1])
        assert refused.startswith(b"SSH-2.0-") and b"too many connections" in refused
        assert job.api("GET", "/api/status")[0] == 200
    finally:
        for sock in opened:
            sock.close()
    config = ssh_config(tmp_path)
    login = openssh("ssh", config, "podcode-local", "echo", "in")
    assert (login.returncode, login.stdout) == (0, "in\n"), login.stderr
    assert "refusing more until they log in" in job.output()

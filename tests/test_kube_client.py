"""Both sides set up their client through ``interactive.kube.client``: the pod prefers its
service account, the CLI the user's kubeconfig; each against an in-process API server.

The in-cluster API server speaks HTTPS with a certificate from a throw-away CA, as a real
one does; the service account's token, CA and namespace files live in ``tmp_path``.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from interactive.kube.client import (
    IN_CLUSTER_FIRST,
    KUBECONFIG_FIRST,
    ServiceAccount,
    load,
    pod_namespace,
)
from interactive.kube.cluster import Cluster
from interactive.kube.errors import KubeConfigError, KubeConfigMissing
from interactive.kube.pod import PodClient
from tests.fake_kube import FakeKube

MALFORMED = "apiVersion: v1\nclusters: [\n  - bad: {\n"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: ec.EllipticCurvePrivateKey,
    *, ca: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject)).issuer_name(_name(issuer))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                       critical=False)
    )
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _server_tls(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """An SSL context for 127.0.0.1 and the file of the CA that signed its certificate."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("podcode test CA", ca_key, "podcode test CA", ca_key, ca=True)
    leaf = _certificate("127.0.0.1", key, "podcode test CA", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "key.pem"
    ca_file.write_bytes(ca.public_bytes(pem))
    cert_file.write_bytes(leaf.public_bytes(pem))
    key_file.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, ca_file


@pytest.fixture
def in_cluster(tmp_path: Path) -> Iterator[FakeKube]:
    """An HTTPS API server, as the pod's service account reaches it."""
    folder = tmp_path / "in-cluster"
    folder.mkdir()
    context, _ = _server_tls(folder)
    fake = FakeKube(folder, ssl_context=context).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def account(tmp_path: Path, in_cluster: FakeKube) -> ServiceAccount:
    """The service-account files a pod gets mounted: token, CA and namespace."""
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "token").write_text(in_cluster.token)
    (folder / "ca.crt").write_bytes((in_cluster.directory / "ca.pem").read_bytes())
    (folder / "namespace").write_text("team-a\n")
    return ServiceAccount(folder)


def _service_env(fake: FakeKube) -> dict[str, str]:
    return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(fake.port)}


def test_in_cluster_files_give_host_token_and_namespace(
    in_cluster: FakeKube, account: ServiceAccount
) -> None:
    loaded = load(IN_CLUSTER_FIRST, _service_env(in_cluster), account=account)
    assert loaded.source == "in-cluster"
    assert loaded.configuration.host == f"https://127.0.0.1:{in_cluster.port}"
    assert loaded.namespace == "team-a"
    assert loaded.configuration.retries == 0


def test_the_pod_prefers_its_service_account(
    in_cluster: FakeKube, fake_kube: FakeKube, account: ServiceAccount
) -> None:
    in_cluster.add_pod("train-0", "team-a")
    environ = {**_service_env(in_cluster), "POD_NAME": "train-0",
               "KUBECONFIG": str(fake_kube.kubeconfig)}
    pod = PodClient.discover(environ, account=account)
    assert pod is not None
    try:
        assert (pod.name, pod.namespace) == ("train-0", "team-a")
        pod.set_state("waiting")
    finally:
        pod.close()
    assert in_cluster.pod("train-0", "team-a")["metadata"]["labels"] == {  # type: ignore[index]
        "podcode.io/state": "waiting"}
    assert not fake_kube.requests  # the kubeconfig was not used


def test_the_cli_prefers_the_users_kubeconfig(
    in_cluster: FakeKube, fake_kube: FakeKube, account: ServiceAccount
) -> None:
    environ = {**_service_env(in_cluster), "KUBECONFIG": str(fake_kube.kubeconfig)}
    fake_kube.session_pod("s-1", "default")
    with Cluster.connect(environ=environ, account=account) as cluster:
        assert cluster.host == fake_kube.url
        assert [s.pod for s in cluster.list_sessions(None)] == ["s-1"]
    assert not in_cluster.requests


def test_the_cli_in_a_pod_without_kubeconfig_uses_the_service_account(
    in_cluster: FakeKube, account: ServiceAccount, tmp_path: Path
) -> None:
    in_cluster.session_pod("s-2", "team-a")
    environ = {**_service_env(in_cluster), "KUBECONFIG": str(tmp_path / "none")}
    with Cluster.connect(environ=environ, account=account) as cluster:
        assert cluster.namespace == "team-a"
        assert [s.pod for s in cluster.list_sessions("team-a")] == ["s-2"]


def test_the_pod_without_a_token_falls_back_to_kubeconfig(
    in_cluster: FakeKube, fake_kube: FakeKube, tmp_path: Path
) -> None:
    fake_kube.add_pod("train-0", "ml")
    environ = {**_service_env(in_cluster), "POD_NAME": "train-0", "POD_NAMESPACE": "ml",
               "KUBECONFIG": str(fake_kube.kubeconfig)}
    pod = PodClient.discover(environ, account=ServiceAccount(tmp_path / "not-mounted"))
    assert pod is not None
    try:
        pod.set_state("waiting")
    finally:
        pod.close()
    assert fake_kube.pod("train-0", "ml")["metadata"]["labels"]  # type: ignore[index]


def test_an_explicit_kubeconfig_is_never_swapped_for_the_service_account(
    in_cluster: FakeKube, account: ServiceAccount, tmp_path: Path
) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(KubeConfigMissing, match="does not exist"):
        Cluster.connect(missing, environ=_service_env(in_cluster), account=account)


def test_a_malformed_kubeconfig_is_one_line_on_both_sides(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "config"
    broken.write_text(MALFORMED)
    expected = ("it is not valid YAML at line 3, column 3 (expected the node content, but "
                "found '-')")
    with pytest.raises(KubeConfigError) as raised:
        Cluster.connect(str(broken), environ={})
    assert str(raised.value) == f"cannot use the kubeconfig {broken}: {expected}"
    with caplog.at_level(logging.WARNING, logger="interactive.kube.pod"):
        assert PodClient.discover({"POD_NAME": "p", "KUBECONFIG": str(broken)}) is None
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (f"podcode cannot use KUBECONFIG={broken}: {expected}; "
                    "Kubernetes updates are off")


def test_a_malformed_kubeconfig_is_not_skipped_for_the_service_account(
    in_cluster: FakeKube, account: ServiceAccount, tmp_path: Path
) -> None:
    broken = tmp_path / "config"
    broken.write_text(MALFORMED)
    environ = {**_service_env(in_cluster), "KUBECONFIG": str(broken)}
    with pytest.raises(KubeConfigError, match="not valid YAML"):
        load(KUBECONFIG_FIRST, environ, kubeconfig=str(broken), account=account)


def test_nothing_to_load(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigMissing) as raised:
        load(IN_CLUSTER_FIRST, {})
    assert raised.value.source is None


def test_the_pods_namespace(tmp_path: Path) -> None:
    (tmp_path / "namespace").write_text("from-file\n")
    account = ServiceAccount(tmp_path)
    assert pod_namespace({"POD_NAMESPACE": "downward"}, account) == "downward"
    assert pod_namespace({}, account) == "from-file"
    assert pod_namespace({}, ServiceAccount(tmp_path / "none")) == "default"

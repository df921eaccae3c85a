"""The manifests in docs/kubernetes.md and docs/deploy.md are valid Kubernetes objects, and say
what podcode needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOC = DOCS / "kubernetes.md"
DEPLOY = DOCS / "deploy.md"
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def manifests(doc: Path = DOC) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for block in BLOCK.findall(doc.read_text(encoding="utf-8")):
        found.extend(doc for doc in yaml.safe_load_all(block) if doc)
    return found


def by_kind(kind: str, name: str, doc: Path = DOC) -> dict[str, Any]:
    return next(m for m in manifests(doc) if m["kind"] == kind and m["metadata"]["name"] == name)


def rules(role: dict[str, Any]) -> set[tuple[str, str]]:
    return {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
            for verb in rule["verbs"]}


def _id(manifest: dict[str, Any]) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


def _doc_id(manifest: dict[str, Any], doc: Path) -> str:
    return f"{doc.stem}:{_id(manifest)}"


EVERY = [pytest.param(m, id=_doc_id(m, doc)) for doc in (DOC, DEPLOY) for m in manifests(doc)]


@pytest.mark.parametrize("manifest", EVERY)
def test_every_manifest_is_valid(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("doc", [DOC, DEPLOY], ids=lambda doc: doc.stem)
def test_the_doc_ships_every_kind(doc: Path) -> None:
    kinds = {m["kind"] for m in manifests(doc)}
    assert {"ServiceAccount", "Role", "RoleBinding", "Job"} <= kinds


def test_the_pods_role_allows_what_the_session_does() -> None:
    granted = rules(by_kind("Role", "podcode-session"))
    assert {("pods", "get"), ("pods", "patch"), ("pods", "delete"), ("events", "create")} <= granted
    assert not any(resource == "secrets" for resource, _ in granted)


def test_the_users_role_allows_what_the_cli_does() -> None:
    granted = rules(by_kind("Role", "podcode-user"))
    assert {("pods", "list"), ("pods", "get"), ("pods/portforward", "create"),
            ("pods/exec", "create")} <= granted


def test_bindings_point_at_the_roles() -> None:
    for name in ("podcode-session", "podcode-user"):
        binding = by_kind("RoleBinding", name)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": name}
    [subject] = by_kind("RoleBinding", "podcode-session")["subjects"]
    assert subject["name"] == by_kind("ServiceAccount", "podcode")["metadata"]["name"]


def test_the_job_finds_itself_and_has_time_to_save_work() -> None:
    pod = by_kind("Job", "train")["spec"]["template"]
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "podcode"
    assert spec["terminationGracePeriodSeconds"] >= 30
    assert "podcode.io/owner" in pod["metadata"]["annotations"]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["PODCODE_ENABLE"]["value"] == "1"


def test_a_broken_manifest_is_caught() -> None:
    job = by_kind("Job", "train")
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "thirty"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, kubernetes_validate.latest_version(), strict=True)


# -- docs/deploy.md: the walkthrough ---------------------------------------------------


def test_the_walkthrough_reuses_the_roles_of_kubernetes_md() -> None:
    for kind, name in (("ServiceAccount", "podcode"), ("Role", "podcode-session"),
                       ("RoleBinding", "podcode-session"), ("Role", "podcode-user"),
                       ("RoleBinding", "podcode-user")):
        assert by_kind(kind, name, DEPLOY) == by_kind(kind, name)


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def test_the_walkthrough_job_runs_read_only_with_writable_volumes() -> None:
    pod = by_kind("Job", "train", DEPLOY)["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == "podcode"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    main = _container(pod, "main")
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    text = DEPLOY.read_text(encoding="utf-8")
    home = re.search(r"PODCODE_HOME=(\S+)", text)
    xdg = re.search(r"XDG_DATA_HOME=(\S+)", text)
    assert home and xdg
    for path in (home.group(1), xdg.group(1), main["workingDir"], "/tmp"):
        mount = next(m for m in mounts if path == m or path.startswith(m + "/"))
        assert "emptyDir" in volumes[mounts[mount]], path
    [init] = pod["spec"]["initContainers"]
    assert {m["mountPath"] for m in init["volumeMounts"]} == {main["workingDir"]}


def test_the_walkthrough_creates_the_secrets_the_job_uses() -> None:
    pod = by_kind("Job", "train", DEPLOY)["spec"]["template"]
    main = _container(pod, "main")
    env = {e["name"]: e for e in main["env"]}
    smtp = env["PODCODE_SMTP_URL"]["valueFrom"]["secretKeyRef"]
    assert env["PODCODE_STORE"]["value"].startswith("s3://")
    text = DEPLOY.read_text(encoding="utf-8")
    assert f"create secret generic {smtp['name']} \\\n  --from-literal={smtp['key']}=" in text
    for source in main["envFrom"]:
        assert f"create secret generic {source['secretRef']['name']}" in text

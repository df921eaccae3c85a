"""The manifests in docs/kubernetes.md are valid Kubernetes objects, and say what podcode needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

DOC = Path(__file__).resolve().parent.parent / "docs" / "kubernetes.md"
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def manifests() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for block in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        found.extend(doc for doc in yaml.safe_load_all(block) if doc)
    return found


def by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(m for m in manifests() if m["kind"] == kind and m["metadata"]["name"] == name)


def rules(role: dict[str, Any]) -> set[tuple[str, str]]:
    return {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
            for verb in rule["verbs"]}


def _id(manifest: dict[str, Any]) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


@pytest.mark.parametrize("manifest", manifests(), ids=_id)
def test_every_manifest_is_valid(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def test_the_doc_ships_every_kind() -> None:
    kinds = {m["kind"] for m in manifests()}
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

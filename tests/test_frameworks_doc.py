"""The manifests in docs/frameworks/ (a page per framework) are valid, and wired the way
the pages say."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

PAGES = Path(__file__).resolve().parent.parent / "docs" / "frameworks"


def text() -> str:
    """Every framework page, one after the other."""
    return "\n".join(page.read_text(encoding="utf-8") for page in sorted(PAGES.glob("*.md")))


BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)
VERSION = kubernetes_validate.latest_version()


def manifests() -> list[dict[str, Any]]:
    return [
        doc
        for block in BLOCK.findall(text())
        for doc in yaml.safe_load_all(block)
        if doc
    ]


def by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(m for m in manifests() if m["kind"] == kind and m["metadata"]["name"] == name)


def pod_templates(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """PyTorchJob is a custom resource: its replicas' pod templates are checked as such."""
    return [
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{manifest['metadata']['name']}-{role.lower()}"},
            "template": spec["template"],
        }
        for role, spec in manifest["spec"]["pytorchReplicaSpecs"].items()
    ]


def checked() -> list[dict[str, Any]]:
    found = []
    for manifest in manifests():
        found.extend(pod_templates(manifest) if manifest["kind"] == "PyTorchJob" else [manifest])
    return found


@pytest.mark.parametrize(
    "manifest", checked(), ids=lambda m: f"{m['kind']}/{m['metadata']['name']}"
)
def test_every_manifest_is_valid(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, VERSION, strict=True)


def test_the_page_ships_torchrun_multi_node_and_pytorchjob() -> None:
    kinds = {m["kind"] for m in manifests()}
    assert {"Job", "Service", "PyTorchJob"} <= kinds


def test_multi_node_job_finds_its_master_through_the_headless_service() -> None:
    service = by_kind("Service", "train-multi")
    job = by_kind("Job", "train-multi")
    spec = job["spec"]["template"]["spec"]
    command = spec["containers"][0]["command"]
    assert service["spec"]["clusterIP"] == "None"
    assert spec["subdomain"] == service["metadata"]["name"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert "--master-addr=train-multi-0.train-multi" in command
    assert f"--nnodes={job['spec']['completions']}" in command


def test_every_pod_knows_itself_and_is_never_restarted_behind_the_session() -> None:
    for manifest in manifests():
        if manifest["kind"] == "Service":
            continue
        templates = (
            [r["template"] for r in manifest["spec"]["pytorchReplicaSpecs"].values()]
            if manifest["kind"] == "PyTorchJob"
            else [manifest["spec"]["template"]]
        )
        for template in templates:
            env = {e["name"] for c in template["spec"]["containers"] for e in c.get("env", [])}
            assert {"POD_NAME", "POD_NAMESPACE"} <= env
        if manifest["kind"] == "PyTorchJob":
            specs = manifest["spec"]["pytorchReplicaSpecs"].values()
            assert {s["restartPolicy"] for s in specs} == {"Never"}
        else:
            assert manifest["spec"]["backoffLimit"] == 0


# -- Flyte on a cluster: the pod template ---------------------------------------------

PYTHON = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


SDKS = {"flytekit": ("from flytekit import PodTemplate", "PODCODE"),
        "flyte": ("flyte.PodTemplate(", "PODCODE_POD")}
"""Flyte 1 and Flyte 2: how each page example is told apart, and its template's name."""


def flyte_cluster_example(folder: Path, monkeypatch: pytest.MonkeyPatch,
                          sdk: str = "flytekit") -> dict[str, Any]:
    """Import the page's pod-template example for ``sdk`` as a module (Flyte reads its
    source)."""
    pytest.importorskip(sdk)
    marker, _ = SDKS[sdk]
    [source] = [b for b in PYTHON.findall(text()) if marker in b]
    name = f"{sdk}_cluster_example"
    (folder / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return vars(importlib.import_module(name))


@pytest.mark.parametrize("sdk", sorted(SDKS))
def test_the_flyte_pod_template_is_a_valid_pod_with_what_podcode_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sdk: str
) -> None:
    from kubernetes.client import ApiClient

    names = flyte_cluster_example(tmp_path, monkeypatch, sdk)
    template = names[SDKS[sdk][1]]
    spec = ApiClient().sanitize_for_serialization(template.pod_spec)
    manifest = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "podcode"},
                "template": {"metadata": {"annotations": template.annotations}, "spec": spec}}
    kubernetes_validate.validate(manifest, VERSION, strict=True)
    assert "podcode.io/owner" in template.annotations
    [primary] = spec["containers"]
    assert primary["name"] == template.primary_container_name
    env = {e["name"]: e for e in primary["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # The SMTP password: the Secret podcode-smtp mounted as a file, in no environment.
    assert "valueFrom" not in env["PODCODE_SMTP_URL"] and ":" not in env["PODCODE_SMTP_URL"][
        "value"].split("://")[1].split("@")[0]
    password = Path(env["PODCODE_SMTP_PASSWORD_FILE"]["value"])
    [mount] = [m for m in primary["volumeMounts"] if m["mountPath"] == str(password.parent)]
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "podcode-smtp"
    mounts = {m["mountPath"] for m in primary["volumeMounts"]}
    assert {"/workspace", "/tmp", "/var/podcode"} <= mounts


def test_the_flyte_timeout_leaves_room_for_a_whole_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = flyte_cluster_example(tmp_path, monkeypatch)
    timeout = names["normalize"].metadata.timeout
    env = {e.name: e.value for e in names["PODCODE"].pod_spec.containers[0].env}
    session = int(env["PODCODE_MAX_IDLE_SECONDS"]) + int(env["PODCODE_GRACE_SECONDS"])
    assert timeout.total_seconds() > session
    assert names["normalize"].pod_template is names["PODCODE"]


def test_the_flyte2_environment_uses_the_template_and_keeps_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = flyte_cluster_example(tmp_path, monkeypatch, "flyte")
    assert names["env"].pod_template is names["PODCODE_POD"]
    task = names["normalize"]
    assert task.pod_template is names["PODCODE_POD"]  # the task inherits the environment's
    assert task.func.__podcode_task__.__name__ == "normalize"

"""docs/ray.md's RayJob: its pod templates are valid, wired as the page says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

DOC = Path(__file__).resolve().parent.parent / "docs" / "ray.md"
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def ray_job() -> dict[str, Any]:
    (block,) = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    job: dict[str, Any] = yaml.safe_load(block)
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    return job


def templates(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = job["spec"]["rayClusterSpec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [group["template"] for group in groups]


def test_the_ray_jobs_pod_templates_are_valid_pods() -> None:
    for index, template in enumerate(templates(ray_job())):
        manifest = {"apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": f"ray-{index}"}, "template": template}
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def test_every_ray_pod_finds_itself_and_may_patch_itself() -> None:
    for template in templates(ray_job()):
        assert template["spec"]["serviceAccountName"] == "podcode"  # the Role in kubernetes.md
        env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_settings_travel_in_the_jobs_runtime_env() -> None:
    runtime_env = yaml.safe_load(ray_job()["spec"]["runtimeEnvYAML"])
    assert runtime_env["working_dir"]
    assert all(name.startswith("PODCODE_") for name in runtime_env["env_vars"])
    assert "PODCODE_SMTP_URL" not in runtime_env["env_vars"], "secrets come from the pod"

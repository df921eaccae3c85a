"""The manifests of docs/manifests/ (which docs/kubernetes.md and docs/deploy.md link to)
are valid Kubernetes objects, say what podcode needs, and are written in one place only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOC = DOCS / "kubernetes.md"
DEPLOY = DOCS / "deploy.md"
FILES = DOCS / "manifests"
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def manifests(source: Path = FILES) -> list[dict[str, Any]]:
    """The objects of a YAML file, of every file in a folder, or of a page's yaml blocks."""
    if source.is_dir():
        return [m for path in sorted(source.glob("*.yaml")) for m in manifests(path)]
    text = source.read_text(encoding="utf-8")
    blocks = BLOCK.findall(text) if source.suffix == ".md" else [text]
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def by_kind(kind: str, name: str, source: Path = FILES) -> dict[str, Any]:
    return next(m for m in manifests(source) if m["kind"] == kind and m["metadata"]["name"] == name)


def rules(role: dict[str, Any]) -> set[tuple[str, str]]:
    return {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
            for verb in rule["verbs"]}


def _id(manifest: dict[str, Any]) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


def _doc_id(manifest: dict[str, Any], doc: Path) -> str:
    return f"{doc.stem}:{_id(manifest)}"


SOURCES = (FILES, DOC, DEPLOY)
EVERY = [pytest.param(m, id=_doc_id(m, doc)) for doc in SOURCES for m in manifests(doc)]


@pytest.mark.parametrize("manifest", EVERY)
def test_every_manifest_is_valid(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def test_the_files_ship_every_kind() -> None:
    kinds = {m["kind"] for m in manifests()}
    assert {"ServiceAccount", "Role", "RoleBinding", "Job"} <= kinds


@pytest.mark.parametrize("doc", [DOC, DEPLOY], ids=lambda doc: doc.stem)
def test_the_pages_link_to_the_files_and_apply_them(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for path in sorted(FILES.glob("*.yaml")):
        assert f"](manifests/{path.name})" in text, f"{doc.name} does not link {path.name}"
        assert f"kubectl apply -f docs/manifests/{path.name}" in text


def test_no_page_repeats_a_manifest_of_the_files() -> None:
    """One RBAC block and one Job: a page that copies one lets the copies drift."""
    kept = {_id(m) for m in manifests()}
    for page in sorted(DOCS.rglob("*.md")):
        found = [m for m in manifests(page) if isinstance(m, dict) and "kind" in m]  # not snippets
        copied = kept & {_id(m) for m in found if "name" in m.get("metadata", {})}
        assert not copied, f"{page.relative_to(DOCS)} repeats {sorted(copied)}: link the file"


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


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def test_the_walkthrough_job_runs_read_only_with_writable_volumes() -> None:
    pod = by_kind("Job", "train")["spec"]["template"]
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
    pod = by_kind("Job", "train")["spec"]["template"]
    main = _container(pod, "main")
    env = {e["name"]: e for e in main["env"]}
    assert env["PODCODE_STORE"]["value"].startswith("s3://")
    text = DEPLOY.read_text(encoding="utf-8")
    for source in main["envFrom"]:
        assert f"create secret generic {source['secretRef']['name']}" in text
    # The SMTP password: a Secret mounted as a file, in no environment variable.
    assert urlsplit(env["PODCODE_SMTP_URL"]["value"]).password is None
    password = Path(env["PODCODE_SMTP_PASSWORD_FILE"]["value"])
    mount = next(m for m in main["volumeMounts"] if m["mountPath"] == str(password.parent))
    assert mount.get("readOnly") is True
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    secret = volume["secret"]
    created = f"create secret generic {secret['secretName']} \\\n  --from-literal={password.name}="
    assert created in text
    assert secret["defaultMode"] & 0o007 == 0, "other users may read the password"
    assert pod["spec"]["securityContext"]["fsGroup"] == pod["spec"]["securityContext"]["runAsUser"]


# -- Pod Security Standards, "restricted" profile ---------------------------------------
# The published rules (kubernetes.io, "Pod Security Standards"), baseline and restricted,
# for the fields a pod template can set; checked here so the pages cannot drift.

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What keeps ``pod`` (a PodSpec) from being admitted under "restricted"."""
    found: list[str] = []
    pod_context = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"{field} is set")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']} is of type {sorted(kinds)}")
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    containers = [*(pod.get("initContainers") or []), *pod["containers"]]
    for container in containers:
        name, context = container["name"], container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser is 0")
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile is {seccomp!r}, not RuntimeDefault")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities add {capabilities['add']}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"{name}: a hostPort")
    return found


PODS = [pytest.param(m, id=_doc_id(m, doc)) for doc in SOURCES for m in manifests(doc)
        if m["kind"] in ("Job", "Pod")]


@pytest.mark.parametrize("manifest", PODS)
def test_every_pod_is_admitted_under_pod_security_restricted(manifest: dict[str, Any]) -> None:
    spec = manifest["spec"] if manifest["kind"] == "Pod" else manifest["spec"]["template"]["spec"]
    assert restricted_violations(spec) == []


def test_the_restricted_check_can_fail() -> None:
    spec = {"containers": [{"name": "c"}], "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}
    found = restricted_violations(spec)
    assert "volume h is of type ['hostPath']" in found
    assert {"c: allowPrivilegeEscalation is not false", "c: runAsNonRoot is not true",
            "c: capabilities do not drop ALL"} <= set(found)


def test_home_is_writable_on_a_read_only_root() -> None:
    pod = by_kind("Job", "train")["spec"]["template"]
    main = _container(pod, "main")
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    page = DEPLOY.read_text(encoding="utf-8").replace("PODCODE_HOME", "")
    home = re.search(r"\bHOME=(\S+)", page)
    assert home, "the image sets no HOME"
    mount = next(m for m in mounts if home.group(1) == m or home.group(1).startswith(m + "/"))
    assert "emptyDir" in volumes[mounts[mount]]

"""A local wheelhouse for installing podcode offline into a fresh virtual environment.

podcode's wheel is built from the checkout; each dependency its metadata names (with
the extras asked for, and theirs, recursively) is packed back into a wheel from the
distribution installed here, file by file as its RECORD lists it. A dependency
missing from pyproject.toml is then missing from the wheelhouse too, so
``pip install --no-index`` of podcode fails as it would on a fresh machine.
"""

from __future__ import annotations

import base64
import email.parser
import hashlib
import importlib.metadata as metadata
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SKIPPED = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
PACKAGE = ("pyproject.toml", "README.md", "interactive", "server_bootstrap", "vscode_config")


def requirements(wheel: Path, extras: Iterable[str]) -> list[str]:
    """What a wheel's metadata requires, with ``extras``, for this Python."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))
    found = []
    for raw in meta.get_all("Requires-Dist") or []:
        req = Requirement(raw)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in [*extras, ""]):
            found.append(str(req).split(";")[0])
    return found


def closure(roots: Iterable[str]) -> dict[str, set[str]]:
    """Every installed distribution these requirements pull in, with the extras asked of it."""
    seen: dict[str, set[str]] = {}
    todo = [Requirement(raw) for raw in roots]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen and set(req.extras) <= seen[name]:
            continue
        extras = seen.setdefault(name, set())
        extras.update(req.extras)
        for raw in metadata.distribution(name).requires or []:
            dep = Requirement(raw)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in extras | {""}):
                todo.append(Requirement(str(dep).split(";")[0]))
    return seen


def repack(name: str, target: Path) -> Path:
    """The installed distribution ``name`` as a wheel in ``target``."""
    dist = metadata.distribution(name)
    info = next(f for f in dist.files or []
                if f.name == "WHEEL" and f.parent.suffix == ".dist-info")
    tag = compressed_tag(line.split(":", 1)[1].strip() for line
                         in (dist.read_text("WHEEL") or "").splitlines() if line.startswith("Tag:"))
    stem = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    wheel = target / f"{stem}-{dist.version}-{tag}.whl"
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for entry in dist.files or []:
            parts = Path(entry).parts
            if ".." in parts or "__pycache__" in parts or (
                    parts[0] == info.parent.name and entry.name in SKIPPED):
                continue
            data = Path(str(entry.locate())).read_bytes()
            archive.writestr(str(entry), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{entry},sha256={digest.decode()},{len(data)}")
        record.append(f"{info.parent}/RECORD,,")
        archive.writestr(f"{info.parent}/RECORD", "\n".join(record) + "\n")
    return wheel


def compressed_tag(tags: Iterable[str]) -> str:
    """``py2-none-any`` and ``py3-none-any`` as ``py2.py3-none-any``."""
    parts: list[dict[str, None]] = [{}, {}, {}]
    for tag in tags:
        for seen, part in zip(parts, tag.split("-"), strict=True):
            seen[part] = None
    return "-".join(".".join(seen) for seen in parts)


def build_podcode(checkout: Path, scratch: Path, target: Path) -> Path:
    """podcode's wheel, built from a copy of the checkout's package files (no network)."""
    source = scratch / "podcode-source"
    for name in PACKAGE:
        path = checkout / name
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            "--no-build-isolation", "--wheel-dir", str(target), str(source)],
                           cwd=scratch, capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    return next(target.glob("podcode-*.whl"))


def fill(checkout: Path, extras: Iterable[str], scratch: Path, target: Path) -> list[Path]:
    """podcode's wheel and every dependency's, in ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    podcode = build_podcode(checkout, scratch, target)
    return [podcode, *(repack(name, target) for name in closure(requirements(podcode, extras)))]

"""docs/deploy.md's Dockerfile, run: its Python and code-server steps, as the page writes them.

The test reads the page's ``dockerfile`` block and carries out its ``ARG``, ``ENV``,
``COPY`` and ``RUN`` instructions on this machine, so the page cannot drift:

- the image's file system is a folder (``root``): every absolute path in the recipe
  is taken under it;
- ``pip``, ``podcode`` and ``python`` steps run in a fresh virtual environment (no
  system site packages) with a fresh cache; system steps (``useradd``, ``apt-get``)
  are not run, and any other step fails the test until it is taught here;
- ``pip`` installs offline (``PIP_NO_INDEX``) from ``dist/``, which holds podcode's
  wheel built from this checkout and a wheel of each dependency packed from the
  distribution installed here (``tests/wheelhouse.py``): a dependency missing from
  pyproject.toml is missing there too, as on a fresh machine;
- code-server's release tarball is packed from the installed code-server and served
  from 127.0.0.1; the build argument ``CODE_SERVER_URL`` points at it and
  ``CODE_SERVER_SHA256`` is its checksum, as ``docker build --build-arg`` would pass.

Then ``readOnlyRootFilesystem``: a session opens (a failing task, with the IDE and the
page's extensions) with ``$PODCODE_HOME``, ``/tmp`` and the workspace writable, and
nothing under the image's folders, the virtual environment or ``$HOME`` changes. They
are made read-only, but permission bits do not stop root (tests often run as root), so
that is checked by comparing the folders before and after.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from server_bootstrap.config import machine_arch
from server_bootstrap.digest import sha256_of
from server_bootstrap.installs import MARKER
from server_bootstrap.locate import version_of
from tests import wheelhouse
from tests.codeserver_fixture import Files

CHECKOUT = Path(__file__).resolve().parents[1]
PAGE = CHECKOUT / "docs" / "deploy.md"
DOCKERFILE = re.compile(r"^```dockerfile\n(.*?)^```", re.DOTALL | re.MULTILINE)
VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
RUNS = {"pip", "podcode", "python"}
SYSTEM = {"useradd", "apt-get", "groupadd"}

pytestmark = [pytest.mark.codeserver, pytest.mark.timeout(600)]


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    [block] = DOCKERFILE.findall(text)
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def expand(word: str, values: Mapping[str, str]) -> str:
    return VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], word)


@dataclass
class Image:
    """The image being built: its root folder, build context, variables and venv."""

    root: Path
    context: Path
    venv: Path
    home: Path
    args: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def path(self, value: str) -> str:
        """An absolute path of the image, as a path on this machine."""
        if value.startswith("/") and not value.startswith("//"):
            return str(self.root / value.lstrip("/"))
        return value

    def paths(self, value: str) -> str:
        """A list of paths (``:`` or ``,`` between them) as paths on this machine."""
        separator = "," if "," in value else ":"
        return separator.join(self.path(part) for part in value.split(separator))

    def environ(self) -> dict[str, str]:
        """A clean environment: the image's, the venv first on PATH, nothing of ours."""
        mapped = {name: self.paths(value) for name, value in self.env.items()}
        return {"PATH": f"{self.venv / 'bin'}:/usr/bin:/bin", "HOME": str(self.home),
                "LANG": "C.UTF-8", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "TMPDIR": str(self.root / "tmp"), **mapped}

    def run(self, command: str) -> str:
        argv = [expand(word, {**self.args, **self.env}) for word in shlex.split(command)]
        if argv[0] in SYSTEM:
            self.skipped.append(argv[0])
            return ""
        assert argv[0] in RUNS, f"a step the recipe test neither runs nor skips: RUN {command}"
        argv = [str(self.venv / "bin" / argv[0]), *(self.path(word) for word in argv[1:])]
        done = subprocess.run(argv, env=self.environ(), capture_output=True, text=True,
                              cwd=self.context, timeout=300)
        assert done.returncode == 0, f"RUN {command}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def copy(self, spec: str) -> None:
        words = [w for w in shlex.split(spec) if not w.startswith("--")]
        source, target = self.context / words[0], Path(self.path(words[1]))
        shutil.copytree(source, target, dirs_exist_ok=True)

    def build(self, steps: list[tuple[str, str]], overrides: Mapping[str, str]) -> list[str]:
        """Carry out the steps; the output of each RUN."""
        outputs = []
        for keyword, rest in steps:
            if keyword == "ARG":
                name, _, default = rest.partition("=")
                self.args[name] = overrides.get(name, default)
            elif keyword == "ENV":
                for pair in shlex.split(rest):
                    name, _, value = pair.partition("=")
                    self.env[name] = expand(value, {**self.args, **self.env})
            elif keyword == "COPY":
                self.copy(rest)
            elif keyword == "RUN":
                outputs.append(self.run(rest))
        return outputs


def pack_code_server(source: Path, tarball: Path, top: str) -> None:
    """A release tarball made of an installed code-server (without podcode's marker)."""
    with tarfile.open(tarball, "w") as archive:
        archive.add(source, arcname=top,
                    filter=lambda member: None if member.name.endswith(MARKER) else member)


def fake_vsix(path: Path) -> None:
    """A minimal extension named like ``publisher.name-version.vsix``."""
    publisher, _, rest = path.stem.partition(".")
    name, _, version = rest.rpartition("-")
    package = {"name": name, "publisher": publisher, "version": version,
               "engines": {"vscode": "^1.80.0"}, "main": "./extension.js"}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("extension/package.json", json.dumps(package))
        archive.writestr("extension/extension.js", "exports.activate = () => {};\n")


def snapshot(*folders: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folders`` with its size and modification time."""
    found = {}
    for folder in folders:
        for path in [folder, *folder.rglob("*")]:
            stat = path.lstat()
            found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.fixture
def image(tmp_path: Path) -> Iterator[Image]:
    root, context, home = tmp_path / "root", tmp_path / "context", tmp_path / "home"
    for folder in (root / "tmp", context / "train", home):
        folder.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    yield Image(root=root, context=context, venv=tmp_path / "venv", home=home, args={})
    for folder in (root, context, tmp_path / "venv"):  # about 1.2 GB in all
        subprocess.run(["chmod", "-R", "u+w", str(folder)], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_the_page_recipe_builds_and_a_session_runs_read_only(
    image: Image, code_server_binary: Path, http_files: Files, tmp_path: Path
) -> None:
    steps = instructions(PAGE.read_text(encoding="utf-8"))
    assert ("FROM", "python:3.11-slim") in steps

    extras = dict(step[1].partition("=")[::2] for step in steps if step[0] == "ARG")
    wheelhouse.fill(CHECKOUT, extras["PODCODE_EXTRAS"].split(","), tmp_path,
                    image.context / "dist")
    env_lines = " ".join(rest for keyword, rest in steps if keyword == "ENV")
    [extensions] = re.findall(r"PODCODE_EXTENSIONS=(\S+)", env_lines)
    (image.context / "extensions").mkdir()
    for vsix in extensions.split(","):
        fake_vsix(image.context / "extensions" / Path(vsix).name)

    version = extras["CODE_SERVER_VERSION"]
    name = f"code-server-{version}-linux-{machine_arch()}.tar"
    pack_code_server(code_server_binary.resolve().parents[1], tmp_path / name, name[:-4])
    http_files.content[f"/{name}"] = tmp_path / name
    overrides = {"CODE_SERVER_URL": f"{http_files.url}/code-server-{{version}}-linux-{{arch}}.tar",
                 "CODE_SERVER_SHA256": sha256_of(tmp_path / name)}

    outputs = image.build(steps, overrides)
    (tmp_path / name).unlink()
    assert image.skipped == ["useradd"]
    assert http_files.hits == {f"/{name}": 1}
    binary = Path(outputs[-1].strip().splitlines()[-1])
    assert binary.is_relative_to(image.root / "opt")
    assert version_of(binary) == version

    a_session_runs_on_a_read_only_image(image)


def a_session_runs_on_a_read_only_image(image: Image) -> None:
    environ = image.environ()
    home = Path(environ["PODCODE_HOME"])
    workspace = image.root / "workspace"
    workspace.mkdir()
    (workspace / "train.py").write_text(
        "from interactive import vscode\n\n\n@vscode\ndef fit() -> None:\n"
        "    raise ValueError('nan')\n\n\nfit()\n")
    Path(environ["XDG_DATA_HOME"]).parent.mkdir(parents=True, exist_ok=True)
    read_only = [image.root / "opt", image.venv, image.home]
    for folder in read_only:
        subprocess.run(["chmod", "-R", "a-w", str(folder)], check=True)
    before = snapshot(*read_only)
    environ.update(PODCODE_ENABLE="1", PODCODE_PORT="0", PODCODE_CONTROL_PORT="0",
                   PODCODE_DEBUG_PORT="0")
    log = image.root / "tmp" / "train.log"
    with open(log, "w") as handle:
        job = subprocess.Popen([str(image.venv / "bin" / "python"), "-m", "train"], cwd=workspace,
                               env=environ, stdout=handle, stderr=subprocess.STDOUT)
    try:
        record = wait_waiting(home, job, log)
        assert str(record["code_server_url"]).startswith("http://127.0.0.1:")
        extensions = home / "code-server" / "extensions"
        assert {p.name.rsplit("-", 1)[0] for p in extensions.iterdir() if p.is_dir()} >= {
            "charliermarsh.ruff", "tamasfe.even-better-toml"}
        subprocess.run([str(image.venv / "bin" / "podcode"), "abort"], env=environ, check=True,
                       capture_output=True, timeout=60)
        assert job.wait(60) != 0
    finally:
        if job.poll() is None:
            job.terminate()
            job.wait(30)
        for folder in read_only:
            subprocess.run(["chmod", "-R", "u+w", str(folder)], check=True)
    assert "ValueError: nan" in log.read_text()
    after = snapshot(*read_only)
    assert after.keys() ^ before.keys() == set()
    assert {k for k in after if after[k] != before[k]} == set()


def wait_waiting(home: Path, job: subprocess.Popen[bytes], log: Path) -> dict[str, object]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            record: dict[str, object] = json.loads((home / "session.json").read_text())
        except (FileNotFoundError, ValueError):
            record = {}
        if record.get("state") == "waiting" and record.get("code_server_url"):
            return record
        if job.poll() is not None:
            raise AssertionError(f"the task exited ({job.returncode}):\n{log.read_text()}")
        time.sleep(0.2)
    raise AssertionError(f"no waiting session; last {record}\n{log.read_text()}")

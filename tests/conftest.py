"""Shared test set-up: fixture plugins, and a private PODCODE_HOME per test."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from server_bootstrap.config import default_cache

_HERE = Path(__file__).parent
pytest_plugins = [
    f"tests.{name}"
    for name in (
        "cli_fixture", "codeserver_fixture", "fake_kube", "smtp_fixture", "session_fixture"
    )
    if (_HERE / f"{name}.py").exists()
]


XDG_FOLDERS = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_CACHE_HOME": ".cache",
    "XDG_STATE_HOME": ".local/state",
}
_SESSION_HOME: list[str] = []


def home_environment(home: Path) -> dict[str, str]:
    """HOME and the XDG folders, all under ``home``."""
    return {"HOME": str(home), **{name: str(home / sub) for name, sub in XDG_FOLDERS.items()}}


def pytest_configure(config: pytest.Config) -> None:
    """The suite never writes into the home of the person running it: HOME and the XDG
    folders point at a folder of the run's own from the start (session fixtures and the
    processes they start included), and each test gets another (:func:`podcode_home`).
    The code-server that ``make setup`` installed into the user's shared cache is still
    found, by naming that cache explicitly."""
    os.environ.setdefault("PODCODE_CODE_SERVER_CACHE", str(default_cache(os.environ)))
    home = tempfile.mkdtemp(prefix="podcode-test-home-")
    _SESSION_HOME.append(home)
    os.environ.update(home_environment(Path(home)))


def pytest_unconfigure(config: pytest.Config) -> None:
    for home in _SESSION_HOME:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def own_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own HOME and XDG folders (beside its tmp_path, which stays the
    test's own; the XDG folders are created by whoever writes there)."""
    home = tmp_path_factory.mktemp("home")
    for name, value in home_environment(home).items():
        monkeypatch.setenv(name, value)
    return home


@pytest.fixture(autouse=True)
def podcode_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own PODCODE_HOME and store; nothing leaks into ~/.podcode."""
    home = tmp_path / "podcode-home"
    monkeypatch.setenv("PODCODE_HOME", str(home))
    monkeypatch.delenv("PODCODE_STORE", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for name in (
        "PODCODE_ENABLE",
        "PODCODE_SMTP_URL",
        "PODCODE_OWNER",
        "POD_NAME",
        "POD_NAMESPACE",
    ):
        monkeypatch.delenv(name, raising=False)
    return home

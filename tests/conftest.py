"""Shared test set-up: fixture plugins, and a private PODCODE_HOME per test."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent
pytest_plugins = [
    f"tests.{name}"
    for name in (
        "cli_fixture", "codeserver_fixture", "fake_kube", "smtp_fixture", "session_fixture"
    )
    if (_HERE / f"{name}.py").exists()
]


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

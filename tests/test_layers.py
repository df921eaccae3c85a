"""The layers have a direction: vscode_config → server_bootstrap → interactive."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "vscode_config": {"server_bootstrap", "interactive"},
    "server_bootstrap": {"interactive"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_higher_ones(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    for path in files:
        wrong = imported_packages(path) & FORBIDDEN[package]
        assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}"


def test_no_shell_true_anywhere() -> None:
    for package in ("interactive", "server_bootstrap", "vscode_config"):
        for path in (ROOT / package).rglob("*.py"):
            assert "shell=True" not in path.read_text(), path

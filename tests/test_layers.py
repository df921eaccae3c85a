"""The layers have a direction, written here so that a test enforces it.

Inside ``interactive/``, a subpackage may import only those listed for it (module-level
imports and imports inside functions alike); see docs/architecture.md. Across the
top-level packages: vscode_config → server_bootstrap → interactive.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "vscode_config": {"server_bootstrap", "interactive"},
    "server_bootstrap": {"interactive"},
}
LAYERS: dict[str, set[str]] = {
    "base": set(),
    "storage": {"base"},
    "kube": {"base"},
    "reaper": {"base", "storage", "kube"},
    "distributed": {"base", "storage", "kube", "reaper"},
    "inputs": {"base", "storage"},
    "resume": {"base", "storage", "inputs"},
    "doors": {"base", "storage", "kube", "reaper", "distributed", "inputs"},
    "session": {"base", "storage", "kube", "reaper", "distributed", "inputs", "resume", "doors"},
    "ray": {"base", "storage", "resume"},
    "task": {
        "base", "storage", "kube", "reaper", "distributed", "inputs", "resume", "session", "ray",
        "doors",
    },
    "agent": {"base", "storage", "kube"},
    "cli": {"base", "storage", "kube", "agent"},
}
"""Subpackage of ``interactive`` → the subpackages it may import."""
HEAVY = ("jinja2", "aiohttp", "kubernetes", "debugpy")
"""What ``import interactive`` (and so every decorated module's import) must not load."""


def imports_of(path: Path) -> set[str]:
    """Absolute module names imported anywhere in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "interactive" else None


def test_every_module_lives_in_a_layer() -> None:
    flat = sorted(p.name for p in (ROOT / "interactive").glob("*.py") if p.name != "__init__.py")
    assert not flat, f"modules outside a subpackage: {flat}"
    packages = {p.parent.name for p in (ROOT / "interactive").glob("*/__init__.py")}
    assert packages == set(LAYERS)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_layer_imports_only_those_below_it(layer: str) -> None:
    allowed = LAYERS[layer] | {layer}
    files = sorted((ROOT / "interactive" / layer).rglob("*.py"))
    assert files
    for path in files:
        wrong = {
            module for module in imports_of(path)
            if layer_of(module) in LAYERS and layer_of(module) not in allowed
        }
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


def test_the_layer_table_has_no_cycle() -> None:
    def below(layer: str, seen: frozenset[str] = frozenset()) -> None:
        assert layer not in seen, f"cycle through {layer}"
        for lower in LAYERS[layer]:
            below(lower, seen | {layer})

    for layer in LAYERS:
        below(layer)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_every_subpackage_says_what_it_owns(layer: str) -> None:
    doc = ast.get_docstring(ast.parse((ROOT / "interactive" / layer / "__init__.py").read_text()))
    assert doc and len(doc) > 80, f"interactive/{layer} has no docstring saying what it owns"
    assert "Runs on:" in doc and "May import:" in doc, f"interactive/{layer}"


def test_the_top_package_imports_no_layer_eagerly() -> None:
    """``interactive/__init__`` reaches the layers lazily; only the errors at import."""
    eager = {
        module for module in imports_of(ROOT / "interactive" / "__init__.py")
        if layer_of(module) in LAYERS
    }
    tree = ast.parse((ROOT / "interactive" / "__init__.py").read_text())
    top = {
        node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
    }
    assert top & eager <= {"interactive.base.errors"}, top & eager


def modules_loaded_by(statement: str) -> list[str]:
    """Every module a fresh interpreter has loaded after ``statement``."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out))


def test_import_interactive_loads_no_heavy_dependency() -> None:
    loaded = modules_loaded_by("import interactive")
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY]
    assert not heavy, f"import interactive loads {heavy}"
    ours = [m for m in loaded if m.startswith("interactive.")]
    assert ours == ["interactive.base", "interactive.base.errors"], ours


def test_the_cli_never_imports_the_session_runtime() -> None:
    loaded = modules_loaded_by("import interactive.cli")
    runtime = {"session", "task", "reaper", "distributed", "inputs", "resume"}
    assert not {layer_of(m) for m in loaded} & runtime
    assert "debugpy" not in {m.split(".")[0] for m in loaded}


def test_the_cli_loads_the_kubernetes_client_only_for_verbs_that_reach_a_cluster() -> None:
    """``podcode --help``, a local ``status`` or ``edits`` start at the speed of ``git``."""
    loaded = modules_loaded_by(
        "import contextlib, io, os, tempfile\nfrom interactive.cli import Console, run, verb\n"
        "verb('status'); verb('resume'); verb('edits')\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    run(['--help'])\n"
        "quiet = Console(out=io.StringIO(), err=io.StringIO(),\n"
        "                environ={'PODCODE_HOME': tempfile.mkdtemp()})\n"
        "run(['status'], quiet)  # a local status, run through (no session: said, not raised)"
    )
    assert "kubernetes" not in {m.split(".")[0] for m in loaded}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_packages_never_import_higher_ones(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    for path in files:
        wrong = {m.split(".")[0] for m in imports_of(path)} & FORBIDDEN[package]
        assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}"


def test_tests_share_fakes_through_fixture_modules() -> None:
    """A test file never imports another test file: shared fakes live in fixture modules."""
    for path in sorted((ROOT / "tests").glob("*.py")):
        wrong = sorted(m for m in imports_of(path) if m.split(".")[:2][-1].startswith("test_"))
        assert not wrong, f"{path.name} imports {wrong}"


def test_no_shell_true_anywhere() -> None:
    for package in ("interactive", "server_bootstrap", "vscode_config"):
        for path in (ROOT / package).rglob("*.py"):
            assert "shell=True" not in path.read_text(), path

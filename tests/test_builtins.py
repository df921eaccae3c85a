"""The built-in extensions a session's code-server loads: its own, less the skipped ones,
through a folder of links (the install itself is never changed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from server_bootstrap.builtins import (
    GIT,
    SKIPPED,
    builtin_folder,
    in_git_work_tree,
    product_root,
    skipped_for,
)
from server_bootstrap.codeserver import CodeServer
from server_bootstrap.config import CodeServerConfig
from tests.codeserver_fixture import code_server_processes

NPM_LAYOUT = "lib/node_modules/code-server"


def _install(root: Path, layout: str, extensions: list[str]) -> Path:
    """A code-server install under ``root`` (the ``layout`` of its own folder): its binary."""
    own = root / layout if layout else root
    (own / "out" / "node").mkdir(parents=True)
    (own / "out" / "node" / "cli.js").write_text("// cli\n")
    for name in extensions:
        (own / "lib" / "vscode" / "extensions" / name).mkdir(parents=True)
        (own / "lib" / "vscode" / "extensions" / name / "package.json").write_text("{}")
    binary = root / "bin" / "code-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    return binary


@pytest.mark.parametrize("layout", ["", NPM_LAYOUT, "lib/code-server"])
def test_links_every_builtin_but_the_skipped_ones(tmp_path: Path, layout: str) -> None:
    binary = _install(tmp_path / "cs", layout, ["python", "git", "copilot", "node_modules"])
    folder = builtin_folder(binary, tmp_path / "session" / "builtins")
    assert folder == tmp_path / "session" / "builtins"
    own = product_root(binary)
    assert own == (tmp_path / "cs" / layout if layout else tmp_path / "cs")
    assert sorted(p.name for p in folder.iterdir()) == ["git", "node_modules", "python"]
    assert (folder / "python").resolve() == own / "lib" / "vscode" / "extensions" / "python"
    assert (own / "lib" / "vscode" / "extensions" / "copilot").is_dir(), "the install is kept"
    again = builtin_folder(binary, folder, frozenset({"git"}))  # made again, as told now
    assert again is not None and sorted(p.name for p in again.iterdir()) == [
        "copilot", "node_modules", "python"]


def test_nothing_to_skip_or_no_install_found_leaves_code_servers_own(tmp_path: Path) -> None:
    binary = _install(tmp_path / "cs", "", ["python", "git"])
    assert builtin_folder(binary, tmp_path / "b") is None  # none of SKIPPED is there
    assert builtin_folder(binary, tmp_path / "b", frozenset()) is None
    assert not (tmp_path / "b").exists()
    lone = tmp_path / "elsewhere" / "code-server"
    lone.parent.mkdir()
    lone.write_text("#!/bin/sh\n")
    assert product_root(lone) is None and builtin_folder(lone, tmp_path / "b") is None


def test_a_folder_that_cannot_be_made_is_logged_and_code_server_loads_its_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    binary = _install(tmp_path / "cs", "", ["python", "copilot"])
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert builtin_folder(binary, blocker / "builtins") is None
    assert "loads all its built-in extensions" in caplog.text


@pytest.mark.parametrize(("value", "always", "outside_git"), [
    (None, SKIPPED, GIT), ("", SKIPPED, GIT), ("none", frozenset(), frozenset()),
    ("NONE", frozenset(), frozenset()),
    ("copilot, emmet,", {"copilot", "emmet"}, frozenset()),  # those alone
    ("default,php", SKIPPED | {"php"}, GIT),
    ("default, -git,-git-base", SKIPPED, {"merge-conflict"}),  # Git's kept everywhere
    ("default,-emmet,git", (SKIPPED - {"emmet"}) | {"git"}, GIT - {"git"}),
])
def test_the_skipped_builtins_setting(
    value: str | None, always: frozenset[str], outside_git: frozenset[str]
) -> None:
    env = {} if value is None else {"PODCODE_CODE_SERVER_SKIP_BUILTINS": value}
    config = CodeServerConfig.from_environ(env)
    assert (config.skip_builtins, config.skip_outside_git) == (always, outside_git)


def test_gits_extensions_are_left_out_only_outside_a_git_work_tree(tmp_path: Path) -> None:
    plain = tmp_path / "plain" / "src"
    plain.mkdir(parents=True)
    assert not in_git_work_tree(plain)
    assert skipped_for(plain, SKIPPED) == SKIPPED | GIT
    repository = tmp_path / "repo"
    (repository / ".git").mkdir(parents=True)
    (repository / "pkg" / "sub").mkdir(parents=True)
    linked = tmp_path / "worktree"
    linked.mkdir()
    (linked / ".git").write_text("gitdir: ../repo/.git/worktrees/w\n")  # a linked work tree
    for folder in (repository, repository / "pkg" / "sub", linked):
        assert in_git_work_tree(folder), folder
        assert skipped_for(folder, SKIPPED) == SKIPPED
    assert skipped_for(plain, frozenset(), frozenset()) == frozenset()  # "none"


@pytest.mark.codeserver
async def test_a_sessions_code_server_runs_without_the_skipped_builtins(
    code_server_factory: Callable[..., CodeServer]
) -> None:
    """The real code-server is started with the folder of links, which lacks exactly the
    skipped extensions its install ships; it serves (its browser use is in the browser
    tests: highlighting, the debugger, the language server)."""
    server = code_server_factory()
    await server.start()
    own = product_root(server.binary)
    assert own is not None
    shipped = {p.name for p in (own / "lib" / "vscode" / "extensions").iterdir()}
    assert {"copilot", "python", "git"} <= shipped
    folder = server.data_dir / "builtin-extensions"
    # Its workspace is in no Git work tree: Git's extensions are left out too.
    assert {p.name for p in folder.iterdir()} == shipped - SKIPPED - GIT
    command = " ".join(max(code_server_processes(server), key=lambda p: len(p.cmdline()))
                       .cmdline())
    assert f"--builtin-extensions-dir {folder}" in command
    assert server.ready


@pytest.mark.codeserver
def test_no_builtin_left_in_needs_one_left_out(code_server_binary: Path) -> None:
    """An extension whose ``extensionDependencies`` name a skipped one would fail to
    activate: none of the installed code-server's does."""
    own = product_root(code_server_binary)
    assert own is not None
    manifests = {path.parent.name: json.loads(path.read_text())
                 for path in (own / "lib" / "vscode" / "extensions").glob("*/package.json")}
    folder_of = {f"{m.get('publisher')}.{m.get('name')}".lower(): name
                 for name, m in manifests.items()}
    assert set(manifests) >= SKIPPED | GIT, "every skipped name is a built-in of this one"
    for skipped in (SKIPPED, SKIPPED | GIT):  # in a Git work tree, and outside one
        broken = [(name, dependency) for name, m in manifests.items() if name not in skipped
                  for dependency in m.get("extensionDependencies", [])
                  if folder_of.get(dependency.lower()) in skipped]
        assert broken == []

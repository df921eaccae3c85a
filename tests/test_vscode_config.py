from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jinja2
import pytest

import interactive
from interactive.base.types import TaskRef
from interactive.doors.vscode_files import RankEndpoint, write_configurations
from vscode_config import vscode
from vscode_config.templates import render

TASK = TaskRef("jobs.train.fit", "jobs.train", "fit", "/src/jobs/train.py")


EXTENSION = Path(vscode.__file__).resolve().parent / "extension"


def write(
    workspace: Path, home: Path, ranks: tuple[RankEndpoint, ...] = (), ide: str = "code-server",
    desktop: bool = False,
) -> dict:
    write_configurations(
        workspace,
        TASK,
        home=home,
        debug=("127.0.0.1", 5678),
        control={"control_url": "http://127.0.0.1:8081", "token": "t0k"},
        ranks=ranks,
        ide=ide,
        desktop=desktop,
    )
    return json.loads((workspace / ".vscode" / "launch.json").read_text())


def test_launch_has_attach_rerun_and_resume(tmp_path: Path) -> None:
    launch = write(tmp_path, tmp_path / "home")
    by_name = {c["name"]: c for c in launch["configurations"]}
    attach = by_name["podcode: attach to failed fit (post-mortem)"]
    assert attach["request"] == "attach" and attach["connect"] == {
        "host": "127.0.0.1",
        "port": 5678,
    }
    rerun = by_name["podcode: debug fit again with captured inputs"]
    assert rerun["request"] == "launch" and rerun["python"] == sys.executable
    assert rerun["env"]["PODCODE_ENABLE"] == "0"
    script = Path(rerun["program"]).read_text()
    assert "load_inputs(TASK)" in script and '"jobs.train.fit"' in script
    compile(script, "rerun.py", "exec")
    resume = by_name["podcode: resume workflow"]
    assert resume["request"] == "launch" and resume["action"] == "resume"
    assert {c["type"] for c in launch["configurations"]} == {"podcode"}  # the companion's
    hidden = [{"path": str(Path(interactive.__file__).parent), "include": False}]
    assert attach["rules"] == hidden and rerun["rules"] == hidden  # podcode's frames left out
    settings = json.loads((tmp_path / ".vscode" / "settings.json").read_text())
    assert settings["python.defaultInterpreterPath"] == sys.executable
    assert settings["remote.autoForwardPorts"] is False
    assert settings["debug.openDebug"] == "openOnSessionStart"


def test_without_an_ide_the_configurations_are_for_desktop_vscode(tmp_path: Path) -> None:
    """ide="none": a desktop VS Code attaches with Microsoft's Python Debugger (debugpy)."""
    launch = write(tmp_path, tmp_path / "home", ide="none")
    assert {c["type"] for c in launch["configurations"]} == {"debugpy"}
    resume = launch["configurations"][-1]
    assert resume["name"] == "podcode: resume workflow"
    assert resume["module"] == "interactive.cli" and resume["args"] == ["resume"]
    assert resume["env"]["PODCODE_HOME"] == str(tmp_path / "home")


@pytest.mark.parametrize("ide", ["code-server", "none"])
def test_the_companion_contributes_every_pod_debug_type(tmp_path: Path, ide: str) -> None:
    """code-server has no Python debugger of its own: the pod's configurations must use one
    the companion contributes (with Python breakpoints): its own, and "debugpy" (the desktop
    configurations', served while the Python Debugger extension is not installed)."""
    package = json.loads((EXTENSION / "package.json").read_text())
    contributed = {d["type"] for d in package["contributes"]["debuggers"]}
    assert {"language": "python"} in package["contributes"]["breakpoints"]
    assert contributed == {vscode.POD_DEBUG_TYPE, vscode.DESKTOP_DEBUG_TYPE}
    types = {c["type"] for c in write(tmp_path, tmp_path / "home", ide=ide)["configurations"]}
    assert types <= contributed if ide != "none" else types == {vscode.DESKTOP_DEBUG_TYPE}
    events = package["activationEvents"]  # active before F5 can ask for the debugger
    assert "*" in events or f"onDebugResolve:{vscode.POD_DEBUG_TYPE}" in events


def test_users_configurations_survive_with_comments(tmp_path: Path) -> None:
    folder = tmp_path / ".vscode"
    folder.mkdir()
    (folder / "launch.json").write_text(
        '{\n // my configs\n "version": "0.2.0",\n "configurations": [\n'
        '  {"name": "mine", "type": "debugpy", "request": "launch",'
        ' "program": "a // not a comment.py"},\n'
        '  {"name": "podcode: stale", "type": "debugpy"},\n ],\n}\n'
    )
    (folder / "settings.json").write_text(
        '{"editor.fontSize": 15, /* keep */ "python.defaultInterpreterPath": "/old"}'
    )
    launch = write(tmp_path, tmp_path / "home")
    names = [c["name"] for c in launch["configurations"]]
    assert names[0] == "mine" and "podcode: stale" not in names and len(names) == 4
    assert launch["configurations"][0]["program"] == "a // not a comment.py"
    settings = json.loads((folder / "settings.json").read_text())
    assert (
        settings["editor.fontSize"] == 15
        and settings["python.defaultInterpreterPath"] == sys.executable
    )
    write(tmp_path, tmp_path / "home")  # idempotent
    assert len(json.loads((folder / "launch.json").read_text())["configurations"]) == 4


def test_unparsable_launch_is_backed_up_not_lost(tmp_path: Path) -> None:
    folder = tmp_path / ".vscode"
    folder.mkdir()
    (folder / "launch.json").write_text("{ this is not json")
    write(tmp_path, tmp_path / "home")
    assert (folder / "launch.json.podcode-backup").read_text() == "{ this is not json"


def test_session_file_for_the_companion_is_private_and_ignored(tmp_path: Path) -> None:
    write(tmp_path, tmp_path / "home")
    session = tmp_path / ".vscode" / "podcode-session.json"
    assert os.stat(session).st_mode & 0o777 == 0o600
    companion = json.loads(session.read_text())
    assert companion["token"] == "t0k"
    assert "podcode-session.json" in (tmp_path / ".vscode" / ".gitignore").read_text()
    launch = json.loads((tmp_path / ".vscode" / "launch.json").read_text())
    attach = [c for c in launch["configurations"] if c["request"] == "attach"]
    assert companion["postmortem"] == attach[0]["name"], "the one the companion starts"


def test_a_session_serving_ssh_adds_a_desktop_attach_after_the_companions(
    tmp_path: Path,
) -> None:
    """Remote-SSH opens the same folder in a desktop VS Code, which has no companion: a
    ``debugpy`` attach to the same debugger is there for it; the companion still starts its
    own."""
    launch = write(tmp_path, tmp_path / "home", desktop=True)
    attach = [c for c in launch["configurations"] if c["request"] == "attach"]
    assert [c["type"] for c in attach] == ["podcode", "debugpy"]
    assert attach[1]["connect"] == attach[0]["connect"] == {"host": "127.0.0.1", "port": 5678}
    assert "desktop VS Code over SSH" in attach[1]["name"]
    companion = json.loads((tmp_path / ".vscode" / "podcode-session.json").read_text())
    assert companion["postmortem"] == attach[0]["name"]
    other = tmp_path / "without-ssh"
    other.mkdir()
    plain = write(other, tmp_path / "h")
    assert [c["type"] for c in plain["configurations"] if c["request"] == "attach"] == ["podcode"]
    headless = write(tmp_path, tmp_path / "home", ide="none", desktop=True)
    assert [c["type"] for c in headless["configurations"] if c["request"] == "attach"] == [
        "debugpy"]  # already the desktop's type: not twice


def test_hostile_names_stay_json_strings() -> None:
    ours = vscode.launch_configurations(
        task_name='x", "evil": "1',
        debug_host="127.0.0.1",
        debug_port=1,
        workspace='/w"s',
        rerun_script="/r",
        python="/p",
        home="/h",
        ranks=[],
        debug_type='podcode", "evil": "2',
        desktop_attach=False,
        hidden_roots=['/i"n'],
    )
    assert ours["configurations"][0]["name"].startswith('podcode: attach to failed x", "evil')
    assert "evil" not in ours["configurations"][0]
    assert ours["configurations"][0]["rules"] == [{"path": '/i"n', "include": False}]


def test_templates_refuse_missing_values() -> None:
    with pytest.raises(jinja2.UndefinedError, match="debug_host"):
        render("launch.json.j2", task_name="x")
    with pytest.raises(jinja2.UndefinedError):
        render("rerun.py.j2", task="x")


def test_merge_keeps_unknown_top_level_keys() -> None:
    merged = vscode.merge_launch(
        {"version": "0.2.0", "compounds": [1], "configurations": "junk"},
        {"version": "0.2.0", "configurations": [{"name": "podcode: a"}]},
    )
    assert merged["compounds"] == [1] and merged["configurations"] == [{"name": "podcode: a"}]


def test_a_distributed_task_gets_an_attach_per_rank_and_a_compound(tmp_path: Path) -> None:
    vscode_folder = tmp_path / ".vscode"
    vscode_folder.mkdir()
    user = {
        "configurations": [{"name": "mine", "request": "launch"}],
        "compounds": [{"name": "my compound", "configurations": ["mine"]}],
    }
    (vscode_folder / "launch.json").write_text(json.dumps(user))
    ranks = (RankEndpoint(0, "127.0.0.1", 5678),
             RankEndpoint(1, "127.0.0.1", 5690, "/podcode/rank-1/session.json"))
    write(tmp_path, tmp_path / "home", ranks)
    launch = write(tmp_path, tmp_path / "home", ranks)  # twice: ours replaced, not doubled
    attach = [c for c in launch["configurations"] if c.get("request") == "attach"]
    assert [(c["name"], c["connect"]["port"]) for c in attach] == [
        ("podcode: attach to rank 0 of fit (post-mortem)", 5678),
        ("podcode: attach to rank 1 of fit (post-mortem)", 5690),
    ]
    assert launch["configurations"][0]["name"] == "mine"
    assert launch["compounds"] == [
        user["compounds"][0],
        {"name": "podcode: attach all ranks of fit", "configurations": [c["name"] for c in attach]},
    ]
    # The companion's notebook can run in each rank's frame: it finds the other's record.
    companion = json.loads((vscode_folder / "podcode-session.json").read_text())
    assert companion["local_rank"] == 0
    assert companion["ranks"] == [{"local_rank": 1, "record": "/podcode/rank-1/session.json"}]


USERS_LAUNCH = """{
    // my own configurations: keep this comment
    "version": "0.2.0",
    "configurations": [
        {"name": "mine", "type": "debugpy", "request": "launch", "program": "x.py"},
    ]
}
"""


def test_the_users_launch_json_comes_back_as_it_was(tmp_path: Path) -> None:
    from interactive.doors.vscode_files import restore_workspace

    folder = tmp_path / ".vscode"
    folder.mkdir()
    (folder / "launch.json").write_text(USERS_LAUNCH)
    launch = write(tmp_path, tmp_path / "home")
    assert {"mine"} < {c["name"] for c in launch["configurations"]}  # merged meanwhile
    assert (folder / "podcode" / "originals" / "launch.json").read_text() == USERS_LAUNCH
    write(tmp_path, tmp_path / "home")  # the session opens again (a resume that failed)
    restore_workspace(tmp_path)
    assert (folder / "launch.json").read_text() == USERS_LAUNCH  # comments and all
    assert sorted(p.name for p in folder.iterdir()) == ["launch.json"]


def test_a_workspace_without_vscode_is_left_without_it(tmp_path: Path) -> None:
    from interactive.doors.vscode_files import restore_workspace

    write(tmp_path, tmp_path / "home")
    restore_workspace(tmp_path)
    assert not (tmp_path / ".vscode").exists()


def test_a_file_edited_during_the_session_is_kept(tmp_path: Path) -> None:
    from interactive.doors.vscode_files import restore_workspace

    write(tmp_path, tmp_path / "home")
    settings = tmp_path / ".vscode" / "settings.json"
    settings.write_text('{"editor.fontSize": 18}\n')  # the engineer's own change
    restore_workspace(tmp_path)
    assert settings.read_text() == '{"editor.fontSize": 18}\n'
    assert not (tmp_path / ".vscode" / "launch.json").exists()
    assert not (tmp_path / ".vscode" / "podcode-session.json").exists()


def test_a_rank_of_another_process_restoring_the_same_files_first_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks of one pod share the workspace, each in its own process: the one that restores
    a file second finds it gone between its look and its read."""
    from interactive.doors import vscode_files

    write(tmp_path, tmp_path / "home")
    digest = vscode_files._digest

    def other_rank_first(path: Path) -> str:
        path.unlink()  # the other rank restored it a moment before
        return digest(path)

    monkeypatch.setattr(vscode_files, "_digest", other_rank_first)
    vscode_files.restore_workspace(tmp_path)
    assert not (tmp_path / ".vscode").exists()


def test_two_sessions_of_one_process_share_the_workspace_until_the_last_closes(
    tmp_path: Path,
) -> None:
    """Each session's configurations and companion file are there while it is open; the
    folder is put back when the last one closes."""
    from interactive.doors.vscode_files import restore_workspace

    folder = tmp_path / ".vscode"
    folder.mkdir()
    (folder / "launch.json").write_text(USERS_LAUNCH)
    left, right = TaskRef("m.left", "m", "left", None), TaskRef("m.right", "m", "right", None)
    for task, session, port in ((left, "9-1", 8081), (right, "9-1-2", 8082)):
        write_configurations(tmp_path, task, home=tmp_path / "home", debug=("127.0.0.1", 5678),
                             control={"control_url": f"http://127.0.0.1:{port}", "token": port},
                             session=session)

    def names() -> set[str]:
        return {c["name"] for c in json.loads((folder / "launch.json").read_text())
                ["configurations"]}

    def companion(name: str) -> dict:
        return json.loads((folder / name).read_text())

    assert {"mine", "podcode: attach to failed left (post-mortem)",
            "podcode: attach to failed right (post-mortem)",
            "podcode: debug left again with captured inputs",
            "podcode: debug right again with captured inputs"} < names()
    assert companion("podcode/session-9-1.json")["token"] == 8081
    assert companion("podcode/session-9-1-2.json")["token"] == 8082
    assert companion("podcode-session.json")["token"] == 8082  # the newest
    restore_workspace(tmp_path, "9-1-2")
    assert "podcode: debug right again with captured inputs" not in names()
    assert "podcode: debug left again with captured inputs" in names()
    assert not (folder / "podcode" / "session-9-1-2.json").exists()
    assert companion("podcode-session.json")["token"] == 8081  # the one still open
    restore_workspace(tmp_path, "9-1")
    assert (folder / "launch.json").read_text() == USERS_LAUNCH
    assert sorted(p.name for p in folder.iterdir()) == ["launch.json"]


USERS_MCP = """{
  // the user's own servers
  "servers": {"github": {"type": "http", "url": "https://example.com/mcp"}},
  "inputs": []
}
"""


def test_mcp_json_adds_podcodes_server_keeps_the_users_and_comes_back_as_it_was(
        tmp_path: Path) -> None:
    from interactive.doors.vscode_files import restore_workspace
    from interactive.storage.workspace import Snapshot

    folder = tmp_path / ".vscode"
    folder.mkdir()
    (folder / "mcp.json").write_text(USERS_MCP)
    write(tmp_path, tmp_path / "home")
    merged = json.loads((folder / "mcp.json").read_text())
    assert merged["servers"]["github"] == {"type": "http", "url": "https://example.com/mcp"}
    ours = merged["servers"]["podcode"]
    assert ours["type"] == "stdio" and ours["args"][-1] == "mcp" and merged["inputs"] == []
    assert Snapshot.take(tmp_path).changed() == []  # podcode's file: never an edit
    restore_workspace(tmp_path)
    assert (folder / "mcp.json").read_text() == USERS_MCP  # comments and all


def test_without_agents_no_mcp_json_is_written(tmp_path: Path) -> None:
    from interactive.doors.vscode_files import restore_workspace

    write_configurations(tmp_path, TASK, home=tmp_path / "home", debug=("127.0.0.1", 5678),
                         control={"control_url": "http://127.0.0.1:8081", "token": "t0k"},
                         agents=False)
    assert (tmp_path / ".vscode" / "launch.json").exists()
    assert not (tmp_path / ".vscode" / "mcp.json").exists()
    write(tmp_path, tmp_path / "home")
    assert json.loads((tmp_path / ".vscode" / "mcp.json").read_text())["servers"]["podcode"]
    restore_workspace(tmp_path)
    assert not (tmp_path / ".vscode").exists()


def test_the_users_own_podcode_server_wins() -> None:
    theirs = {"servers": {"podcode": {"type": "stdio", "command": "/opt/bin/podcode",
                                      "args": ["mcp"]}}}
    merged = vscode.merge_mcp(theirs, vscode.mcp_servers("podcode", ["mcp"]))
    assert merged == theirs and merged is not theirs
    assert vscode.merge_mcp(["not", "an", "object"], vscode.mcp_servers("p", ["mcp"])) == {
        "servers": {"podcode": {"type": "stdio", "command": "p", "args": ["mcp"]}}}

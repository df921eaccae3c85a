"""What ``podcode open`` prints names the IDE the session serves: VS Code or JupyterLab."""

from __future__ import annotations

from interactive.base.record import SessionRecord
from interactive.cli.entry import Entry

IDE_URL = "http://127.0.0.1:8080/"


def _text(ide: str | None) -> str:
    record = SessionRecord(state="waiting", task="job.py:train", control_url="http://127.0.0.1:8081",
                           token="t", code_server_url=IDE_URL, password="pw", ide=ide)
    return Entry("local session", record, {"state": "waiting"}, IDE_URL, record.control_url,
                 None, "/home/ana/.podcode/session.json", "-").text()


def test_open_names_the_ide_the_session_serves_with_its_password() -> None:
    for ide, name in ((None, "VS Code:   "), ("code-server", "VS Code:   "),
                      ("jupyter", "JupyterLab: ")):
        text = _text(ide)
        assert f"\n  {name}{IDE_URL}\n" in text, text
        assert "  Password:  pw\n" in text, text
    assert "VS Code" not in _text("jupyter").split("Debugger")[0]


def _without_ide(notes: list[str]) -> str:
    record = SessionRecord(state="waiting", task="job.py:train", control_url="http://127.0.0.1:8081",
                           token="t", debug_host="127.0.0.1", debug_port=5678)
    return Entry("local session", record, {"state": "waiting", "notes": notes}, None,
                 record.control_url, None, "-", "127.0.0.1:5678").text()


def test_a_session_without_an_ide_says_so_plainly_whatever_its_other_notes() -> None:
    """ide="none": the VS Code line says the session serves no IDE and how to attach, and
    never sends the reader to notes about something else."""
    store = "your fixes are saved to /s, inside this pod: unless that folder is a persistent volume"
    text = _without_ide([store])
    line = next(line for line in text.splitlines() if line.startswith("  VS Code:"))
    assert "serves no IDE" in line and "desktop VS Code to the debugger" in line, line
    assert "see the notes" not in line
    assert "  Debugger:  127.0.0.1:5678" in text


def test_an_ide_still_to_come_sends_the_reader_to_its_note() -> None:
    text = _without_ide(["code-server is not installed; installing it into /c (npm registry)"])
    assert "  VS Code:   none now (see the notes below)" in text
    assert "podcode: note: code-server is not installed" in text

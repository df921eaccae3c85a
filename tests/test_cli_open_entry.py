"""What ``podcode open`` prints names the IDE the session serves: VS Code or JupyterLab."""

from __future__ import annotations

from interactive.base.record import SessionRecord
from interactive.cli.open_cmd import Entry

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

"""What ``podcode open`` and ``podcode attach`` print and open: the way into a session's
IDE (its address, a one-time login link, the password's file, the debugger, the notes)."""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from interactive.base.control_client import ControlClient
from interactive.base.record import SessionRecord
from interactive.base.sessionfile import connectable
from interactive.cli.terminal import Console


@dataclass(frozen=True)
class Entry:
    """What ``attach`` and ``open`` print: the way into the session's IDE."""

    label: str
    record: SessionRecord
    status: dict[str, Any]
    ide_url: str | None
    control_url: str
    link: str | None
    password_file: str
    debugger: str

    def as_json(self) -> dict[str, Any]:
        return {"task": self.record.task, "state": self.status.get("state"), "url": self.ide_url,
                "password": self.record.password, "control_url": self.control_url,
                "login_url": self.link, "notes": list(self.status.get("notes") or [])}

    def text(self) -> str:
        record, state = self.record, self.status.get("state")
        lines = [f"podcode: {self.label}: task {record.task or '-'}, state {state}"
                 + (f", error {record.error}" if record.error else "")]
        if self.ide_url:
            name = "JupyterLab:" if record.ide == "jupyter" else "VS Code:  "
            lines.append(f"  {name} {self.ide_url}")
            if self.link:
                lines += [f"  Open:      {self.link}",
                          "             (logs this browser in once, within 10 minutes; then "
                          "use the VS Code address)"]
            if record.password:
                lines += [f"  Password:  {record.password}",
                          "             (the login page asks for it; it is also the "
                          f"\"password\" in {self.password_file})"]
        else:
            lines.append(f"  VS Code:   {self._no_ide()}")
        lines += [f"  Debugger:  {self.debugger}", f"  Control:   {self.control_url}"]
        lines += [f"podcode: note: {note}" for note in self.status.get("notes") or []]
        return "\n".join(lines)

    def _no_ide(self) -> str:
        if ide_notes(self.status):
            return "none now (see the notes below); the debugger serves meanwhile"
        return ("none: this session serves no IDE (it runs with ide=\"none\"); attach a "
                "desktop VS Code to the debugger (the Debugger line below; docs/desktop.md)")


def ide_notes(status: dict[str, Any]) -> list[str]:
    """The session's notes about its IDE (being installed, not started, stopped): a session
    without one but with such notes has an IDE coming or broken, not ``ide="none"``."""
    return [str(note) for note in status.get("notes") or []
            if any(word in str(note) for word in IDE_WORDS)]


IDE_WORDS = ("IDE", "code-server", "JupyterLab")
"""Words every note about the session's IDE holds."""


def login_link(client: ControlClient, record: SessionRecord, ide_url: str | None) -> str | None:
    """A one-time login link to ``ide_url`` (None without a password, or where the session
    gives none, or where the IDE is not on a loopback address, where links do not go)."""
    if not ide_url or not record.password or not _loopback(ide_url):
        return None
    return client.login_link(ide_url)


def debugger_address(record: SessionRecord) -> str | None:
    """``host:port`` of the session's debugpy, connectable from here (None: not recorded)."""
    if record.debug_port is None:
        return None
    return urlsplit(connectable(f"http://{record.debug_host or ''}:{record.debug_port}")).netloc


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def browse(console: Console, args: argparse.Namespace, entry: Entry) -> None:
    """``--browser`` (on ``open`` and ``attach``): the link, else the VS Code address, in
    the browser."""
    if args.browser and entry.ide_url:
        console.open_browser(entry.link or entry.ide_url)

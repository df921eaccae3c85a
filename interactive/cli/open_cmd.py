"""``podcode open`` (and ``attach`` without POD): the way into the local session's IDE.

A newcomer who ran a task on this machine reaches its VS Code without opening a JSON file:
the address, a one-time login link (the session's ``POST /api/login-link``), the password
and the file that holds it, the debugger, and the session's notes (code-server still
installing, say). With POD it is ``podcode attach POD``. No Kubernetes client is loaded
for the local case.
"""

from __future__ import annotations

import argparse

from interactive.base.sessionfile import connectable
from interactive.cli.entry import Entry, browse, debugger_address, login_link
from interactive.cli.errors import Exit
from interactive.cli.target import open_target
from interactive.cli.terminal import Console


def run(args: argparse.Namespace, console: Console) -> int:
    """``podcode open [POD]`` and ``podcode attach [POD]``."""
    if args.pod is not None:
        from interactive.cli.attach import attach  # the Kubernetes client: only for a pod

        return attach(args, console)
    return open_local(args, console)


def open_local(args: argparse.Namespace, console: Console) -> int:
    """The local session's VS Code address, one-time login link, password and debugger."""
    with open_target(args, console) as target:
        status = target.client.status()
        record = target.record
        ide_url = None
        if record.code_server_url:
            ide_url = connectable(record.code_server_url).rstrip("/") + "/"
        debug = debugger_address(record)
        entry = Entry(target.label, record, status, ide_url, target.client.url,
                      login_link(target.client, record, ide_url), target.where,
                      f"{debug} (desktop VS Code attaches to it: docs/desktop.md)"
                      if debug else "-")
    if args.output == "json":
        console.json({"session": target.label, "password_file": target.where,
                      "debug": debug, **entry.as_json()})
    else:
        console.say(entry.text())
    browse(console, args, entry)
    return Exit.OK

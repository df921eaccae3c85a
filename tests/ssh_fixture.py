"""Driving Debian's OpenSSH client against a session, as a user does: the config
``podcode ssh-config`` prints, and ``ssh``/``sftp``/``scp`` with ``BatchMode=yes``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from interactive.cli import Exit
from tests.cli_fixture import cli


def ssh_config(tmp_path: Path, *target: str) -> Path:
    code, out, err = cli("ssh-config", *target)
    assert code == Exit.OK, err
    config = tmp_path / "ssh_config"
    config.write_text(out)
    return config


def openssh(tool: str, config: Path, *argv: str, stdin: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool, "-F", str(config), "-o", "BatchMode=yes", *argv],
                          input=stdin, capture_output=True, text=True, timeout=60, check=False)

"""``podcode install``: handed to ``server_bootstrap.install`` (imported only when used)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from interactive.cli.errors import CliError, Exit
from interactive.cli.parser import Parser
from interactive.cli.terminal import Console

MODULE = "server_bootstrap.install"


def run(rest: Sequence[str], console: Console) -> int:
    try:
        module = importlib.import_module(MODULE)
    except ImportError as exc:
        raise CliError(f"podcode install is not available here ({MODULE} cannot be imported: "
                       f"{exc}); reinstall podcode", Exit.FAILED) from None
    parser = Parser(
        prog="podcode install",
        description="Install code-server into the shared cache, so sessions start at once.",
    )
    module.add_arguments(parser)
    args = parser.parse_args(list(rest))
    return int(module.run(args))

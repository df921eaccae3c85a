"""The ``podcode`` command: ``main(argv) -> exit code``.

Errors a user can fix (unknown pod, no cluster, no permission, no session)
print one line and exit with a documented code (see :class:`Exit`); only a
bug prints a traceback.

This module loads only the parser: ``podcode --help`` (and each verb's ``--help``)
imports nothing else, and a verb imports what it needs when it runs (:data:`VERBS`).

Runs on: the laptop (``doctor --pod`` also in the pod). May import: ``base``, ``storage``
(to read saved patches) and ``kube``; never the session's runtime.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from interactive.base.errors import PodcodeError
from interactive.cli.exits import Exit
from interactive.cli.parser import build_parser, usage_error

if TYPE_CHECKING:
    import argparse

    from interactive.cli.terminal import Console

__all__ = ["Console", "Exit", "main", "run"]


def __getattr__(name: str) -> Any:
    """``Console``, loaded when asked for (it is not needed to parse the arguments)."""
    if name == "Console":
        from interactive.cli.terminal import Console

        return Console
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


VERBS: dict[str, tuple[str, str]] = {
    "list": ("list_cmd", "run"),
    "attach": ("open_cmd", "run"),
    "open": ("open_cmd", "run"),
    "debug": ("attach", "debug"),
    "status": ("control_cmds", "status"),
    "resume": ("control_cmds", "resume"),
    "keepalive": ("control_cmds", "keepalive"),
    "abort": ("control_cmds", "abort"),
    "doctor": ("doctor_cmd", "run"),
    "edits": ("edits_cmd", "run"),
    "ssh-config": ("ssh_cmd", "ssh_config"),
    "ssh": ("ssh_cmd", "ssh"),
    "ssh-proxy": ("ssh_cmd", "ssh_proxy"),
    "mcp": ("mcp_cmd", "run"),
}
"""Each verb's module and function, imported when the verb runs: ``--help``, a local
``status``, ``open`` or ``edits`` never load the Kubernetes client."""


def verb(name: str) -> Callable[[argparse.Namespace, Console], int]:
    module, function = VERBS[name]
    found: Callable[[argparse.Namespace, Console], int] = getattr(
        importlib.import_module(f"interactive.cli.{module}"), function)
    return found


def run(argv: Sequence[str], console: Console | None = None,
        configure_logging: bool = False) -> int:
    """Run one command; returns its exit code (a usage error exits 2 after two lines on
    stderr: what is wrong, and which ``--help`` to read). ``configure_logging``: the
    console script's log handler, set once the arguments parsed."""
    parser = build_parser(lazy=True)
    argv, command = split_command(list(argv))
    args, rest = parser.parse_known_args(argv)
    if configure_logging:
        _configure_logging(argv)
    if console is None:
        from interactive.cli.terminal import Console

        console = Console()
    if command is not None and args.verb != "ssh":
        usage_error("only podcode ssh takes a command after --", f"podcode {args.verb}")
    args.command = command
    try:
        if args.verb == "install":
            from interactive.cli import install_cmd

            return install_cmd.run(rest, console)
        if rest:
            usage_error(f"unrecognized arguments: {' '.join(rest)}", f"podcode {args.verb}")
        if getattr(args, "ray", None):  # the pod named by its RayCluster or RayJob
            from interactive.cli.ray_target import resolve

            resolve(args, console)  # imports the Kubernetes client: only when asked for
        elif getattr(args, "pod_required", False) and args.pod is None:
            usage_error(f"podcode {args.verb} needs the session's pod, or --ray NAME (its "
                        "RayCluster or RayJob); for a session on this machine, desktop VS Code "
                        "attaches to its debugger directly (podcode open says where)",
                        f"podcode {args.verb}")
        return verb(args.verb)(args, console)
    except PodcodeError as exc:
        from interactive.cli.errors import exit_code

        console.warn(str(exc))
        return int(exit_code(exc))
    except KeyboardInterrupt:
        console.warn("interrupted")
        return int(Exit.INTERRUPTED)


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``podcode ssh POD -- CMD...``: the arguments, and the command after ``--`` (None
    without one)."""
    if "--" not in argv:
        return argv, None
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def _configure_logging(argv: Sequence[str]) -> None:
    import logging

    verbose = "-v" in argv or "--verbose" in argv
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("podcode: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    if not verbose:
        for noisy in ("kubernetes", "urllib3", "websocket"):
            logging.getLogger(noisy).setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    """The console script ``podcode``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        return run(arguments, configure_logging=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(Exit.USAGE)
    except BrokenPipeError:  # `podcode list | head`: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(Exit.FAILED)

"""The ``podcode`` command: ``main(argv) -> exit code``.

Errors a user can fix (unknown pod, no cluster, no permission, no session)
print one line and exit with a documented code (see :class:`Exit`); only a
bug prints a traceback.

Runs on: the laptop (``doctor --pod`` also in the pod). May import: ``base``, ``storage``
(to read saved patches) and ``kube``; never the session's runtime.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from interactive.base.errors import PodcodeError
from interactive.cli.console import Console
from interactive.cli.errors import Exit, exit_code
from interactive.cli.parser import build_parser, usage_error

__all__ = ["Console", "Exit", "main", "run"]

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
}
"""Each verb's module and function, imported when the verb runs: ``--help``, a local
``status``, ``open`` or ``edits`` never load the Kubernetes client."""


def verb(name: str) -> Callable[[argparse.Namespace, Console], int]:
    module, function = VERBS[name]
    found: Callable[[argparse.Namespace, Console], int] = getattr(
        importlib.import_module(f"interactive.cli.{module}"), function)
    return found


def run(argv: Sequence[str], console: Console | None = None) -> int:
    """Run one command; returns its exit code (a usage error exits 2 after two lines on
    stderr: what is wrong, and which ``--help`` to read)."""
    console = console or Console()
    parser = build_parser()
    argv, command = split_command(list(argv))
    args, rest = parser.parse_known_args(argv)
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
    _configure_logging(arguments)
    try:
        return run(arguments)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(Exit.USAGE)
    except BrokenPipeError:  # `podcode list | head`: the reader left, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(Exit.FAILED)

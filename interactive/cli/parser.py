"""The ``podcode`` command line: verbs and options, kubectl-like.

A verb's options are added when that verb is parsed (:meth:`Parser.complete`):
``podcode --help`` builds only the list of verbs, ``podcode attach ...`` only attach's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

USAGE = 2
"""The exit code of a usage error (``Exit.USAGE``)."""
DESCRIPTION = "Find, attach to and steer podcode debug sessions, locally or across a cluster."
EXAMPLES = """examples:
  podcode list -n ml                     the sessions waiting in namespace ml
  podcode open                           the login link of the session on this machine
  podcode attach train-x7k2p -n ml       VS Code of that pod at http://127.0.0.1:PORT/
  podcode debug train-x7k2p --write      forward debugpy for a desktop VS Code
  podcode status train-x7k2p             state, error, idle time, cleanup countdown
  podcode resume train-x7k2p             run the task again with your edits
  podcode keepalive train-x7k2p --seconds 7200
  podcode ssh-config train-x7k2p -n ml   a Host block for ~/.ssh/config (Remote-SSH)
  podcode ssh train-x7k2p -n ml -- nvidia-smi   a command (or a shell) in the session
  podcode resume --push train.py         send your edited files, then resume
  podcode edits pipeline.train | git apply   your last fix, from the store
  podcode status                         the session on this machine (no POD)
  podcode doctor                         what works and what to fix
  podcode mcp --read-only                a coding agent's door (docs/agent.md)

"""
EPILOG = EXAMPLES + """exit codes: 0 ok, 1 failed, 2 usage, 3 not found (pod, session),
4 unreachable (no kubeconfig, API server or session down), 5 permission denied, 6 conflict,
130 interrupted"""


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage error is two lines, what is wrong and where the help
    is, instead of the whole usage first; and whose options may be added only when it
    parses (``fill``)."""

    fill: Callable[[Parser], None] | None = None

    def error(self, message: str) -> NoReturn:
        usage_error(message, self.prog)

    def complete(self) -> Parser:
        """Add the options left to add (once)."""
        fill, self.fill = self.fill, None
        if fill is not None:
            fill(self)
        return self

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        self.complete()
        return super().parse_known_args(args, namespace)


def usage_error(message: str, prog: str = "podcode") -> NoReturn:
    """``podcode: error: MESSAGE`` and a hint to ``PROG --help`` on stderr; exits 2."""
    print(f"podcode: error: {message}\npodcode: see {prog} --help", file=sys.stderr, flush=True)
    raise SystemExit(USAGE)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 7 * 24 * 3600:
        raise argparse.ArgumentTypeError("seconds must be > 0 and at most 604800 (a week)")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return int(text)


def _pid(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id")
    return int(text)


def _common(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """The options every verb takes. Only the top level sets defaults, so that an option
    given before the verb is not reset by the verb's parser."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--kubeconfig", default=default(None),
                        help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", default=default(None),
                        help="kubeconfig context (default: the current one)")
    parser.add_argument("-n", "--namespace", default=default(None),
                        help="namespace (default: the context's)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default=default("table"),
                        help="output format")
    parser.add_argument("-v", "--verbose", action="store_true", default=default(False),
                        help="log what happens")


def _pod(parser: Parser, optional: bool) -> None:
    """A verb that reaches one session: the options that choose it."""
    _common(parser, defaults=False)
    parser.add_argument("pod", nargs="?", default=None,
                        help="the session's pod" + (" (default: the local session)"
                                                     if optional else ""))
    parser.add_argument("--ray", metavar="NAME", help="instead of the pod: the RayCluster or "
                        "RayJob (KubeRay) whose pod holds the session")
    parser.set_defaults(pod_required=not optional)
    parser.add_argument("-c", "--container", help="container holding the session "
                        "(default: the pod's default container, else the first)")
    parser.add_argument("--task", help="when several sessions wait (in the pod, or here): "
                        "the one of this task (module.function, or its last part)")
    parser.add_argument("--pid", type=_pid, help="when several sessions wait: the one of "
                        "this process")
    parser.add_argument("--session", metavar="ID", help="when several sessions of one "
                        "process wait (a fan-out of one task): the one with this id (the "
                        "choices are listed when it is needed)")


def _browser(parser: Parser) -> None:
    parser.add_argument("--browser", action="store_true",
                        help="also open the login link (else VS Code) in the browser")


def _list(parser: Parser) -> None:
    _common(parser, defaults=False)
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        help="sessions in every namespace")
    parser.add_argument("-l", "--local", action="store_true",
                        help="the sessions recorded in $PODCODE_HOME on this machine")


def _attach(parser: Parser) -> None:
    _pod(parser, optional=True)
    parser.add_argument("--port", type=_port, help="local port for VS Code (default: the "
                        "pod's, else any free one)")
    _browser(parser)


def _open(parser: Parser) -> None:
    _pod(parser, optional=True)
    _browser(parser)
    parser.set_defaults(port=None)


def _local_root(parser: Parser) -> None:
    parser.add_argument("--local-root", default=".", help="your checkout of the task's code "
                        "(default: the current folder)")


def _debug(parser: Parser) -> None:
    _pod(parser, optional=False)
    parser.add_argument("--port", type=_port, help="local port for debugpy")
    _local_root(parser)
    parser.add_argument("--write", action="store_true",
                        help="merge the configuration into LOCAL_ROOT/.vscode/launch.json")


def _resume(parser: Parser) -> None:
    _pod(parser, optional=True)
    parser.add_argument("--push", nargs="+", metavar="FILE", help="first send these files "
                        "(edited on this machine) to the session's workspace, at their path "
                        "relative to --local-root")
    _local_root(parser)


def _ssh(parser: Parser) -> None:
    _pod(parser, optional=True)
    parser.add_argument("--alias", help="the Host name (default: podcode-POD, or "
                        "podcode-local)")


def _keepalive(parser: Parser) -> None:
    _pod(parser, optional=True)
    parser.add_argument("--seconds", type=_positive, default=3600.0,
                        help="how long to keep the session (default 3600)")


def _edits(parser: Parser) -> None:
    _common(parser, defaults=False)
    parser.add_argument("task", help="the task's name as podcode prints it (module.function)")


def _doctor(parser: Parser) -> None:
    _common(parser, defaults=False)
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--pod", dest="side", action="store_const", const="pod",
                      help="check what a session needs in its pod (default inside a pod)")
    side.add_argument("--laptop", dest="side", action="store_const", const="laptop",
                      help="check what the CLI needs (default outside a pod)")


def _session(parser: Parser) -> None:
    _pod(parser, optional=True)


def _mcp(parser: Parser) -> None:
    _common(parser, defaults=False)
    parser.add_argument("--read-only", action="store_true",
                        help="the agent reads (failure, frames, locals, code, edits) but "
                        "does not run code, write files, resume or abort")
    parser.add_argument("-l", "--local", action="store_true",
                        help="only the sessions on this machine (no Kubernetes API)")


VERBS: tuple[tuple[str, str, Callable[[Parser], None] | None, bool], ...] = (
    ("list", "the sessions in the cluster (--local: on this machine)", _list, False),
    ("attach", "forward the session's VS Code to this machine (without POD: the local "
     "session's login link, as podcode open)", _attach, True),
    ("open", "the local session's VS Code: its one-time login link, where the password is, "
     "the debugger (with POD: podcode attach)", _open, True),
    ("debug", "forward debugpy for desktop VS Code", _debug, True),
    ("status", "the session's state", _session, True),
    ("resume", "re-run the task with the edited code", _resume, True),
    ("ssh-config", "an OpenSSH Host block for desktop editors (podcode ssh-config POD >> "
     "~/.ssh/config)", _ssh, True),
    ("ssh", "a shell (or the command after --) in the session, over SSH", _ssh, True),
    ("ssh-proxy", "the ProxyCommand that ssh-config writes: relays SSH to the session", _ssh,
     True),
    ("keepalive", "postpone the idle cleanup", _keepalive, True),
    ("abort", "give up: the task raises its original exception", _session, True),
    ("edits", "print the last fix saved for a task, as a patch (podcode edits TASK | git "
     "apply)", _edits, False),
    ("mcp", "a Model Context Protocol server on stdin/stdout: a coding agent diagnoses, "
     "fixes and resumes sessions (claude mcp add podcode -- podcode mcp; docs/agent.md)",
     _mcp, True),
    ("install", "install code-server ahead of time (podcode install --help)", None, False),
    ("doctor", "in a pod: code-server, GPU, mail, ports and the pod's permissions; on a "
     "laptop: the cluster and your permissions", _doctor, False),
)
"""Each verb: its name, its help line, what adds its options, and whether its help line is
also its description (``podcode VERB --help``)."""


def build_parser(lazy: bool = False) -> Parser:
    """The whole command line; ``lazy``: each verb's options are added only when that verb
    is parsed (what ``run`` does: the others are never built)."""
    parser = Parser(prog="podcode", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(parser, defaults=True)
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=Parser)
    for name, help_text, fill, described in VERBS:
        verb = sub.add_parser(name, help=help_text, add_help=fill is not None,
                              description=help_text if described else None)
        verb.fill = fill
        if not lazy:
            verb.complete()
    return parser

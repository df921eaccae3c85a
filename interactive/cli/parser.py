"""The ``podcode`` command line: verbs and options, kubectl-like."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

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

"""
EPILOG = EXAMPLES + """exit codes: 0 ok, 1 failed, 2 usage, 3 not found (pod, session),
4 unreachable (no kubeconfig, API server or session down), 5 permission denied, 6 conflict,
130 interrupted"""


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage error is two lines, what is wrong and where the help
    is, instead of the whole usage first."""

    def error(self, message: str) -> NoReturn:
        usage_error(message, self.prog)


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


def _common(defaults: bool) -> Parser:
    """The options every verb takes. Only the top level sets defaults, so that an option
    given before the verb is not reset by the verb's parser."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    common = Parser(add_help=False)
    common.add_argument("--kubeconfig", default=default(None),
                        help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
    common.add_argument("--context", default=default(None),
                        help="kubeconfig context (default: the current one)")
    common.add_argument("-n", "--namespace", default=default(None),
                        help="namespace (default: the context's)")
    common.add_argument("-o", "--output", choices=("table", "json"), default=default("table"),
                        help="output format")
    common.add_argument("-v", "--verbose", action="store_true", default=default(False),
                        help="log what happens")
    return common


def _pod_verb(sub: argparse._SubParsersAction[Parser], common: Parser,
              name: str, help_text: str, optional: bool) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
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
    return parser


def build_parser() -> argparse.ArgumentParser:
    common = _common(defaults=False)
    parser = Parser(prog="podcode", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    parents=[_common(defaults=True)])
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=Parser)
    listing = sub.add_parser("list", parents=[common], help="the sessions in the cluster "
                             "(--local: on this machine)")
    listing.add_argument("-A", "--all-namespaces", action="store_true",
                         help="sessions in every namespace")
    listing.add_argument("-l", "--local", action="store_true",
                         help="the sessions recorded in $PODCODE_HOME on this machine")
    attach = _pod_verb(sub, common, "attach", "forward the session's VS Code to this machine "
                       "(without POD: the local session's login link, as podcode open)",
                       optional=True)
    attach.add_argument("--port", type=_port, help="local port for VS Code (default: the "
                        "pod's, else any free one)")
    attach.add_argument("--open", "--browser", dest="open", action="store_true",
                        help="also open the login link (else VS Code) in the browser")
    opening = _pod_verb(sub, common, "open", "the local session's VS Code: its one-time login "
                        "link, where the password is, the debugger (with POD: podcode attach)",
                        optional=True)
    opening.add_argument("--open", "--browser", dest="open", action="store_true",
                         help="also open the login link (else VS Code) in the browser")
    opening.set_defaults(port=None)
    debug = _pod_verb(sub, common, "debug", "forward debugpy for desktop VS Code",
                      optional=False)
    debug.add_argument("--port", type=_port, help="local port for debugpy")
    debug.add_argument("--local-root", default=".", help="your checkout of the task's code "
                       "(default: the current folder)")
    debug.add_argument("--write", action="store_true",
                       help="merge the configuration into LOCAL_ROOT/.vscode/launch.json")
    _pod_verb(sub, common, "status", "the session's state", optional=True)
    resume = _pod_verb(sub, common, "resume", "re-run the task with the edited code",
                       optional=True)
    resume.add_argument("--push", nargs="+", metavar="FILE", help="first send these files "
                        "(edited on this machine) to the session's workspace, at their path "
                        "relative to --local-root")
    resume.add_argument("--local-root", default=".", help="your checkout of the task's code "
                        "(default: the current folder)")
    ssh_config = _pod_verb(sub, common, "ssh-config", "an OpenSSH Host block for desktop "
                           "editors (podcode ssh-config POD >> ~/.ssh/config)", optional=True)
    ssh = _pod_verb(sub, common, "ssh", "a shell (or the command after --) in the session, "
                    "over SSH", optional=True)
    proxy = _pod_verb(sub, common, "ssh-proxy", "the ProxyCommand that ssh-config writes: "
                      "relays SSH to the session", optional=True)
    for parser_ in (ssh_config, ssh, proxy):
        parser_.add_argument("--alias", help="the Host name (default: podcode-POD, or "
                             "podcode-local)")
    keepalive = _pod_verb(sub, common, "keepalive", "postpone the idle cleanup", optional=True)
    keepalive.add_argument("--seconds", type=_positive, default=3600.0,
                           help="how long to keep the session (default 3600)")
    _pod_verb(sub, common, "abort", "give up: the task raises its original exception",
              optional=True)
    edits = sub.add_parser("edits", parents=[common], help="print the last fix saved for a "
                           "task, as a patch (podcode edits TASK | git apply)")
    edits.add_argument("task", help="the task's name as podcode prints it (module.function)")
    sub.add_parser("install", add_help=False, help="install code-server ahead of time "
                   "(podcode install --help)")
    doctor = sub.add_parser("doctor", parents=[common], help="in a pod: code-server, GPU, "
                            "mail, ports and the pod's permissions; on a laptop: the cluster "
                            "and your permissions")
    side = doctor.add_mutually_exclusive_group()
    side.add_argument("--pod", dest="side", action="store_const", const="pod",
                      help="check what a session needs in its pod (default inside a pod)")
    side.add_argument("--laptop", dest="side", action="store_const", const="laptop",
                      help="check what the CLI needs (default outside a pod)")
    return parser

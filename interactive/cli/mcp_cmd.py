"""``podcode mcp``: serve the coding agent's door (:mod:`interactive.agent`) on stdin and
stdout until the agent closes it. Loads the MCP SDK only here."""

from __future__ import annotations

import argparse

from interactive.cli.errors import CliError
from interactive.cli.exits import Exit
from interactive.cli.terminal import Console


def run(args: argparse.Namespace, console: Console) -> int:
    try:
        from interactive.agent.server import build
    except ModuleNotFoundError as exc:
        if exc.name != "mcp" and not (exc.name or "").startswith("mcp."):
            raise
        raise CliError("podcode mcp needs the MCP SDK: pip install 'podcode[agent]'",
                       Exit.FAILED) from None
    from interactive.agent.reach import Reach
    from interactive.agent.scrub import Secrets, guard_logging

    secrets = Secrets()
    guard_logging(secrets)
    reach = Reach(console.environ, secrets, namespace=args.namespace, context=args.context,
                  kubeconfig=args.kubeconfig, cluster=not args.local)
    try:
        build(reach, secrets, read_only=args.read_only).mcp.run("stdio")
    finally:
        reach.close()
    return int(Exit.OK)

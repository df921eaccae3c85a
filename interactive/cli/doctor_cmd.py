"""``podcode doctor``: the checks as a table, with the fix for what is not fine."""

from __future__ import annotations

import argparse

from interactive.cli.checks import FAIL, OK, SKIP, run_checks
from interactive.cli.errors import Exit
from interactive.cli.output import table
from interactive.cli.target import connect
from interactive.cli.terminal import Console


def run(args: argparse.Namespace, console: Console) -> int:
    side = {"pod": True, "laptop": False}.get(args.side or "")
    checks = run_checks(console.environ, lambda: connect(args, console), args.namespace, side)
    failed = any(c.status == FAIL for c in checks)
    if args.output == "json":
        console.json([c.as_dict() for c in checks])
        return Exit.FAILED if failed else Exit.OK
    console.say(table(("CHECK", "STATUS", "DETAIL"), [(c.name, c.status, c.detail)
                                                      for c in checks]))
    fixes = [c for c in checks if c.status not in (OK, SKIP) and c.fix]
    if fixes:
        console.say()
        console.say(table(("TO FIX", "HOW"), [(c.name, c.fix) for c in fixes]))
    return Exit.FAILED if failed else Exit.OK

"""The CLI's exit code follows the error's class, for every code docs/cli.md documents."""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path

import pytest

import interactive.cli
from interactive.base.errors import PodcodeError, SettingError
from interactive.base.sessionfile import BadSessionFile, NoSession
from interactive.cli import Console, run
from interactive.cli.errors import (
    CliError,
    ControlBadRequest,
    ControlConflict,
    ControlError,
    ControlUnauthorized,
    ControlUnreachable,
    Exit,
    exit_code,
)
from interactive.kube.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    KubeConfigError,
    KubeConfigMissing,
    KubeError,
    NotASession,
    NotFound,
    ServerError,
    SessionEnded,
    SessionUnreadable,
    Unauthorized,
    Unreachable,
)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
CASES: list[tuple[PodcodeError, Exit]] = [
    (SessionUnreadable("cannot read the record"), Exit.FAILED),
    (BadRequest("the pod is not running", status=400), Exit.FAILED),
    (BadSessionFile("session.json has no token"), Exit.FAILED),
    (ControlError("the control API failed (500)", 500), Exit.FAILED),
    (KubeError("some other refusal", status=418), Exit.FAILED),
    (SettingError("port", -1, "must be a port number"), Exit.USAGE),
    (ControlBadRequest("the session rejected the request", 400), Exit.USAGE),
    (CliError("several sessions wait", Exit.USAGE), Exit.USAGE),
    (NotFound("no pod ghost", status=404), Exit.NOT_FOUND),
    (NotASession("pod web is not a podcode session"), Exit.NOT_FOUND),
    (SessionEnded("the session has ended"), Exit.NOT_FOUND),
    (NoSession("no local podcode session"), Exit.NOT_FOUND),
    (KubeConfigMissing("no Kubernetes configuration"), Exit.UNREACHABLE),
    (KubeConfigError("cannot use the kubeconfig"), Exit.UNREACHABLE),
    (Unreachable("cannot reach the Kubernetes API server"), Exit.UNREACHABLE),
    (ServerError("the API server failed", status=500), Exit.UNREACHABLE),
    (Conflict("the API server failed", status=409), Exit.UNREACHABLE),
    (ControlUnreachable("the control API does not answer"), Exit.UNREACHABLE),
    (Forbidden("permission denied", status=403), Exit.FORBIDDEN),
    (Unauthorized("credentials rejected", status=401), Exit.FORBIDDEN),
    (ControlUnauthorized("the session refused the token", 401), Exit.FORBIDDEN),
    (ControlConflict("cannot resume: the task is running", 409), Exit.CONFLICT),
]


@pytest.mark.parametrize(("error", "code"), CASES, ids=lambda c: type(c).__name__)
def test_the_exit_code_follows_the_class(error: PodcodeError, code: Exit) -> None:
    assert exit_code(error) is code


@pytest.mark.parametrize(("error", "code"), CASES, ids=lambda c: type(c).__name__)
def test_a_verb_that_raises_prints_one_line_and_exits_with_its_code(
    error: PodcodeError, code: Exit, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(args: argparse.Namespace, console: Console) -> int:
        raise error

    monkeypatch.setattr(interactive.cli, "verb", lambda name: fail)
    err = io.StringIO()
    assert run(["status"], Console(out=io.StringIO(), err=err)) == code
    assert err.getvalue() == f"podcode: {error}\n"


def test_every_documented_code_has_an_error_class() -> None:
    table = DOCS.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    produced = {int(code) for _, code in CASES} | {Exit.OK, Exit.INTERRUPTED}
    assert documented == produced == {int(code) for code in Exit}

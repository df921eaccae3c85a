"""Whether podcode runs, from the environment alone, and the line a refused variable gets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from interactive.base.activation import SHOWN_CHARS, Activation, activation, shown_value
from interactive.base.errors import SettingError

IN_POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [({}, False), ({"PODCODE_ENABLE": "1"}, True), (IN_POD, True),
     ({**IN_POD, "PODCODE_ENABLE": "off"}, False)],
)
def test_good_environments_decide_as_before(environ: dict[str, str], wanted: bool) -> None:
    decided = activation(environ)
    assert decided == Activation(wanted) and decided.enabled is wanted and not decided.lines()


@pytest.mark.parametrize(
    ("environ", "variable", "accepted"),
    [
        ({"PODCODE_MAX_IDLE_SECONDS": "abc"}, "PODCODE_MAX_IDLE_SECONDS", "finite number > 0"),
        ({"PODCODE_ON_REAP": "nomod_xyz:fn"}, "PODCODE_ON_REAP", "'package.module:function'"),
        ({"PODCODE_MODE": "later"}, "PODCODE_MODE", "on_failure, startup"),
        ({"PODCODE_ENABLE": "maybe"}, "PODCODE_ENABLE", "true or false"),
        ({"PODCODE_SMTP_URL": "mail.example.com"}, "PODCODE_SMTP_URL", "smtp://"),
    ],
)
@pytest.mark.parametrize("on", [False, True])
def test_a_bad_variable_is_one_line_and_keeps_podcode_off(
    environ: dict[str, str], variable: str, accepted: str, on: bool
) -> None:
    """Off, a warning that the variable is ignored; on (here: inside Kubernetes), an error
    saying that podcode stays off; either way nothing raises and podcode does not run."""
    decided = activation({**environ, **(IN_POD if on else {})})
    assert decided.wanted is on and decided.enabled is False
    assert decided.level == (logging.ERROR if on else logging.WARNING)
    [(named, line)] = decided.lines()
    value = next(iter(environ.values()))
    assert named == variable and line.startswith(f"{variable}={value!r}")
    assert accepted in line
    assert ("runs without a debug session" in line) is on and ("is ignored" in line) is not on


def test_every_bad_variable_has_its_own_line() -> None:
    decided = activation({"PODCODE_ENABLE": "1", "PODCODE_PORT": "http", "PODCODE_IDE": "vim"})
    assert sorted(variable for variable, _ in decided.lines()) == ["PODCODE_IDE", "PODCODE_PORT"]


def test_variables_checked_by_the_caller_are_not_read_again() -> None:
    """The decorator passes what read_settings refused; only the flag and the mail server
    are read here then."""
    given = SettingError("port", "http", "expected a number")
    decided = activation({"PODCODE_ENABLE": "1", "PODCODE_IDE": "vim"}, [given])
    assert decided.refused == (given,)
    assert activation({"PODCODE_ENABLE": "1", "PODCODE_IDE": "vim"}, []).enabled


@pytest.mark.parametrize(
    "url",
    [
        "smtp://ana:s3cret-Pw@mail.example.com:587?starttls=maybe",
        "ftp://ana:s3cret-Pw@mail.example.com",
        "smtp://ana:s3cret/Pw@mail.example.com",  # urllib takes the password for a port
        "smtp://ana:s3cret-Pw@mail.example.com:notaport",
    ],
)
@pytest.mark.parametrize("on", [False, True])
def test_the_mail_servers_password_never_reaches_the_line(url: str, on: bool) -> None:
    decided = activation({"PODCODE_SMTP_URL": url, **(IN_POD if on else {})})
    [(variable, line)] = decided.lines()
    assert variable == "PODCODE_SMTP_URL" and "ana:***@mail.example.com" in line
    assert "s3cret" not in line and "Pw" not in line


def test_a_password_in_any_url_is_hidden_and_a_long_value_is_cut() -> None:
    [(_, line)] = activation({"PODCODE_DCGM_URL": "ftp://u:hunter2@dcgm/metrics"}).lines()
    assert "hunter2" not in line and "u:***@dcgm" in line
    shown = shown_value("x" * 1000)
    assert len(shown) == SHOWN_CHARS + 2 and shown.endswith("...'")


def test_the_configuration_pages_lines_are_the_real_ones() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    shown = [line.strip() for line in page.splitlines()
             if line.strip().startswith("podcode: PODCODE_MAX_IDLE_SECONDS=")]
    real = [f"podcode: {line}" for on in (False, True)
            for _, line in activation({"PODCODE_MAX_IDLE_SECONDS": "abc",
                                       **(IN_POD if on else {})}).lines()]
    assert shown == real

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from interactive.base.errors import SettingError
from interactive.base.settings import (
    GROUP_OF,
    GROUPS,
    NAMES,
    PARSERS,
    TASK_NAMES,
    EditorSettings,
    HookSettings,
    IdleSettings,
    MailSettings,
    PortSettings,
    Settings,
    build_settings,
    ensure_home,
    env_name,
    is_enabled,
    podcode_home,
    read_settings,
)


def test_defaults_match_the_design() -> None:
    s = build_settings({}, {})
    assert (s.mode, s.editor.ide, s.editor.auth) == ("on_failure", "code-server", "password")
    assert s.ports == PortSettings(port=8080, control_port=8081, debug_port=5678, bind="127.0.0.1")
    idle = s.idle
    assert (idle.max_idle_seconds, idle.grace_seconds, idle.poll_seconds) == (1800, 600, 10)
    assert (idle.gpu_idle_percent, idle.cpu_idle_percent, idle.dcgm_url) == (5, 5, None)
    assert (s.retries, s.cache, s.cache_version) == (0, False, "1")
    assert s.hooks.preempt_grace_seconds == 25 and s.editor.extensions == ()
    assert s.mail.owner is None and s == Settings()


def test_environment_overrides_the_argument() -> None:
    s = build_settings(
        {"max_idle_seconds": 60, "mode": "startup"}, {"PODCODE_MAX_IDLE_SECONDS": "900"}
    )
    assert s.idle.max_idle_seconds == 900 and s.mode == "startup"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("mode", "later", "on_failure, startup"),
        ("port", "http", "number"),
        ("port", 70000, "65535"),
        ("debug_port", -1, ">= 0"),
        ("max_idle_seconds", 0, "> 0"),
        ("gpu_idle_percent", 101, "<= 100"),
        ("cache", "maybe", "true or false"),
        ("bind", "my host", "IPv4 address"),
        ("bind", "::1", "IPv6 is not supported"),
        ("bind", "::", "IPv6 is not supported"),
        ("retries", 1.5, "whole number"),
        ("on_reap", "no_such_module_xyz:save", "cannot import"),
        ("workspace", "/definitely/not/here", "does not exist"),
        ("poll_seconds", 1e-6, ">= 0.1"),
        ("poll_seconds", 0.09, ">= 0.1"),
        ("dcgm_url", "dcgm-exporter:9400", "http://"),
        ("dcgm_url", "ftp://h/metrics", "http://"),
    ],
)
def test_bad_values_name_the_setting(name: str, value: object, words: str) -> None:
    with pytest.raises(SettingError) as raised:
        build_settings({name: value}, {})
    message = str(raised.value)
    assert repr(name) in message and env_name(name) in message and words in message


def test_bad_environment_value_is_reported_with_its_variable() -> None:
    with pytest.raises(SettingError, match="PODCODE_CONTROL_PORT"):
        build_settings({}, {"PODCODE_CONTROL_PORT": "eighty"})


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(SettingError, match="unknown setting"):
        build_settings({"idle": 5}, {})


def test_every_setting_has_an_environment_override() -> None:
    for name in NAMES:
        assert env_name(name) == "PODCODE_" + name.upper()
    grouped = {f for kind in GROUPS.values() for f in kind.__dataclass_fields__}
    assert set(NAMES) == set(TASK_NAMES) | grouped == set(PARSERS)
    assert len(NAMES) == len(set(NAMES)) == 32
    assert set(GROUP_OF) == grouped and not set(TASK_NAMES) & grouped


def test_every_setting_lands_in_its_group_from_a_keyword_and_from_its_variable() -> None:
    """Each ``PODCODE_*`` variable and each keyword still sets its one setting, flat."""
    values = {
        "mode": ("startup", "startup"), "ide": ("none", "none"), "port": ("9000", 9000),
        "control_port": ("9001", 9001), "debug_port": ("9002", 9002),
        "bind": ("0.0.0.0", "0.0.0.0"), "auth": ("none", "none"),
        "max_idle_seconds": ("60", 60.0), "grace_seconds": ("7", 7.0),
        "poll_seconds": ("0.5", 0.5), "gpu_idle_percent": ("9", 9.0),
        "cpu_idle_percent": ("8", 8.0), "owner": ("ana@example.com", "ana@example.com"),
        "retries": ("2", 2), "max_capture_bytes": ("1000", 1000), "cache": ("yes", True),
        "snapshot_inputs": ("failure", "failure"), "max_snapshot_bytes": ("2048", 2048),
        "cache_version": ("v2", "v2"), "extensions": ("a.vsix", ("a.vsix",)),
        "on_reap": ("os.path:exists", os.path.exists),
        "on_preempt": ("os.path:isdir", os.path.isdir),
        "preempt_grace_seconds": ("3", 3.0), "workspace": (".", Path(".").resolve()),
        "dcgm_url": ("http://d:9400/metrics", "http://d:9400/metrics"),
        "ssh": ("off", False), "ssh_port": ("2200", 2200), "language_server": ("0", False),
        "agents": ("0", False),
        "ray_max_sessions": ("3", 3), "ray_max_sessions_per_node": ("0", 0),
        "ssh_authorized_keys": ("/keys/authorized", "/keys/authorized"),
    }
    assert set(values) == set(NAMES)
    for name, (raw, expected) in values.items():
        from_env = build_settings({}, {env_name(name): raw})
        from_keyword = build_settings({name: raw}, {})
        assert from_env.value(name) == expected == from_keyword.value(name), name
        assert from_env.names == (name,) and from_env == from_keyword
        group = GROUP_OF.get(name)
        holder = from_env if group is None else getattr(from_env, group)
        assert getattr(holder, name) == expected
        assert from_env != Settings(), f"{name} changed nothing"


def test_the_groups_are_typed_dataclasses_of_their_own() -> None:
    s = build_settings({"owner": "a@b.c", "on_reap": "os.path:exists", "port": 0}, {})
    assert isinstance(s.ports, PortSettings) and s.ports.port == 0
    assert isinstance(s.editor, EditorSettings) and isinstance(s.idle, IdleSettings)
    assert s.mail == MailSettings(owner="a@b.c")
    assert s.hooks == HookSettings(on_reap=os.path.exists)
    with pytest.raises(KeyError):
        s.value("no_such_setting")


def test_hooks_extensions_and_workspace_from_environment(tmp_path: Path) -> None:
    s = build_settings(
        {},
        {
            "PODCODE_ON_REAP": "os.path:exists",
            "PODCODE_EXTENSIONS": "a.vsix, ms-python.python",
            "PODCODE_WORKSPACE": str(tmp_path),
            "PODCODE_CACHE": "yes",
        },
    )
    import os.path

    assert s.hooks.on_reap is os.path.exists
    assert s.editor.extensions == ("a.vsix", "ms-python.python")
    assert s.workspace == tmp_path.resolve() and s.cache is True


@pytest.mark.parametrize(
    ("environ", "enabled"),
    [
        ({}, False),
        ({"PODCODE_ENABLE": "1"}, True),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, True),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "PODCODE_ENABLE": "0"}, False),
    ],
)
def test_enablement(environ: dict[str, str], enabled: bool) -> None:
    assert is_enabled(environ) is enabled


def test_home_default_and_override(tmp_path: Path) -> None:
    assert podcode_home({}) == Path.home() / ".podcode"
    assert podcode_home({"PODCODE_HOME": str(tmp_path)}) == tmp_path


def test_poll_seconds_at_the_floor_and_dcgm_url() -> None:
    s = build_settings({"poll_seconds": 0.1}, {"PODCODE_DCGM_URL": " http://dcgm:9400/metrics "})
    assert s.idle.poll_seconds == 0.1 and s.idle.dcgm_url == "http://dcgm:9400/metrics"
    assert build_settings({}, {}).idle.dcgm_url is None


@pytest.mark.parametrize(
    ("name", "argument", "variable"),
    [
        ("poll_seconds", 1e-6, "5"),
        ("max_idle_seconds", -1, "900"),
        ("mode", "later", "startup"),
        ("port", "http", "8080"),
    ],
)
def test_a_bad_decorator_value_fails_even_when_the_environment_overrides_it(
    name: str, argument: object, variable: str
) -> None:
    with pytest.raises(SettingError) as raised:
        build_settings({name: argument}, {env_name(name): variable})
    message = str(raised.value)
    assert repr(name) in message and repr(argument) in message
    assert f"even though {env_name(name)} overrides it" in message


def test_a_new_home_is_created_private(tmp_path: Path) -> None:
    home = tmp_path / "a" / "home"
    assert ensure_home(home) == home
    assert home.stat().st_mode & 0o777 == 0o700


def test_an_existing_open_home_is_tightened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    with caplog.at_level(logging.INFO, logger="interactive.base.settings"):
        rank = ensure_home(home, home / "rank-1")
    assert rank == home / "rank-1"
    assert home.stat().st_mode & 0o777 == 0o700 and rank.stat().st_mode & 0o777 == 0o700
    assert "was mode 755; tightened to 0700" in caplog.text


def test_a_home_that_cannot_be_tightened_is_used_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "shared"
    home.mkdir()
    os.chmod(home, 0o775)

    def refuse(self: Path, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(Path, "chmod", refuse)
    with caplog.at_level(logging.WARNING, logger="interactive.base.settings"):
        assert ensure_home(home) == home
    assert "cannot be tightened" in caplog.text


NUMERIC = ["port", "control_port", "debug_port", "max_idle_seconds", "grace_seconds",
           "poll_seconds", "gpu_idle_percent", "cpu_idle_percent", "retries",
           "max_capture_bytes", "max_snapshot_bytes", "preempt_grace_seconds"]


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "1e400", "1e30", float("inf")])
def test_numbers_are_finite_and_bounded(name: str, raw: object) -> None:
    """PODCODE_GRACE_SECONDS=inf once spun the monitor; a huge preemption grace overflowed
    the SIGTERM path. Every numeric setting is refused outside its range, by name."""
    for given, environ in (({name: raw}, {}), ({}, {env_name(name): str(raw)})):
        with pytest.raises(SettingError) as raised:
            build_settings(given, environ)
        assert env_name(name) in str(raised.value) and "finite number" in str(raised.value)


def test_a_bad_variable_is_returned_not_raised_and_the_argument_stays() -> None:
    """The environment is not the code: a mistyped variable is left out (the decorator's
    argument, else the default, stays) and handed back for the caller to report."""
    settings, refused = read_settings(
        {"max_idle_seconds": 60, "port": 9000},
        {"PODCODE_MAX_IDLE_SECONDS": "abc", "PODCODE_PORT": "9100", "PODCODE_BIND": "::1"},
    )
    assert settings.idle.max_idle_seconds == 60 and settings.ports.port == 9100
    assert settings.ports.bind == "127.0.0.1"
    reasons = {(e.name, e.value): e.reason for e in refused}
    assert set(reasons) == {("max_idle_seconds", "abc"), ("bind", "::1")}
    assert "finite number" in reasons["max_idle_seconds", "abc"]
    assert "IPv6" in reasons["bind", "::1"]


@pytest.mark.parametrize(
    "arguments", [{"max_idle_seconds": "abc"}, {"bogus": 1}, {"on_reap": "nomod_xyz:fn"}]
)
def test_a_bad_argument_still_raises_whatever_the_environment(arguments: dict[str, object]) -> None:
    with pytest.raises(SettingError) as raised:
        read_settings(arguments, {"PODCODE_MAX_IDLE_SECONDS": "abc"})
    assert repr(next(iter(arguments))) in str(raised.value)


@pytest.mark.parametrize(
    ("name", "raw", "words"),
    [
        ("dcgm_url", "http://[not-closed/metrics", "cannot be read (ValueError"),
        ("workspace", "~no_such_user_podcode_xyz/src", "cannot be resolved"),
        ("on_reap", "broken_on_import_xyz:save", "cannot import it (RuntimeError: boom)"),
    ],
)
def test_a_variable_that_makes_its_parser_fail_is_a_refused_setting(
    name: str, raw: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a parser meets in a variable (a URL urllib cannot split, a home that does
    not exist, a hook module that raises when imported) is a SettingError naming it."""
    (tmp_path / "broken_on_import_xyz.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _, refused = read_settings({}, {env_name(name): raw})
    assert [e.name for e in refused] == [name] and words in refused[0].reason, refused

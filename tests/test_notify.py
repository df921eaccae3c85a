"""The owner's emails, sent to a real SMTP server (aiosmtpd on 127.0.0.1)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path

import pytest

from interactive.base.errors import SettingError
from interactive.base.smtp import parse_smtp_url
from interactive.base.state import SessionState
from interactive.reaper.notify import EmailNotifier, build_notifier, resolve_owner
from tests.mail_fixture import IDLE_SINCE, OWNER, REAP_AT, SECRET, warning_mail
from tests.smtp_fixture import SmtpServer, client_context, free_port, start_server
from vscode_config.mail import FinalMail, utc


def bodies(message: EmailMessage) -> tuple[str, str]:
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


class NoSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# -- PODCODE_SMTP_URL ------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "host", "port", "ssl", "starttls"),
    [
        ("smtp://mail.example.com", "mail.example.com", 25, False, False),
        ("smtp://mail.example.com:2525", "mail.example.com", 2525, False, False),
        ("smtp://mail.example.com?starttls=true", "mail.example.com", 587, False, True),
        ("smtp://mail.example.com:25?starttls=false", "mail.example.com", 25, False, False),
        ("smtps://mail.example.com", "mail.example.com", 465, True, False),
        ("smtps://u:p@[::1]:4650", "::1", 4650, True, False),
    ],
)
def test_smtp_url_forms(url: str, host: str, port: int, ssl: bool, starttls: bool) -> None:
    config = parse_smtp_url(url)
    assert (config.host, config.port, config.ssl, config.starttls) == (host, port, ssl, starttls)


def test_smtp_url_user_and_password_are_url_decoded() -> None:
    config = parse_smtp_url("smtp://ana%40example.com:s3cr%2Ft%3Ap%40ss@mail:587?timeout=5")
    assert config.username == "ana@example.com"
    assert config.password == SECRET
    assert config.timeout_seconds == 5
    assert SECRET not in repr(config)
    assert "s3cr" not in config.safe_url
    assert config.safe_url == "smtp://ana@example.com@mail:587"


@pytest.mark.parametrize(
    "url",
    [
        "http://user:hunter2@mail",
        "smtp://user:hunter2@",
        "smtp://user:hunter2@mail:notaport",
        "smtp://user:hunter2@mail?starttls=maybe",
        "smtp://user:hunter2@mail?tls=1",
        "smtps://user:hunter2@mail?starttls=true",
    ],
)
def test_bad_smtp_url_names_the_setting_and_hides_the_password(url: str) -> None:
    with pytest.raises(SettingError) as error:
        parse_smtp_url(url)
    assert "PODCODE_SMTP_URL" in str(error.value)
    assert "hunter2" not in str(error.value)


# -- real deliveries -------------------------------------------------------------


async def test_warning_email_reaches_the_owner(smtp_server: SmtpServer) -> None:
    notifier = EmailNotifier(parse_smtp_url(smtp_server.url), "podcode@pod.example", OWNER)
    assert await notifier.send_warning(warning_mail()) is True

    [message] = smtp_server.wait_for(1)
    assert message["To"] == OWNER
    assert message["From"] == "podcode@pod.example"
    assert smtp_server.envelopes[0] == ("podcode@pod.example", [OWNER])
    assert "train.fit" in message["Subject"] and "idle" in message["Subject"]
    text, html = bodies(message)
    for body in (text, html):
        assert "ml/train-abc" in body
        assert utc(IDLE_SINCE) in body
        assert utc(REAP_AT) in body
        assert "podcode keepalive train-abc -n ml" in body
        assert "IDE" in body


async def test_html_escapes_the_task_name(smtp_server: SmtpServer) -> None:
    notifier = EmailNotifier(parse_smtp_url(smtp_server.url), "podcode@pod.example", OWNER)
    assert await notifier.send_warning(warning_mail(task="evil<script>alert(1)</script>"))

    text, html = bodies(smtp_server.wait_for(1)[0])
    assert "<script>" not in html
    assert "evil&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "evil<script>alert(1)</script>" in text


async def test_final_email_says_where_the_edits_are(smtp_server: SmtpServer) -> None:
    notifier = EmailNotifier(parse_smtp_url(smtp_server.url), "podcode@pod.example", OWNER)
    mail = FinalMail(
        pod="ml/train-abc", task="train.fit", idle_since=IDLE_SINCE, reaped_at=REAP_AT,
        edits_url="s3://bucket/podcode/edits/train.fit/20231114T231320Z",
        changed=["train.py", "lib/model.py"],
    )
    assert await notifier.send_final(mail)

    [message] = smtp_server.wait_for(1)
    assert "cleaned up" in message["Subject"]
    for body in bodies(message):
        assert "s3://bucket/podcode/edits/train.fit/20231114T231320Z" in body
        assert "lib/model.py" in body


async def test_server_down_is_retried_with_backoff_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()  # nothing listens there
    config = parse_smtp_url(f"smtp://ana:{SECRET.replace('/', '%2F').replace('@', '%40')}"
                            f"@127.0.0.1:{port}?timeout=2")
    sleep = NoSleep()
    notifier = EmailNotifier(config, "podcode@pod", OWNER, sleep=sleep, attempts=4,
                             first_delay_seconds=1.5)
    caplog.set_level(logging.DEBUG, logger="interactive.reaper.notify")

    assert await notifier.send_warning(warning_mail()) is False

    assert sleep.delays == [1.5, 3.0, 6.0]
    failures = [r for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(failures) == 4
    assert any("gave up" in r.getMessage() for r in caplog.records)
    assert all(SECRET not in r.getMessage() and "s3cr" not in r.getMessage()
               for r in caplog.records)


async def test_a_server_that_comes_back_gets_the_mail() -> None:
    port = free_port()
    started: list[object] = []
    server: list[SmtpServer] = []

    async def sleep(seconds: float) -> None:
        if not started:  # the server comes up during the first back-off
            smtp, controller = start_server(port=port)
            server.append(smtp)
            started.append(controller)

    notifier = EmailNotifier(parse_smtp_url(f"smtp://127.0.0.1:{port}"), "podcode@pod", OWNER,
                             sleep=sleep, attempts=3)
    try:
        assert await notifier.send_warning(warning_mail()) is True
        assert server[0].wait_for(1)[0]["To"] == OWNER
    finally:
        for controller in started:
            controller.stop()  # type: ignore[attr-defined]


async def test_login_with_url_decoded_credentials(
    make_smtp_server: Callable[..., SmtpServer], smtp_tls_cert: tuple[Path, Path]
) -> None:
    server = make_smtp_server(tls="starttls", users={OWNER: SECRET})
    assert "starttls=true" in server.url
    notifier = EmailNotifier(parse_smtp_url(server.url), "podcode@pod", OWNER,
                             ssl_context=client_context(smtp_tls_cert))
    assert await notifier.send_warning(warning_mail())
    assert server.logins == [OWNER]
    assert server.wait_for(1)[0]["To"] == OWNER


async def test_wrong_password_is_logged_without_it(
    make_smtp_server: Callable[..., SmtpServer], smtp_tls_cert: tuple[Path, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = make_smtp_server(tls="starttls", users={OWNER: "right-one"})
    config = parse_smtp_url(server.url.replace("right-one", "wrong-one"))
    notifier = EmailNotifier(config, "podcode@pod", OWNER, sleep=NoSleep(), attempts=2,
                             ssl_context=client_context(smtp_tls_cert))
    assert await notifier.send_warning(warning_mail()) is False
    assert server.messages == []
    assert any("user name or password" in r.getMessage() for r in caplog.records)
    assert not any("wrong-one" in r.getMessage() for r in caplog.records)


async def test_smtps_with_a_self_signed_certificate(
    make_smtp_server: Callable[..., SmtpServer], smtp_tls_cert: tuple[Path, Path]
) -> None:
    server = make_smtp_server(tls="smtps")
    assert server.url.startswith("smtps://")
    notifier = EmailNotifier(parse_smtp_url(server.url), "podcode@pod", OWNER,
                             ssl_context=client_context(smtp_tls_cert))
    assert await notifier.send_warning(warning_mail())
    assert server.wait_for(1)[0]["To"] == OWNER


async def test_untrusted_certificate_is_refused(
    make_smtp_server: Callable[..., SmtpServer],
) -> None:
    server = make_smtp_server(tls="smtps")
    notifier = EmailNotifier(parse_smtp_url(server.url), "podcode@pod", OWNER,
                             sleep=NoSleep(), attempts=1)  # the system's CAs only
    assert await notifier.send_warning(warning_mail()) is False
    assert server.messages == []


# -- configuration ---------------------------------------------------------------


def test_no_owner_is_said_in_the_notes() -> None:
    state = SessionState(task="t")
    assert build_notifier(None, state, environ={"PODCODE_SMTP_URL": "smtp://mail"}) is None
    assert any("No owner" in note and "podcode.io/owner" in note for note in state.notes)


def test_no_smtp_is_said_in_the_notes() -> None:
    state = SessionState(task="t")
    assert build_notifier(OWNER, state, environ={}) is None
    assert any("PODCODE_SMTP_URL" in note for note in state.notes)
    assert state.owner == OWNER


def test_bad_smtp_url_is_a_note_without_the_password() -> None:
    state = SessionState(task="t")
    environ = {"PODCODE_SMTP_URL": "smtp://u:hunter2@mail?nope=1"}
    assert build_notifier(OWNER, state, environ=environ) is None
    assert any("PODCODE_SMTP_URL" in note for note in state.notes)
    assert not any("hunter2" in note for note in state.notes)


def test_notifier_from_the_environment() -> None:
    state = SessionState(task="t")
    environ = {"PODCODE_SMTP_URL": "smtps://u:p@mail", "PODCODE_MAIL_FROM": "bot@example.com"}
    notifier = build_notifier(OWNER, state, environ=environ)
    assert notifier is not None
    assert (notifier.owner, notifier.sender) == (OWNER, "bot@example.com")
    assert notifier.config.ssl
    assert state.notes == []


def test_owner_order_setting_then_environment_then_annotation() -> None:
    def annotation() -> str:
        return "from-pod@example.com"

    assert resolve_owner("a@x", {"PODCODE_OWNER": "b@x"}, annotation) == "a@x"
    assert resolve_owner(None, {"PODCODE_OWNER": "b@x"}, annotation) == "b@x"
    assert resolve_owner(None, {}, annotation) == "from-pod@example.com"
    assert resolve_owner(None, {}, None) is None

    def broken() -> str:
        raise RuntimeError("API down")

    assert resolve_owner(None, {}, broken) is None

"""The idle warning as the owner sees it: sent to a real SMTP server, its HTML part shown
in Chromium, with a screenshot into artifacts/ (``make screenshots`` copies it to docs/)."""

from __future__ import annotations

import html
from email.message import EmailMessage
from pathlib import Path

import pytest

from interactive.base.smtp import parse_smtp_url
from interactive.reaper.notify import EmailNotifier
from tests.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, MARKS
from tests.mail_fixture import OWNER, warning_mail
from tests.smtp_fixture import SmtpServer

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = MARKS


def as_page(message: EmailMessage) -> str:
    """The message as a mail reader shows it: its headers above its HTML body."""
    body = message.get_body(preferencelist=("html",))
    assert body is not None
    headers = "".join(f"<div><b>{name}:</b> {html.escape(str(message[name]))}</div>"
                      for name in ("From", "To", "Subject"))
    return (f'<div style="font-family:sans-serif;font-size:13px;padding:8px 12px;'
            f'border-bottom:1px solid #ccc;background:#f6f6f6">{headers}</div>'
            f'<div style="padding:4px 12px">{body.get_content()}</div>')


async def test_the_warning_email_as_the_owner_reads_it(
    smtp_server: SmtpServer, tmp_path: Path
) -> None:
    notifier = EmailNotifier(parse_smtp_url(smtp_server.url), "podcode@pod.example", OWNER)
    assert await notifier.send_warning(warning_mail()) is True
    [message] = smtp_server.wait_for(1)
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 760, "height": 420})
            await page.set_content(as_page(message))
            shown = await page.inner_text("body")
            assert "podcode keepalive train-abc -n ml" in shown
            assert "ml/train-abc" in shown and "train.fit" in shown
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "warning-email.png"), full_page=True)
        finally:
            await browser.close()

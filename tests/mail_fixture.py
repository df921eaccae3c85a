"""The owner and a warning mail, shared by the mail tests (SMTP and the browser)."""

from __future__ import annotations

from vscode_config.mail import WarningMail

OWNER = "ana@example.com"
IDLE_SINCE = 1_700_000_000.0
SENT_AT = IDLE_SINCE + 1800
REAP_AT = SENT_AT + 600
SECRET = "s3cr/t:p@ss"


def warning_mail(task: str = "train.fit") -> WarningMail:
    return WarningMail(
        pod="ml/train-abc", task=task, idle_since=IDLE_SINCE, sent_at=SENT_AT, reap_at=REAP_AT,
        keepalive_command="podcode keepalive train-abc -n ml",
    )

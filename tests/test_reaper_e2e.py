"""End to end: a real failing task idles, is warned by email, kept alive, then reaped."""

from __future__ import annotations

import json
import uuid
from email.message import EmailMessage
from pathlib import Path

import psutil

from tests.session_fixture import Job
from tests.smtp_fixture import SmtpServer

OWNER = "ana@example.com"

JOB = """
import os, sys
from pathlib import Path
import interactive
from interactive import vscode

def checkpoint():
    Path(os.environ["HOOK_MARK"]).write_text("checkpointed")

@vscode(ide="none", port=0, control_port=0, debug_port=0, owner="{owner}",
        max_idle_seconds=3, grace_seconds=3, poll_seconds=0.5, on_reap=checkpoint)
def train(lr):
    raise ValueError(f"diverged at lr={{lr}}")

if __name__ == "__main__":
    try:
        train(0.5)
    except interactive.Reaped as exc:
        print("REAPED", exc.saved_edits, flush=True)
        sys.exit(3)
"""


def text_of(message: EmailMessage) -> str:
    body = message.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


def processes_with(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PODCODE_E2E_MARK") == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_idle_session_is_warned_kept_alive_then_reaped(
    job: Job, smtp_server: SmtpServer, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    hook_mark = tmp_path / "hook-ran"
    store = tmp_path / "store"
    job.write("helpers.py", "LR = 0.5\n")
    job.write("job.py", JOB.format(owner=OWNER))
    job.start(env={
        "PODCODE_SMTP_URL": smtp_server.url,
        "PODCODE_MAIL_FROM": "podcode@test.example",
        "PODCODE_STORE": str(store),
        "HOOK_MARK": str(hook_mark),
        "PODCODE_E2E_MARK": marker,
    })
    job.wait_state("waiting")
    job.write("helpers.py", "LR = 0.05\n")  # an edit: activity now, saved at cleanup

    [warning] = smtp_server.wait_for(1, timeout=60)
    assert warning["To"] == OWNER and "is idle" in warning["Subject"]
    assert "podcode keepalive" in text_of(warning)

    status, body = job.api("POST", "/api/keepalive", {"seconds": 4})
    assert status == 200 and body["reap_at"] is not None

    messages = smtp_server.wait_for(3, timeout=60)
    second, final = messages[1], messages[2]
    # the keep-alive cancelled the first warning; a new one came later, then the cleanup
    assert "is idle" in second["Subject"] and second["Subject"] > warning["Subject"]
    assert "cleaned up" in final["Subject"]

    assert job.wait_exit() == 3
    output = job.output()
    assert "REAPED" in output
    saved = output.split("REAPED", 1)[1].split()[0]
    assert saved in text_of(final)
    assert Path(saved, "files", "helpers.py").read_text() == "LR = 0.05\n"
    assert "+LR = 0.05" in Path(saved, "changes.diff").read_text()
    manifest = json.loads(Path(saved, "manifest.json").read_text())
    assert "helpers.py" in manifest["copied"]
    assert hook_mark.read_text() == "checkpointed"
    assert processes_with(marker) == []


def test_a_successful_resume_mails_the_fix_as_a_patch(
    job: Job, smtp_server: SmtpServer, tmp_path: Path
) -> None:
    job.write("helpers.py", "LR = 0.0\n")
    job.write(
        "job.py",
        f"""
        from interactive import vscode
        import helpers

        @vscode(ide="none", port=0, control_port=0, debug_port=0, owner="{OWNER}")
        def train():
            return 1 / helpers.LR

        print("RESULT", train())
        """,
    )
    job.start(env={"PODCODE_SMTP_URL": smtp_server.url, "PODCODE_STORE": str(tmp_path / "s")})
    job.wait_state("waiting")
    job.write("helpers.py", "LR = 0.5\n")  # a constant: bound again, calls nothing
    status, body = job.api("POST", "/api/resume")
    assert (status, body["patched"]) == (202, ["helpers.LR"])
    assert job.wait_exit() == 0, job.output()
    [mail] = smtp_server.wait_for(1, timeout=30)
    assert "resumed and finished: your fix" in mail["Subject"]
    [attachment] = list(mail.iter_attachments())
    assert attachment.get_filename() == "podcode-job.py_train.patch"
    assert "+LR = 0.5" in attachment.get_content()


def test_a_mail_server_that_never_answers_does_not_hold_the_resumed_task(
    job: Job, tmp_path: Path
) -> None:
    """The fix's email goes on a thread of its own: the workflow goes on at once; at exit
    the process waits a bounded time, then abandons the mail in one line, with no asyncio
    "Task was destroyed" noise."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts connections, never says a word
    try:
        job.write("job.py", f"""
            from interactive import vscode

            @vscode(ide="none", port=0, control_port=0, debug_port=0, owner="{OWNER}")
            def train():
                return 1 / 0

            print("RESULT", train(), flush=True)
            print("AFTER THE TASK", flush=True)
            """)
        url = f"smtp://127.0.0.1:{silent.getsockname()[1]}"
        job.start(env={"PODCODE_SMTP_URL": url, "PODCODE_STORE": str(tmp_path / "s")})
        job.wait_state("waiting")
        job.write("job.py", (job.workspace / "job.py").read_text().replace("1 / 0", "2"))
        assert job.api("POST", "/api/resume")[0] == 202
        assert job.wait_exit(60) == 0, job.output()
    finally:
        silent.close()
    out = job.output()
    assert "RESULT 2" in out and "AFTER THE TASK" in out
    assert out.index("AFTER THE TASK") < out.index("still being sent: it is abandoned")
    assert "Task was destroyed" not in out

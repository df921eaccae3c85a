"""The final email lists what coding agents did in the session, escaped in HTML."""

from __future__ import annotations

from vscode_config.mail import MAX_LISTED_ACTIONS, FinalMail, render_final


def test_the_final_email_lists_the_agents_actions() -> None:
    actions = [{"actor": "agent via MCP", "action": f"evaluate in frame 0: a < {i}",
                "at": 1_700_000_000.0, "status": 200} for i in range(MAX_LISTED_ACTIONS + 2)]
    mail = FinalMail(pod="ns/p", task="t.f", idle_since=0.0, reaped_at=60.0, edits_url=None,
                     actions=actions, actions_dropped=1)
    rendered = render_final(mail)
    assert "What a coding agent did in the session" in rendered.text
    assert "... 3 earlier actions not listed" in rendered.text
    assert ("  - 2023-11-14 22:13:20 UTC agent via MCP: evaluate in frame 0: a < 31 (200)"
            in rendered.text.splitlines())
    assert "a &lt; 31 (200)" in rendered.html and "a < 31" not in rendered.html
    quiet = render_final(FinalMail(pod="ns/p", task="t.f", idle_since=0.0, reaped_at=60.0,
                                   edits_url=None))
    assert "coding agent" not in quiet.text and "coding agent" not in quiet.html

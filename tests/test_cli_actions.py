"""``podcode status`` lists what coding agents did in the session, newest last."""

from __future__ import annotations

import time

from interactive.cli.control_cmds import SHOWN_ACTIONS, action_lines


def test_the_newest_actions_are_listed_with_who_when_and_the_answer() -> None:
    now = time.time()
    status = {"actions": [{"actor": "agent via MCP", "action": f"evaluate in frame 0: x + {i}",
                           "at": now - 60, "status": 200} for i in range(SHOWN_ACTIONS + 2)]
              + [{"actor": "agent via MCP", "action": "resume", "at": now, "status": 202}],
              "actions_dropped": 4}
    lines = action_lines(status, now)
    assert lines[0] == ("Agent", "... 7 earlier actions not listed")  # 3 here, 4 dropped
    assert len(lines) == SHOWN_ACTIONS + 1 and {key for key, _ in lines} == {"Agent"}
    when = time.strftime("%H:%M:%S", time.localtime(now))
    assert lines[-1][1] == f"{when} agent via MCP: resume (202)"
    assert lines[1][1].endswith("agent via MCP: evaluate in frame 0: x + 3 (200)")
    assert action_lines({"actions": [], "actions_dropped": 0}, now) == []
    assert action_lines({}, now) == []

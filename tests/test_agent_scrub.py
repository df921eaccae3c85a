"""The one scrubber of secrets (interactive/agent/scrub.py): results, data and log lines."""

from __future__ import annotations

import io
import logging

from interactive.agent.scrub import HIDDEN, Secrets, guard_logging

TOKEN = "tok-0123456789abcdef"


def test_every_string_of_a_result_is_scrubbed_keys_included() -> None:
    secrets = Secrets([TOKEN, "x", None or ""])
    data = {"url": f"http://h/?t={TOKEN}", TOKEN: [1, f"a{TOKEN}b", {"k": TOKEN}]}
    scrubbed = secrets.scrub_data(data)
    assert TOKEN not in repr(scrubbed)
    assert scrubbed == {"url": f"http://h/?t={HIDDEN}", HIDDEN: [1, f"a{HIDDEN}b",
                                                                 {"k": HIDDEN}]}
    assert secrets.scrub("x marks") == "x marks", "short values are not secrets"


def test_a_secret_that_holds_another_is_removed_whole() -> None:
    secrets = Secrets(["abcdef", "abcdefghij"])
    assert secrets.scrub("<abcdefghij>") == f"<{HIDDEN}>"


def test_log_lines_and_their_tracebacks_are_scrubbed() -> None:
    secrets = Secrets()
    logger = logging.getLogger("podcode-test-scrub")
    logger.propagate = False
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    try:
        guard_logging(secrets, logger)
        secrets.add(TOKEN)  # known after the filter was set: still removed
        try:
            raise ValueError(f"refused {TOKEN}")
        except ValueError:
            logger.exception("call with %s failed", TOKEN)
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    assert "ValueError" in written and written.count(HIDDEN) == 2
    assert TOKEN not in written

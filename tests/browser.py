"""What every browser test shares: Debian's chromium, its flags, where screenshots go,
and the marks that skip a test where chromium or code-server is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
"""Without the background-networking flags chromium keeps dialling hosts it cannot reach."""
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
"""Screenshots of the tests (git-ignored); ``make screenshots`` copies the docs' ones."""
MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium"),
]
"""Add ``pytest.mark.codeserver`` where the test also runs code-server."""

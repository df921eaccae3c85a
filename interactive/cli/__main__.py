"""``python -m interactive.cli``."""

from __future__ import annotations

import sys

from interactive.cli import main

sys.exit(main())

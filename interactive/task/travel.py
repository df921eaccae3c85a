"""Settings that travel with a task shipped to another process.

Ray (and anything that ships a task with cloudpickle) runs the decorated function in
a worker started elsewhere: a cluster started by ``ray start`` or by KubeRay has none
of the ``PODCODE_*`` variables set where the job was submitted. The decorator keeps
the ones set where it was applied; the first call in another process sets those the
process does not set itself (the node's own settings win), before podcode decides
whether it is enabled there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

PREFIX = "PODCODE_"


@dataclass(frozen=True)
class ShippedSettings:
    """The ``PODCODE_*`` settings of the process that applied the decorator."""

    pid: int
    settings: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def here(cls) -> ShippedSettings:
        return cls(os.getpid(), {k: v for k, v in os.environ.items() if k.startswith(PREFIX)})

    def missing(self, environ: Mapping[str, str]) -> dict[str, str]:
        """What another process should take: the settings it does not set itself (none
        in the process that applied the decorator)."""
        if os.getpid() == self.pid:
            return {}
        return {k: v for k, v in self.settings.items() if k not in environ}

    def apply_here(self) -> None:
        """Set the missing settings in this process's environment."""
        os.environ.update(self.missing(os.environ))

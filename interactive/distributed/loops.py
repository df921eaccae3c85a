"""Whether a failed rank's task runs inside a framework's training loop, which a resume cannot mend.

``@vscode`` on a step (Lightning's ``training_step``, a model's ``forward``, a
``compute_loss`` that ``transformers.Trainer`` calls) is called by a loop whose
distributed wrapper (``DistributedDataParallel``, FSDP) was built on the process
group before the call. The failure breaks that group so that no rank hangs; a
resume calls the step again on a new group, but the loop's wrapper still holds
the old one, and its next collective fails outside the task. The session says
so at once, and where ``@vscode`` goes instead.
"""

from __future__ import annotations

import logging
import sys
from types import FrameType

from interactive.base.errors import add_note

log = logging.getLogger(__name__)

LOOPS = (
    # (module prefix, what to call it, where @vscode goes instead)
    ("lightning.pytorch.", "Lightning's training loop", "the function that calls trainer.fit"),
    ("pytorch_lightning.", "Lightning's training loop", "the function that calls trainer.fit"),
    ("lightning.fabric.", "Lightning Fabric's wrapped model", "the function that runs the loop"),
    ("transformers.trainer", "transformers.Trainer's training loop",
     "the function that calls trainer.train"),
    ("torch.nn.parallel.distributed", "DistributedDataParallel's forward",
     "the function that builds the model and runs the loop"),
    ("torch.distributed.fsdp.", "FSDP's forward",
     "the function that builds the model and runs the loop"),
)
DEPTH = 200
"""How many callers are looked at, at most."""


def loop_around(frame: FrameType | None) -> tuple[str, str] | None:
    """The framework loop among ``frame`` and its callers, as (its name, where ``@vscode``
    goes instead); None when there is none. Pure: reads the frames' module names only."""
    for _ in range(DEPTH):
        if frame is None:
            return None
        module = frame.f_globals.get("__name__", "")
        for prefix, name, instead in LOOPS:
            if isinstance(module, str) and module.startswith(prefix):
                return name, instead
        frame = frame.f_back
    return None


def warn_if_inside(error: BaseException) -> bool:
    """Say in ``error`` (what the session shows) and the log that the failed task runs inside
    a training loop whose wrapper holds the broken group; True when it does. Called as the
    session opens, on the thread of the decorated call: its callers are on this stack."""
    found = loop_around(sys._getframe(1))
    if found is None:
        return False
    name, instead = found
    why = (f"podcode: this task runs inside {name}, whose distributed wrapper was built on the "
           f"process group this failure breaks so that no rank hangs: a resume calls the task "
           f"again, but the loop goes on with the broken group and fails. Abort, and put "
           f"@vscode on {instead}: its re-run builds the wrapper again")
    add_note(error, why)
    log.warning("%s", why)
    return True

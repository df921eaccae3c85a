"""The task's process tree as NVML names it: by the host's process ids, where visible.

NVML reports the processes on a GPU by their ids in the host's PID namespace.
A process in the host's namespace (bare metal, a VM, a pod with
``hostPID: true``) sees those ids itself. A container with a PID namespace of
its own sees other ids; when its ``/proc`` belongs to an outer namespace (the
host's ``/proc`` mounted in), ``NSpid`` in ``/proc/self/status`` lists this
process's id there first ("NSpid: 48213 7"), and the tree is read in that
view. Otherwise (a container's own ``/proc``, "NSpid: 7") the host's ids
cannot be known: :meth:`ProcessView.own_pid` answers None.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT_PID_NAMESPACE_INODE = 0xEFFFFFFC
"""The inode of the initial PID namespace (``PROC_PID_INIT_INO`` in the kernel)."""


def in_root_namespace(proc: Path = Path("/proc")) -> bool:
    """Whether this process lives in the host's (initial) PID namespace."""
    try:
        return os.stat(proc / "self" / "ns" / "pid").st_ino == ROOT_PID_NAMESPACE_INODE
    except OSError:
        return False


def nspid(status: Path) -> list[int]:
    """The ``NSpid`` line of a ``/proc/<pid>/status`` file: the process's id in each PID
    namespace it belongs to, from the namespace of that ``/proc`` inwards."""
    try:
        text = status.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            return [int(part) for part in line.split()[1:]]
    return []


def _parent(stat: Path) -> int | None:
    try:
        text = stat.read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 1:].split()  # the name in parentheses may hold spaces
    return int(fields[1]) if len(fields) > 1 else None


@dataclass
class ProcessView:
    """This process and its descendants, by the ids NVML uses."""

    proc: Path = Path("/proc")
    root_namespace: Callable[[], bool] | None = None
    """Whether this process is in the host's PID namespace (default: ask the kernel)."""
    _reason: str = field(default="", init=False)

    def own_pid(self) -> int | None:
        """This process's id as NVML knows it; None when it cannot be known here."""
        chain = nspid(self.proc / "self" / "status")
        if (self.root_namespace or (lambda: in_root_namespace(self.proc)))():
            return chain[0] if chain else os.getpid()
        if len(chain) > 1:  # this /proc belongs to an outer namespace: the host's
            return chain[0]
        self._reason = (
            "this container has a PID namespace of its own and its /proc shows only "
            "that namespace's process ids, not the host's that NVML reports"
        )
        return None

    @property
    def reason(self) -> str:
        """Why :meth:`own_pid` answered None."""
        return self._reason

    def tree(self, root: int) -> set[int]:
        """``root`` and its descendants, as this ``/proc`` shows them."""
        children: dict[int, list[int]] = {}
        try:
            entries = [entry for entry in os.listdir(self.proc) if entry.isdigit()]
        except OSError:
            return {root}
        for entry in entries:
            parent = _parent(self.proc / entry / "stat")
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
        found, stack = {root}, [root]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in found:
                    found.add(child)
                    stack.append(child)
        return found

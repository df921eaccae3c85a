"""Stand-ins for the pod and the mailer, shared by the reaper's tests (monitor, cleanup)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vscode_config.mail import FinalMail, WarningMail


@dataclass
class FakePod:
    name: str = "train-abc"
    namespace: str = "ml"
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    broken: bool = False

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        if self.broken:
            raise RuntimeError("API down")

    def set_state(self, state: str) -> None:
        self._record("state", state)

    def set_idle(self, idle_since: float | None, reap_at: float | None) -> None:
        self._record("idle", idle_since, reap_at)

    def event(self, reason: str, message: str, type: str = "Normal") -> None:
        self._record("event", reason, message)

    def owner_annotation(self) -> str | None:
        return "pod-owner@example.com"

    def delete(self) -> bool:
        self._record("delete")
        return True


@dataclass
class FakeNotifier:
    warnings: list[WarningMail] = field(default_factory=list)
    finals: list[FinalMail] = field(default_factory=list)

    async def send_warning(self, mail: WarningMail) -> bool:
        self.warnings.append(mail)
        return True

    async def send_final(self, mail: FinalMail) -> bool:
        self.finals.append(mail)
        return True

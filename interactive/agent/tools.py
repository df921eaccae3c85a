"""What each tool of ``podcode mcp`` does, over :class:`~interactive.agent.reach.Reach` and
the control-API client: plain Python in, a :class:`Reply` out (text within the bound, the
figures a cell drew). The MCP server (:mod:`interactive.agent.server`) registers them,
scrubs every reply and turns it into MCP content.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from interactive.agent import bounds, filetext, outcome, patch, ranks
from interactive.agent.reach import Reach, Reached, local_id
from interactive.base.control_client import ControlError, ControlRefused, ControlUnreachable
from interactive.base.errors import PodcodeError

MAX_WAIT_SECONDS = 600.0
"""The longest ``resume`` waits for the task's outcome."""
MAX_EVALUATE_SECONDS = 300.0
MAX_IMAGES = 4
MAX_IMAGE_BYTES = 2 * 1024 * 1024
"""A cell's figures come back as images, at most this many of at most this size (base64);
the others are named in the text."""
CHANGES = ("evaluate", "write_file", "apply_diff", "resume", "abort")
"""The tools that change the session (run code, write files, end the wait): refused in
read-only mode."""
READ_ONLY_NOTE = (
    "refused: this podcode MCP server runs read-only (podcode mcp --read-only), so it does "
    "not run code, write files, resume or abort. Ask the engineer to allow it: register the "
    "server without --read-only (claude mcp add podcode -- podcode mcp), or do this step "
    "yourself in the session's IDE or with the podcode CLI.")


@dataclass
class Reply:
    """A tool's answer: text (JSON or prose), images (``(mime, base64)``), and whether it
    is an error the agent should read as such."""

    text: str
    images: list[tuple[str, str]] = field(default_factory=list)
    error: bool = False


def data_reply(data: Any) -> Reply:
    return Reply(bounds.bounded_json(data))


def refused(message: str) -> Reply:
    return Reply(bounds.clip(message), error=True)


class Tools:
    """The tools, bound to the sessions ``reach`` finds."""

    def __init__(self, reach: Reach, *, read_only: bool = False,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.reach = reach
        self.read_only = read_only
        self.clock = clock
        self.sleep = sleep

    def allowed(self, name: str) -> Reply | None:
        """None when tool ``name`` may run now; else the refusal to answer with."""
        return refused(READ_ONLY_NOTE) if self.read_only and name in CHANGES else None

    # -- finding ----------------------------------------------------------------------
    def list_sessions(self) -> Reply:
        sessions = []
        now = self.clock()
        by_port = self.rank_sessions()
        for listed in self.reach.sessions():
            details = {k: v for k, v in listed.details.items() if v is not None}
            started = details.pop("started", None)
            if isinstance(started, (int, float)):
                details["age_seconds"] = round(max(0.0, now - started))
            reap_at = details.pop("reap_at", None)
            if isinstance(reap_at, (int, float)):
                details["cleanup_in_seconds"] = round(max(0.0, reap_at - now))
            entry: dict[str, Any] = {"session": listed.id, "where": listed.where,
                                     "task": listed.task, "state": listed.state,
                                     "open": listed.open, **details}
            if listed.open and listed.id.startswith("local/"):
                entry.update(self._status_fields(listed.id, by_port))
            sessions.append(entry)
        answer: dict[str, Any] = {"sessions": sessions}
        if self.reach.cluster_note:
            answer["note"] = self.reach.cluster_note
        if not sessions:
            answer["hint"] = ("no session: a session opens when a task decorated with @vscode "
                              "fails (PODCODE_ENABLE=1 on a laptop, or in a Kubernetes pod)")
        return data_reply(answer)

    def _status_fields(self, session: str, by_port: Mapping[int, str]) -> dict[str, Any]:
        try:
            status = self.reach.reach(session).client.status()
        except ControlError as exc:
            return {"status_error": str(exc)}
        return self.summary(status, by_port)

    def rank_sessions(self) -> dict[int, str]:
        """The open sessions of this machine by their debugger's port: how a rank's
        status, which names the pod's other ranks by their debugger, leads to their
        sessions."""
        return {found.record.debug_port: local_id(found) for found in self.reach.local()
                if found.open and found.record.debug_port is not None}

    def summary(self, status: Mapping[str, Any],
                by_port: Mapping[int, str] | None = None) -> dict[str, Any]:
        """What an agent needs of ``GET /api/status``: state, error, attempt, idle time and
        the cleanup countdown; for a rank of a distributed job, the pod's ranks, which of
        them failed on their own and which only stopped because of it
        (:func:`~interactive.agent.ranks.blame`; ``by_port``: the sessions of this
        machine by their debugger's port)."""
        now = self.clock()
        cleanup = status.get("cleanup_at")
        kept = {k: status.get(k) for k in ("state", "error", "attempt", "idle_seconds",
                                           "owner", "ide", "notes", "rank", "ranks")
                if status.get(k) not in (None, [], {})}
        if isinstance(cleanup, (int, float)):
            kept["cleanup_in_seconds"] = round(max(0.0, cleanup - now))
        kept.update(ranks.blame(status, by_port))
        return kept

    def session_status(self, session: str | None) -> Reply:
        reached = self.reach.reach(session)
        status = reached.client.status()
        by_port = self.rank_sessions() if ranks.everyone(status) else None
        return data_reply({"session": reached.id, **self.summary(status, by_port)})

    # -- reading the failure ----------------------------------------------------------
    def describe_failure(self, session: str | None) -> Reply:
        reached = self.reach.reach(session)
        client = reached.client
        status = client.status()
        failure = client.frames()
        by_port = self.rank_sessions() if ranks.everyone(status) else None
        answer: dict[str, Any] = {"session": reached.id, **self.summary(status, by_port),
                                  "exception": failure.get("exception"),
                                  "frames": failure.get("frames")}
        if failure.get("frames"):
            index = failing_frame(failure)
            answer["failing_frame"] = index
            answer["failing_frame_locals"] = client.frame_locals(index).get("locals")
        answer["next"] = ranks.pointer(status, by_port) or (
            "evaluate expressions in a frame (evaluate), read the code (read_file, "
            "search_code), fix it (apply_diff), then resume")
        return data_reply(answer)

    def list_frames(self, session: str | None) -> Reply:
        reached = self.reach.reach(session)
        return data_reply({"session": reached.id, **reached.client.frames()})

    def frame_locals(self, session: str | None, frame: int | None) -> Reply:
        reached = self.reach.reach(session)
        index = failing_frame(reached.client.frames()) if frame is None else frame
        return data_reply({"session": reached.id, **reached.client.frame_locals(index)})

    def evaluate(self, session: str | None, code: str, frame: int | None,
                 timeout: float) -> Reply:
        reached = self.reach.reach(session)
        index = failing_frame(reached.client.frames()) if frame is None else frame
        seconds = min(max(timeout, 1.0), MAX_EVALUATE_SECONDS)
        return cell_reply(reached.client.evaluate(code, frame=index, timeout=seconds))

    # -- the code ---------------------------------------------------------------------
    def read_file(self, session: str | None, path: str, start: int | None,
                  end: int | None) -> Reply:
        answer = self.reach.reach(session).client.read_file(path, start, end)
        text = answer.get("text")
        if not isinstance(text, str):
            return data_reply(answer)
        total = answer.get("total_lines")
        head = (f"{answer.get('path', path)}: lines {answer.get('start')}-{answer.get('end')}"
                f"{f' of {total}' if isinstance(total, int) else ''}")
        note = f"\n[{answer['note']}]" if answer.get("note") else ""
        return Reply(bounds.clip(f"{head}\n{text}{note}"))

    def search_code(self, session: str | None, pattern: str, glob: str | None) -> Reply:
        answer = self.reach.reach(session).client.search(pattern, glob)
        matches = answer.get("matches") or []
        rows = [f"{m.get('path')}:{m.get('line')}: {m.get('text')}" for m in matches
                if isinstance(m, Mapping)]
        tail = ([f"[cut: {answer.get('note') or 'more matches not shown'}]"]
                if answer.get("truncated") else [])
        return Reply(bounds.clip("\n".join(rows + tail) or f"no match for {pattern!r}"))

    def write_file(self, session: str | None, path: str, content: str) -> Reply:
        reached = self.reach.reach(session)
        answer = reached.client.push_files({path: content.encode("utf-8")})
        return data_reply({"written": [path], "session": reached.id, "answer": answer,
                           "next": "resume runs the task again with the edited code"})

    def apply_diff(self, session: str | None, diff: str) -> Reply:
        reached = self.reach.reach(session)
        try:
            patches = patch.parse(diff)
            written = {p.path: patch.apply(p, self._current(reached, p.path)).encode("utf-8")
                       for p in patches}
        except (patch.PatchRefused, ValueError) as exc:
            return refused(f"the diff was not applied (no file changed): {exc}")
        reached.client.push_files(written)
        return data_reply({"written": sorted(written), "session": reached.id,
                           "next": "resume runs the task again with the edited code; "
                                   "show_edits shows every change since the failure"})

    def _current(self, reached: Reached, path: str) -> str | None:
        client = reached.client
        try:
            return filetext.whole_text(lambda start: client.read_file(path, start))
        except ControlRefused as exc:
            if exc.status == 404:
                return None
            raise

    def show_edits(self, session: str | None) -> Reply:
        reached = self.reach.reach(session)
        return data_reply({"session": reached.id, **reached.client.edits()})

    # -- steering ---------------------------------------------------------------------
    def resume(self, session: str | None, wait_seconds: float) -> Reply:
        reached = self.reach.reach(session)
        client = reached.client
        status = client.status()
        before = status.get("attempt")
        peers = self._waiting_peers(reached, status)
        planned = client.resume()
        bound = min(max(wait_seconds, 0.0), MAX_WAIT_SECONDS)
        result = self._outcome(reached, before, bound)
        answer: dict[str, Any] = {"session": reached.id, "outcome": result.kind,
                                  "waited_seconds": round(result.waited, 1),
                                  "resume": planned, "status": self.summary(result.status)}
        left = bound - result.waited
        if peers:  # the session forwarded the resume to the pod's other ranks
            answer["ranks"] = [self._peer_outcome(rank, peer, attempt, left)
                               for rank, peer, attempt in peers]
            for stale in ("ranks", "failed_ranks", "stopped_ranks"):  # as before the resume
                answer["status"].pop(stale, None)
        if result.kind == outcome.FAILED_AGAIN:
            answer["new_failure"] = _failure_or_why(client)
            answer["next"] = "describe_failure shows the new failure's frames and locals"
        elif result.kind == outcome.RUNNING:
            answer["next"] = ("the task still runs: session_status says when it returned "
                              "(the session ends) or failed again (state waiting, a new "
                              "attempt)")
        elif result.kind == outcome.RETURNED:
            answer["next"] = "the task returned: the workflow goes on with the edited code"
        return data_reply(answer)

    def _outcome(self, reached: Reached, before: object, bound: float) -> outcome.Outcome:
        client = reached.client

        def poll() -> Mapping[str, Any] | None:
            try:
                return client.status()
            except ControlUnreachable:
                return None

        return outcome.wait(before if isinstance(before, int) else None, poll,
                            lambda: self.reach.ended_state(reached), max(bound, 0.0),
                            sleep=self.sleep)

    def _waiting_peers(self, reached: Reached,
                       status: Mapping[str, Any]) -> list[tuple[Any, Reached, object]]:
        """The pod's other ranks that wait in a session this machine reaches: (rank, its
        session, its attempt). A resume reaches them through the session itself."""
        others = [one for one in ranks.everyone(status)
                  if not one["this"] and one.get("state") in ranks.WAITING]
        if not others or reached.record_path is None:
            return []
        by_port = self.rank_sessions()
        found = []
        for one in others:
            peer_id = by_port.get(ranks.debug_port(one) or -1)
            if peer_id is None or peer_id == reached.id:
                continue
            try:
                peer = self.reach.reach(peer_id)
                found.append((one.get("rank"), peer, peer.client.status().get("attempt")))
            except PodcodeError:
                continue
        return found

    def _peer_outcome(self, rank: object, peer: Reached, attempt: object,
                      bound: float) -> dict[str, Any]:
        result = self._outcome(peer, attempt, bound)
        told: dict[str, Any] = {"rank": rank, "session": peer.id, "outcome": result.kind}
        if result.kind == outcome.FAILED_AGAIN:
            told["error"] = result.status.get("error")
        return told

    def abort(self, session: str | None) -> Reply:
        reached = self.reach.reach(session)
        return data_reply({"session": reached.id, "aborted": True, **reached.client.abort(),
                           "note": "the task raises its original exception"})

    def keepalive(self, session: str | None, seconds: float) -> Reply:
        reached = self.reach.reach(session)
        answer = reached.client.keepalive(seconds)
        return data_reply({"session": reached.id, **answer})


def failing_frame(failure: Mapping[str, Any]) -> int:
    """The frame the debugger shows first (the task's own code where it failed; 0, the
    innermost, when the session does not say)."""
    chosen = failure.get("failed_frame")
    return chosen if isinstance(chosen, int) and chosen >= 0 else 0


def _failure_or_why(client: Any) -> Any:
    try:
        failure = client.frames()
    except ControlError as exc:
        return {"error": str(exc)}
    return {"exception": failure.get("exception"), "frames": failure.get("frames")}


def cell_reply(answer: Mapping[str, Any]) -> Reply:
    """A cell's answer (``{"outputs", "ok"}``): its text outputs joined, its figures as
    images; an error output makes the reply an error."""
    texts: list[str] = []
    images: list[tuple[str, str]] = []
    for output in answer.get("outputs") or []:
        kind = output.get("type")
        if kind == "stream":
            texts.append(str(output.get("text", "")))
        elif kind == "display":
            data = output.get("data") or {}
            for mime in ("image/png", "image/jpeg", "image/svg+xml"):
                if isinstance(data.get(mime), str) and mime != "image/svg+xml":
                    images.append((mime, data[mime]))
            if "text/plain" in data and not any(m in data for m in ("image/png", "image/jpeg")):
                texts.append(str(data["text/plain"]) + "\n")
        elif kind == "error":
            texts.append(str(output.get("traceback") or
                             f"{output.get('ename')}: {output.get('evalue')}"))
    if len(images) > MAX_IMAGES or any(len(data) > MAX_IMAGE_BYTES for _, data in images):
        kept = [(m, d) for m, d in images if len(d) <= MAX_IMAGE_BYTES][:MAX_IMAGES]
        texts.append(f"\n[{len(images) - len(kept)} figures not shown: at most {MAX_IMAGES} "
                     f"of at most {MAX_IMAGE_BYTES // 1024} KiB each come back]")
        images = kept
    ok = answer.get("ok", True) is not False
    text = "".join(texts).strip() or ("(no output)" if ok else "(failed, no output)")
    return Reply(bounds.clip(text), images, error=not ok)

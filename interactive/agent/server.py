"""``podcode mcp``: the MCP server (the official SDK's :class:`mcp.server.MCPServer`, over
stdio) whose tools, resources and prompt let a coding agent diagnose a failed task, fix it
and resume it, through :class:`~interactive.agent.tools.Tools`.

Every tool runs in the SDK's worker thread (the control-API client blocks), never raises
into the SDK (an error is an answer the agent reads), and every byte it returns, error
text included, passes :meth:`Secrets.scrub <interactive.agent.scrub.Secrets.scrub>`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, ToolAnnotations
from pydantic import Field

from interactive.agent.reach import Reach
from interactive.agent.scrub import Secrets
from interactive.agent.tools import Reply, Tools, refused
from interactive.base.errors import PodcodeError

log = logging.getLogger(__name__)

NAME = "podcode"
INSTRUCTIONS = """\
podcode keeps a failed Python task alive in a debug session (on this machine or in a \
Kubernetes pod): its exception, frames and locals, its code. Start with list_sessions, \
then describe_failure. Evaluate expressions in the failing frame (evaluate) to test a \
hypothesis, read and search the task's code, fix it with apply_diff (or write_file), \
then resume: the task runs again with the fix and resume says whether it returned or \
failed again. Every action is recorded in the session and visible to the engineer."""

Session = Annotated[str | None, Field(
    description="the session's id from list_sessions (local/..., pod/NAMESPACE/POD); omit it "
                "when only one session is open")]
Frame = Annotated[int | None, Field(ge=0, description=(
    "the frame's index from list_frames (0: the innermost, where the exception was raised); "
    "omit it for the failing frame of the task's own code, the one the debugger shows"))]

READS = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
ENDS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


def to_result(reply: Reply, secrets: Secrets) -> CallToolResult:
    """``reply`` as MCP content, every string in it scrubbed."""
    content: list[ContentBlock] = [TextContent(type="text", text=secrets.scrub(reply.text))]
    content += [ImageContent(type="image", data=secrets.scrub(data), mime_type=mime)
                for mime, data in reply.images]
    return CallToolResult(content=content, is_error=reply.error)


class Server:
    """The tools registered on an :class:`MCPServer`."""

    def __init__(self, tools: Tools, secrets: Secrets) -> None:
        self.tools = tools
        self.secrets = secrets
        self.mcp: MCPServer[Any] = MCPServer(NAME, instructions=INSTRUCTIONS,
                                             log_level="WARNING")
        self._register()

    def answer(self, name: str, call: Callable[[], Reply]) -> CallToolResult:
        """Run tool ``name``'s ``call`` (unless read-only mode refuses it); what it returns
        or raises, as a scrubbed result."""
        reply = self.tools.allowed(name)
        if reply is None:
            try:
                reply = call()
            except PodcodeError as exc:
                reply = refused(str(exc))
            except Exception as exc:
                log.exception("tool %s failed", name)
                reply = refused(f"{name} failed: {type(exc).__name__}: {exc}")
        return to_result(reply, self.secrets)

    def text(self, call: Callable[[], Reply]) -> str:
        """A resource's or prompt's text: ``call``'s reply, scrubbed (never raises)."""
        try:
            return self.secrets.scrub(call().text)
        except Exception as exc:
            return self.secrets.scrub(f"not available: {exc}")

    def _register(self) -> None:  # noqa: C901 - one short closure per tool
        mcp, tools, answer = self.mcp, self.tools, self.answer

        @mcp.tool(annotations=READS)
        def list_sessions() -> CallToolResult:
            """The podcode debug sessions this server can reach: on this machine and in the
            Kubernetes namespace it was started for. Each with its id (pass it as `session`
            to the other tools), task, state, error, attempt, idle seconds and when it will
            be cleaned up, and for a distributed job its ranks and which one failed."""
            return answer("list_sessions", tools.list_sessions)

        @mcp.tool(annotations=READS)
        def session_status(session: Session = None) -> CallToolResult:
            """One session's state now (waiting, running, done...), its error, attempt,
            idle seconds and cleanup countdown."""
            return answer("session_status", lambda: tools.session_status(session))

        @mcp.tool(annotations=READS)
        def describe_failure(session: Session = None) -> CallToolResult:
            """Why the task failed: the exception, its traceback with source lines, the
            frames (innermost first) and the local variables of the failing frame of the
            task's own code, each summarised (type, shape, dtype, length, a DataFrame's
            head). Start here."""
            return answer("describe_failure", lambda: tools.describe_failure(session))

        @mcp.tool(annotations=READS)
        def list_frames(session: Session = None) -> CallToolResult:
            """The failed call's frames, innermost first: index, function, file, line and
            source line. Use an index as `frame` for frame_locals and evaluate."""
            return answer("list_frames", lambda: tools.list_frames(session))

        @mcp.tool(annotations=READS)
        def frame_locals(session: Session = None, frame: Frame = None) -> CallToolResult:
            """The local variables of one frame, each summarised within a bound (type,
            shape, dtype, length, a DataFrame's head)."""
            return answer("frame_locals", lambda: tools.frame_locals(session, frame))

        @mcp.tool(annotations=WRITES)
        def evaluate(
            code: Annotated[str, Field(description="a Python expression, or a cell of "
                                       "statements whose last expression is shown")],
            session: Session = None, frame: Frame = None,
            timeout: Annotated[float, Field(gt=0, le=300, description="seconds before the "
                                            "cell is interrupted")] = 30.0,
        ) -> CallToolResult:
            """Run Python in a frame of the failed task, as a notebook cell: its locals and
            globals are there (df, model, batch...). Prints and the last expression's value
            come back as text, matplotlib figures as images. Assignments persist between
            calls. Runs the task's own Python: prefer reading over changing state."""
            return answer("evaluate", lambda: tools.evaluate(session, code, frame, timeout))

        @mcp.tool(annotations=READS)
        def read_file(
            path: Annotated[str, Field(description="relative to the task's workspace, e.g. "
                                       "jobs/train.py (tracebacks name the files)")],
            session: Session = None,
            start: Annotated[int | None, Field(ge=1, description="first line")] = None,
            end: Annotated[int | None, Field(ge=1, description="last line")] = None,
        ) -> CallToolResult:
            """A text file of the task's workspace as the session has it now (edits
            included), lines numbered; long files come in pages (start, end)."""
            return answer("read_file", lambda: tools.read_file(session, path, start, end))

        @mcp.tool(annotations=READS)
        def search_code(
            pattern: Annotated[str, Field(description="a Python regular expression")],
            session: Session = None,
            glob: Annotated[str | None, Field(description="only files matching this glob, "
                                              "e.g. **/*.py")] = None,
        ) -> CallToolResult:
            """Lines of the workspace's text files that match `pattern`: path, line number
            and text, bounded."""
            return answer("search_code", lambda: tools.search_code(session, pattern, glob))

        @mcp.tool(annotations=WRITES)
        def write_file(
            path: Annotated[str, Field(description="relative to the task's workspace")],
            content: Annotated[str, Field(description="the file's whole new text")],
            session: Session = None,
        ) -> CallToolResult:
            """Write a whole file into the session's workspace (the engineer sees it in the
            session's IDE and in show_edits). For a change to an existing file prefer
            apply_diff."""
            return answer("write_file", lambda: tools.write_file(session, path, content))

        @mcp.tool(annotations=WRITES)
        def apply_diff(
            diff: Annotated[str, Field(description="a unified diff (--- a/PATH, +++ b/PATH, "
                                       "@@ hunks), paths relative to the workspace")],
            session: Session = None,
        ) -> CallToolResult:
            """Apply a unified diff to the session's files, all or nothing: every hunk is
            checked against the files as they are now; a diff that does not apply changes
            nothing and the answer names the hunk and the line that differs."""
            return answer("apply_diff", lambda: tools.apply_diff(session, diff))

        @mcp.tool(annotations=READS)
        def show_edits(session: Session = None) -> CallToolResult:
            """Every change made to the workspace since the task failed (the engineer's and
            yours), as a unified diff."""
            return answer("show_edits", lambda: tools.show_edits(session))

        @mcp.tool(annotations=ENDS)
        def resume(
            session: Session = None,
            wait_seconds: Annotated[float, Field(ge=0, le=600, description="how long to wait "
                                                 "for the outcome")] = 120.0,
        ) -> CallToolResult:
            """Run the task again with the edited code (the changed functions are patched
            in place, the task is called with its original inputs) and wait for the
            outcome: returned, failed again (with the new failure), or still running."""
            return answer("resume", lambda: tools.resume(session, wait_seconds))

        @mcp.tool(annotations=ENDS)
        def abort(session: Session = None) -> CallToolResult:
            """Give up: the task raises its original exception and the session ends. Only
            when the engineer asked for it."""
            return answer("abort", lambda: tools.abort(session))

        @mcp.tool(annotations=WRITES)
        def keepalive(
            session: Session = None,
            seconds: Annotated[float, Field(gt=0, le=604800, description="how long to keep "
                                            "the session from idle cleanup")] = 3600.0,
        ) -> CallToolResult:
            """Postpone the idle cleanup of the session (it frees its GPU when idle)."""
            return answer("keepalive", lambda: tools.keepalive(session, seconds))

        @mcp.resource("podcode://failure", name="failure", mime_type="application/json",
                      description="the failure report of the open session (describe_failure)")
        def failure() -> str:
            return self.text(lambda: tools.describe_failure(None))

        @mcp.resource("podcode://edits", name="edits", mime_type="application/json",
                      description="the edits made in the open session (show_edits)")
        def edits() -> str:
            return self.text(lambda: tools.show_edits(None))

        @mcp.prompt(name="fix_failed_task", title="Diagnose, fix and resume a failed task")
        def fix_failed_task(session: str = "", task: str = "") -> str:
            """Walk through diagnosing a failed task, fixing it and resuming it."""
            return self.secrets.scrub(walkthrough(session, task, tools.read_only))


def walkthrough(session: str, task: str, read_only: bool) -> str:
    """The prompt's text."""
    which = f"session {session}" if session else "the session (list_sessions finds it)"
    what = f" of task {task}" if task else ""
    steps = [
        f"A task{what} failed and waits in a podcode debug session: {which}.",
        "1. Diagnose: describe_failure; then test each hypothesis with evaluate in the "
        "failing frame (columns, shapes, dtypes, values) rather than guessing. Read the code "
        "around the failing line with read_file; search_code finds definitions and uses.",
        "2. Say what is wrong and why, with the evidence from the session.",
    ]
    if read_only:
        steps.append("3. This server is read-only: propose the fix as a unified diff and "
                     "stop; the engineer applies it and resumes.")
    else:
        steps += [
            "3. Fix: apply_diff with a minimal unified diff against the files as read_file "
            "shows them now; show_edits to check.",
            "4. Resume, and report what the re-run did: returned, or failed again (then "
            "start again at 1 with the new failure). Never abort unless the engineer asks.",
        ]
    return "\n".join(steps)


def build(reach: Reach, secrets: Secrets, read_only: bool) -> Server:
    return Server(Tools(reach, read_only=read_only), secrets)

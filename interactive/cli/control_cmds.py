"""``podcode status | resume | keepalive | abort [POD]``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from interactive.base.record import GONE
from interactive.cli.choose import SessionGone
from interactive.cli.entry import debugger_address, ide_notes
from interactive.cli.errors import CliError, ControlConflict, Exit
from interactive.cli.output import clock_time, duration, fields, iso, until
from interactive.cli.target import Target, open_target
from interactive.cli.terminal import Console


def _status_lines(target: Target, status: dict[str, Any], now: float) -> str:
    reap_at, cleanup_at = status.get("reap_at"), status.get("cleanup_at")
    gpu = status.get("gpu_utilization")
    pairs = [
        ("Session", target.label),
        ("Task", str(status.get("task") or "-")),
        ("State", str(status.get("state") or "-")),
        ("Error", str(status.get("error") or "-")),
        ("Attempt", str(status.get("attempt", "-"))),
        ("Idle", duration(float(status.get("idle_seconds") or 0))),
        ("Cleanup", _cleanup(reap_at, cleanup_at, now)),
        ("Owner", str(status.get("owner") or "-")),
        ("GPU", "-" if gpu is None else f"{gpu:.0f}%"),
        ("IDE", _ide(status)),
        ("Debug", debugger_line(target)),
        ("Code", f"{target.record.workspace} (edit there; your own checkout: podcode resume "
                 "--push FILE)" if target.record.workspace else "-"),
        ("SSH", f"port {target.record.ssh_port} (podcode ssh-config)"
         if target.record.ssh_port else "none"),
    ]
    pairs += _rank_lines(status)
    pairs += _job_lines(status)
    pairs += [("Note", str(note)) for note in status.get("notes") or []]
    pairs += action_lines(status, now)
    return fields(pairs)


SHOWN_ACTIONS = 10
"""The newest actions of agents ``podcode status`` lists (``-o json``: all the session
keeps)."""


def action_lines(status: dict[str, Any], now: float) -> list[tuple[str, str]]:
    """What agents did in the session, newest last: ``Agent: 12:03:04 agent via MCP:
    resume (202)``, and how many earlier ones are not listed."""
    actions = [a for a in status.get("actions") or [] if isinstance(a, dict)]
    dropped = status.get("actions_dropped")
    earlier = max(0, len(actions) - SHOWN_ACTIONS) + (dropped if isinstance(dropped, int) else 0)
    lines = []
    if earlier > 0:
        lines.append(("Agent", f"... {earlier} earlier actions not listed"))
    for action in actions[-SHOWN_ACTIONS:]:
        at = action.get("at")
        when = clock_time(at, now) if isinstance(at, (int, float)) else "-"
        answered = f" ({action['status']})" if action.get("status") is not None else ""
        lines.append(("Agent", f"{when} {action.get('actor', '?')}: "
                               f"{action.get('action', '?')}{answered}"))
    return lines


def _ide(status: dict[str, Any]) -> str:
    """``up``, ``restarting``, ``down``; before it serves, whether it is being installed or
    a note says why there is none."""
    if status.get("ide"):
        return str(status["ide"])
    notes = " ".join(ide_notes(status))
    if "installing it" in notes:
        return "installing (see the notes)"
    return "none (see the notes)" if notes else "none"


def debugger_line(target: Target) -> str:
    """Where desktop VS Code attaches: here, or (a pod) through ``podcode debug``."""
    record = target.record
    if target.info is not None:
        return (f"port {record.debug_port or '-'} in the pod (podcode debug "
                f"{target.info.pod} -n {target.info.namespace} forwards it)")
    return debugger_address(record) or "-"


def _cleanup(reap_at: Any, cleanup_at: Any, now: float) -> str:
    """The cleanup time: set by a warning, else when it comes if the session stays idle."""
    if isinstance(reap_at, (int, float)):
        return f"{iso(reap_at)} ({until(reap_at, now)})"
    if isinstance(cleanup_at, (int, float)):
        return f"{iso(cleanup_at)} ({until(cleanup_at, now)}) if nobody works in it until then"
    return "never (no idle limit)"


def _rank_lines(status: dict[str, Any]) -> list[tuple[str, str]]:
    """A distributed task: this rank, and the state of the pod's other local ranks."""
    rank = status.get("rank")
    if not isinstance(rank, dict):
        return []
    lines = [
        ("Rank", f"{rank.get('rank')}/{rank.get('world_size')} (local {rank.get('local_rank')})")
    ]
    for peer in status.get("ranks") or []:
        error = f": {peer['error']}" if peer.get("error") else ""
        lines.append((f"Local rank {peer.get('local_rank')}", f"{peer.get('state')}{error}"))
    return lines


def _job_lines(status: dict[str, Any]) -> list[tuple[str, str]]:
    """A rank of a job over several pods: where the job's one session is (this pod, or
    the pod whose IDE to open), which rank failed on which pod, and the generation (one
    per bug: a resume starts the next)."""
    job = status.get("job")
    if not isinstance(job, dict):
        return []
    pod = job.get("session_pod") or "?"
    where = (f"session on pod {pod} (this pod serves it)" if job.get("serves_session")
             else f"session on pod {pod}: open the IDE there")
    error = f": {job['error']}" if job.get("error") else ""
    command = f" (command: {job['command']})" if job.get("command") else ""
    return [
        ("Job", where),
        ("Failed", f"rank {job.get('failed_rank', '?')} on pod {job.get('failed_pod') or '?'}"
                   f"{error}"),
        ("Generation", f"{job.get('generation', '?')}{command}"),
    ]


def _gone_lines(gone: SessionGone) -> str:
    found = gone.found
    when = found.data.get(GONE)
    inputs = found.data.get("inputs")
    pairs = [
        ("Session", gone.label),
        ("Task", found.task or "-"),
        ("State", found.shown_state),
        ("Error", str(found.data.get("error") or "-")),
        ("Process", f"{found.pid or '-'}, gone" + (f" at {iso(when)}" if isinstance(
            when, (int, float)) else "")),
        ("Note", "it ended without closing its session (killed? out of memory?): its IDE "
                 "and debugger were stopped and its token and password cleared"),
    ]
    if isinstance(inputs, str):
        pairs.append(("Inputs", f"{inputs} (kept: interactive.load_inputs reads them)"))
    return fields(pairs)


def _report_gone(args: argparse.Namespace, console: Console, gone: SessionGone) -> int:
    found = gone.found
    if args.output == "json":
        console.json({
            "session": gone.label, "task": found.task, "state": found.state,
            "process": "gone", "pid": found.pid, "error": found.data.get("error"),
            "gone_at": iso(found.data.get(GONE)), "inputs": found.data.get("inputs"),
        })
    else:
        console.say(_gone_lines(gone))
    return Exit.NOT_FOUND


def status(args: argparse.Namespace, console: Console) -> int:
    try:
        with open_target(args, console) as target:
            answer = target.client.status()
    except SessionGone as gone:  # shown as it was left, without reaching it
        return _report_gone(args, console, gone)
    if args.output == "json":
        console.json({"session": target.label, **answer})
    else:
        console.say(_status_lines(target, answer, console.clock()))
    return Exit.OK


MAX_PUSH_BYTES = 12 << 20
"""What ``resume --push`` sends at most (the session takes 16 MiB of base64)."""


def pushed_files(names: list[str], local_root: str) -> dict[str, bytes]:
    """``--push`` files by their path relative to ``local_root`` (``/``-separated)."""
    root = Path(local_root).resolve()
    files, total = {}, 0
    for name in names:
        path = Path(name).resolve()
        if root not in path.parents:
            raise CliError(f"--push {name}: not inside --local-root {root}", Exit.USAGE)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CliError(f"--push {name}: {exc.strerror or exc}", Exit.USAGE) from None
        total += len(data)
        if total > MAX_PUSH_BYTES:
            raise CliError(f"--push: over {MAX_PUSH_BYTES >> 20} MiB in all; push the files "
                           "you edited", Exit.USAGE)
        files[path.relative_to(root).as_posix()] = data
    return files


def resume(args: argparse.Namespace, console: Console) -> int:
    files = pushed_files(args.push, args.local_root) if getattr(args, "push", None) else {}
    with open_target(args, console) as target:
        written = target.client.push_files(files).get("written", []) if files else []
        try:
            answer = target.client.resume()
        except ControlConflict as exc:
            reason = str(exc).removeprefix("cannot resume: ")
            raise ControlConflict(f"cannot resume {target.label}: {reason}", exc.status) from None
    if args.output == "json":
        console.json({"session": target.label, "pushed": written, **answer})
    else:
        pushed = [f"podcode: pushed {len(written)} file(s) into the session's workspace: "
                  + ", ".join(files)] if written else []
        console.say("\n".join([*pushed, _resumed_lines(target.label, answer,
                                                        target.record.workspace)]))
    return Exit.OK


def _resumed_lines(label: str, answer: dict[str, Any], workspace: str | None = None) -> str:
    """What the resume patched and which top-level statements it did not run; when nothing
    changed, where the session's code is (an edit made elsewhere is not seen). A rank of a
    job over several pods: what the job was told (:func:`_job_resume_lines`)."""
    job = answer.get("job")
    if isinstance(job, dict) and job.get("asked"):
        return (f"podcode: asked pod {job['asked']}, which serves the job's session, to resume "
                "the job: it sends its fix to every pod and every rank runs again")
    lines = [f"podcode: resumed {label}: the task runs again with your edits"]
    if answer.get("patched"):
        lines.append("  patched: " + ", ".join(answer["patched"]))
    else:
        lines.append("  nothing patched: no definition that runs in the task's process changed")
        if workspace and not answer.get("not_loaded"):
            lines.append(f"  the session's code is in {workspace}: edit it there, or send files "
                         "you edited elsewhere with podcode resume --push FILE")
    if answer.get("not_loaded"):
        lines.append("  not loaded in the task's process (nothing patched there): "
                     + ", ".join(answer["not_loaded"]))
    if answer.get("not_executed"):
        lines.append("  not run again (top-level statements):")
        lines.extend(f"    {statement}" for statement in answer["not_executed"])
    if isinstance(job, dict):
        lines.extend(_job_resume_lines(job))
    return "\n".join(lines)


def _job_resume_lines(job: dict[str, Any]) -> list[str]:
    """What the serving pod's resume sent the job's other pods."""
    if job.get("posted") and job.get("fix"):
        return ["  sent to the job's other pods: " + ", ".join(map(str, job["fix"]))]
    if job.get("posted"):
        return ["  the job's other pods resume with their own copy (no fix sent)"]
    if job.get("error"):
        return [f"  the job's other pods were not told: {job['error']}"]
    return []


def keepalive(args: argparse.Namespace, console: Console) -> int:
    with open_target(args, console) as target:
        answer = target.client.keepalive(args.seconds)
    if args.output == "json":
        console.json({"session": target.label, **answer})
    else:
        console.say(kept_line(target.label, args.seconds, answer, console.clock()))
    return Exit.OK


def kept_line(label: str, seconds: float, answer: dict[str, Any], now: float) -> str:
    """The keep-alive's answer in terms of the seconds asked for: until when, and why the
    cleanup (``reap_at``) comes when it does. Pure."""
    kept = f"podcode: kept {label} for {seconds:g} s more"
    held, reap_at = answer.get("keepalive_until"), answer.get("reap_at")
    if not isinstance(reap_at, (int, float)) or not isinstance(held, (int, float)):
        return f"{kept} (it has no idle cleanup)"  # or an older session: no more to say
    kept += f", until {clock_time(now + seconds, now)}"
    if held > now + seconds + 1:
        kept += f" (an earlier keep-alive holds it until {clock_time(held, now)})"
    cleanup = f"cleanup not before {clock_time(reap_at, now)} ({until(reap_at, now)})"
    grace, idle = answer.get("grace_seconds"), answer.get("max_idle_seconds")
    if not isinstance(grace, (int, float)) or not isinstance(idle, (int, float)):
        return f"{kept}; {cleanup}, later if someone works in it"
    if reap_at - grace > held + 1:  # the idle limit, restarted by this call, is longer
        why = (f"the keep-alive counts as activity, so the idle limit ({duration(idle)}) "
               f"runs from now, and cleanup comes {duration(grace)} after its warning")
    else:
        why = f"{duration(grace)} after the idle warning, which waits until then"
    return f"{kept}; {cleanup}: {why}; working in it postpones both"


def abort(args: argparse.Namespace, console: Console) -> int:
    with open_target(args, console) as target:
        answer = target.client.abort()
    if args.output == "json":
        console.json({"session": target.label, **answer})
    else:
        console.say(f"podcode: aborted {target.label}: the task raises its original exception")
    return Exit.OK

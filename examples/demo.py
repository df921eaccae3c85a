"""The podcode demo: a pipeline fails, a session opens with code-server, the fix resumes it.

    python examples/demo.py            # plays the engineer's part by itself
    python examples/demo.py --wait     # you attach and resume (podcode resume)

It copies ``examples/pipeline`` to a temporary workspace, runs it with
podcode enabled, waits for the session, shows how to attach, fixes
``features.py`` like an engineer would, resumes, and then runs the workflow
again to show that the cached upstream step is not run twice.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIX = (
    "return [(value - mean) / std for value in column]",
    "return [(value - mean) / (std or 1.0) for value in column]",
)


def wait_for_session(
    home: Path, proc: subprocess.Popen[bytes], timeout: float = 300
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(
                f"demo: the pipeline exited ({proc.returncode}) before a session opened"
            )
        try:
            record = json.loads((home / "session.json").read_text())
            if record.get("state") == "waiting":
                return record
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.1)
    raise SystemExit("demo: no session opened in time")


def answers(url: str) -> bool:
    """Whether code-server answers (its /healthz; "expired" there only means no tab is open)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=10):  # noqa: S310
            return True
    except OSError:
        return False


def show(record: dict[str, object], home: Path) -> None:
    task = str(record["task"]).removeprefix("__main__.")
    print(f"\n=== {task} failed; its debug session is ready and waiting for you ===")
    print(f"  error:        {record['error']}")
    if record.get("code_server_url"):
        url = str(record["code_server_url"])
        ready = "open it in a browser" if answers(url) else "not answering yet, try again soon"
        print(f"  VS Code:      {url}  ({ready})")
        print(f"  password:     the \"password\" in {home / 'session.json'} (cat it)")
        print(f"  debugger:     VS Code starts \"podcode: attach to failed {task} "
              "(post-mortem)\" by itself: it stops where it failed (F5 attaches again)")
    debug = record["debug"]
    assert isinstance(debug, dict)
    where = f"{debug['host']}:{debug['port']}"
    print(f"  debugpy:      listening on {where} (a desktop VS Code can attach there too)")
    print(f"  control API:  {record['control_url']} (resume, keep alive, status)")
    print("  in a cluster: podcode attach POD   (port-forward, prints the URL and password)\n")


def run(workspace: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "pipeline.py"], cwd=workspace, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--wait", action="store_true", help="let me attach and resume by hand")
    parser.add_argument("--ide", default=os.environ.get("PODCODE_IDE", "code-server"))
    options = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="podcode-demo-"))
    workspace, home = root / "workspace", root / "home"
    shutil.copytree(HERE / "pipeline", workspace)
    env = {
        **os.environ,
        "PODCODE_ENABLE": "1",
        "PODCODE_HOME": str(home),
        "PODCODE_IDE": options.ide,
        "PODCODE_STORE": str(root / "store"),
    }
    print(f"demo: workspace {workspace}")
    proc = run(workspace, env)
    try:
        show(wait_for_session(home, proc), home)
        if options.wait:
            print(f"Fix {workspace / 'features.py'} (in VS Code or any editor), then resume: "
                  "the podcode item in the status bar, or the command palette's "
                  f"\"podcode: Resume workflow\", or PODCODE_HOME={home} podcode resume")
        else:
            source = workspace / "features.py"
            print("demo: the engineer fixes features.py (divide by std or 1.0) and resumes")
            source.write_text(source.read_text().replace(*FIX))
            subprocess.run([sys.executable, "-m", "interactive.cli", "resume"], env=env, check=True)
        if proc.wait() != 0:
            return proc.returncode
        print(
            "\ndemo: the workflow finished with the edited code; running it again (load is cached):"
        )
        again = run(workspace, env)
        return again.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

"""Where code-server's own files are, and the built-in extensions a session loads.

Some of code-server's built-in extensions serve no Python debugging and stand on the way
to the failed frame (seen in the extension host's log, two cores):

- GitHub Copilot: 41 MB, with the largest manifest of all (200 kB of commands, settings
  and views). A session turns its AI features off (``chat.disableAIFeatures``) and a pod
  has no GitHub login to give it, yet every window scans, localises and registers that
  manifest before the extension host can start;
- the JSON language features and what comes with them (settings and launch.json
  completions, npm scripts, extension manifests): the session's ``.vscode/launch.json``
  makes the window activate them first, and they hold up the extension host (and the
  companion that starts the post-mortem) by 0.3 to 0.5 s, with a JSON language server
  process besides. JSON files keep their colours (the ``json`` grammar stays);
- Emmet (HTML and CSS abbreviations), activated for every language;
- the JavaScript and TypeScript tooling (the JavaScript debugger has the largest manifest
  left, 311 kB) and the GitHub integration (activated at every start, with no GitHub
  login to use in a pod).

Together: 0.6 to 0.8 s less from the exception to the locals (``bench_frame``, against
all of them loaded in the same run).

Git's extensions (:data:`GIT`) are left out too when the workspace is not in a Git work
tree, as a task's code in a pod seldom is (an image, a Flyte or Ray package of the code):
they would only offer to make a repository, and they activate at every start, spawn
``git`` and register the largest manifest left (93 kB), 0.3 to 0.4 s on the way to the
frame. In a work tree they stay, and the Source Control view shows the diff of a fix.

code-server cannot be told to skip one built-in (it refuses ``--disable-extension``), but
it takes ``--builtin-extensions-dir``: the session gives it a folder of links to its
built-ins, less those skipped (``PODCODE_CODE_SERVER_SKIP_BUILTINS``, default
:data:`SKIPPED`). The install itself is never changed (it may be shared, or read-only in
an image).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

SKIPPED = frozenset({
    "copilot", "prompt-basics",  # AI features, off in a session
    "json-language-features", "configuration-editing", "npm", "extension-editing",
    "emmet",
    # JavaScript and TypeScript tooling: a debugger (311 kB of manifest) and its helpers,
    # the TypeScript language service, task detection for JavaScript build tools
    "ms-vscode.js-debug", "ms-vscode.js-debug-companion", "ms-vscode.vscode-js-profile-table",
    "debug-auto-launch", "typescript-language-features", "grunt", "gulp", "jake",
    # GitHub sign-in and integration (activated at every start; no GitHub login in a pod),
    # VS Code tunnels (code-server is reached through podcode attach)
    "github", "github-authentication", "tunnel-forwarding",
})
"""Built-in extensions (folder names) a session does not load, unless told otherwise."""
GIT = frozenset({"git", "git-base", "merge-conflict"})
"""Built-in extensions a session does not load either when its workspace is not in a Git
work tree (unless told otherwise)."""
LAYOUTS = ("", "lib/node_modules/code-server", "lib/code-server")
"""Where code-server's own folder (``out/node/cli.js``) lies under a folder above its
binary: a release tarball, the npm package (podcode's own install), distribution
packages."""


def product_root(binary: Path) -> Path | None:
    """code-server's own folder for ``binary`` (the one with ``out/node/cli.js``), or None
    when it cannot be found."""
    try:
        resolved = binary.resolve()
    except OSError:
        return None
    for folder in list(resolved.parents)[:3]:
        if folder.parts[-2:] == ("out", "node") and (folder / "cli.js").is_file():
            return folder.parent.parent  # the binary is code-server's own entry script
        for layout in LAYOUTS:
            root = folder / layout if layout else folder
            if (root / "out" / "node" / "cli.js").is_file():
                return root
    return None


def in_git_work_tree(folder: Path) -> bool:
    """Whether ``folder`` or a folder above it has a ``.git`` (a folder, or the file of a
    linked work tree or submodule), as Git finds its repository."""
    try:
        resolved = folder.resolve()
    except OSError:
        return False
    # os.path.exists: False, not an error, for a folder this user may not look into
    return any(os.path.exists(above / ".git") for above in (resolved, *resolved.parents))


def skipped_for(workspace: Path, skipped: frozenset[str],
                outside_git: frozenset[str] = GIT) -> frozenset[str]:
    """What a session serving ``workspace`` leaves out: ``skipped``, and ``outside_git``
    too when ``workspace`` is not in a Git work tree."""
    return skipped if in_git_work_tree(workspace) else skipped | outside_git


def parse_skipped(value: str | None) -> tuple[frozenset[str], frozenset[str]]:
    """``PODCODE_CODE_SERVER_SKIP_BUILTINS`` as (always skipped, skipped outside a Git work
    tree). Unset: the defaults. ``none``: nothing. A comma-separated list of folder names:
    those alone, where ``default`` stands for the defaults and ``-name`` keeps ``name``
    (``default,-git,-git-base`` keeps Git's extensions even outside a work tree)."""
    if value is None or not value.strip():
        return SKIPPED, GIT
    names = [name.strip() for name in value.split(",") if name.strip()]
    if [name.lower() for name in names] == ["none"]:
        return frozenset(), frozenset()
    kept = {name[1:] for name in names if name.startswith("-")}
    default = "default" in names
    added = {name for name in names if not name.startswith("-") and name != "default"}
    always = (SKIPPED if default else frozenset()) | added
    return frozenset(always - kept), frozenset((GIT if default else frozenset()) - kept - added)


def builtin_folder(binary: Path, into: Path, skipped: frozenset[str] = SKIPPED) -> Path | None:
    """A folder at ``into`` of links to every entry of ``binary``'s built-in extensions
    folder but ``skipped`` (for ``--builtin-extensions-dir``); None when there is nothing
    to skip, or the folder cannot be found or made (code-server then loads its own)."""
    root = product_root(binary)
    source = root / "lib" / "vscode" / "extensions" if root else None
    if source is None or not source.is_dir():
        return None
    try:
        entries = sorted(os.listdir(source))
        if not skipped.intersection(entries):
            return None
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True, mode=0o700)
        for name in entries:
            if name not in skipped:
                (into / name).symlink_to(source / name)
    except OSError as exc:
        log.warning("code-server loads all its built-in extensions: cannot link them in %s "
                    "(%s)", into, exc)
        return None
    return into

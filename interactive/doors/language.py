"""Python language intelligence in the session's code-server: which server, and where.

basedpyright, installed with podcode (``pip install 'podcode[lsp]'``; its server is a
JavaScript file that code-server's own Node.js runs, nothing is downloaded), is started
by the companion extension through its bundled language client when the workspace
settings name it (``podcode.languageServer``). It was chosen over jedi-language-server,
whose diagnostics are syntax errors only: a call with the wrong number of arguments
goes unflagged (docs/ide.md).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from interactive.base.settings import Settings

NOT_INSTALLED = ("Python language features (hover, Go to Definition, completion, "
                 "diagnostics) are off: basedpyright is not installed (pip install "
                 "'podcode[lsp]')")


def server_module() -> Path | None:
    """basedpyright's language server entry point, if it is installed (not imported)."""
    spec = importlib.util.find_spec("basedpyright")
    if spec is None or spec.origin is None:
        return None
    module = Path(spec.origin).parent / "langserver.index.js"
    return module if module.is_file() else None


def language_server(settings: Settings, note: Callable[[str], None]) -> str | None:
    """The server the IDE starts, or None (off, no IDE, or not installed: said when it
    was asked for by name)."""
    if not settings.editor.language_server or settings.editor.ide == "none":
        return None
    module = server_module()
    if module is None and "language_server" in settings.names:
        note(NOT_INSTALLED)
    return None if module is None else str(module)

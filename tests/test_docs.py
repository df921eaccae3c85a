"""The docs stay true to the code: every setting documented with its override."""

from __future__ import annotations

from pathlib import Path

import pytest

from interactive.base.settings import NAMES, Settings, env_name

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_setting_is_in_the_configuration_reference_with_its_default() -> None:
    text = (DOCS / "configuration.md").read_text()
    defaults = Settings()
    for name in NAMES:
        row = next((line for line in text.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, f"{name} is not documented"
        assert env_name(name) in row
        value = defaults.value(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            shown = f"{value}" if isinstance(value, int) else f"{value:g}"
            assert f"`{shown}`" in row, f"{name}: default {shown} not in {row}"


def test_docs_link_to_files_that_exist() -> None:
    import re

    for page in [*DOCS.rglob("*.md"), DOCS.parent / "README.md"]:
        for target in re.findall(r"\]\(([\w./-]+\.(?:md|yaml))\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_docs_images_exist_and_stay_small() -> None:
    """Pictures the docs show come from ``make screenshots``; each stays under 150 KB."""
    import re

    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"!\[[^\]]*\]\(([\w./-]+\.png)\)", page.read_text()):
            image = page.parent / target
            assert image.exists(), f"{page.name} shows missing {target}"
            assert image.stat().st_size < 150_000, f"{target} is {image.stat().st_size} bytes"


def test_the_configuration_pages_example_error_is_the_real_one() -> None:
    from interactive import vscode
    from interactive.base.errors import SettingError

    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    shown = next(line for line in page.splitlines() if line.startswith("podcode setting "))
    with pytest.raises(SettingError) as raised:
        vscode(max_idle_seconds=-5)
    assert str(raised.value) == shown


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_docs_links_to_sections_find_them() -> None:
    import re

    pages = [*DOCS.rglob("*.md"), DOCS.parent / "README.md"]
    for page in pages:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md|)#([\w-]+)\)", page.read_text()):
            linked = (page.parent / target) if target else page
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.MULTILINE)
            assert anchor in {_anchor(h) for h in headings}, f"{page.name}: {target}#{anchor}"


def test_the_walkthroughs_podcode_commands_parse() -> None:
    """Every ``podcode`` command deploy.md tells you to type is one the CLI accepts."""
    import argparse
    import re
    import shlex

    from interactive.cli.parser import build_parser
    from server_bootstrap.install import add_arguments

    text = (DOCS / "deploy.md").read_text()
    commands = re.findall(r"^(?:\$ |RUN )podcode (.+)$", text, re.MULTILINE)
    commands += re.findall(r"`podcode ([^`|]+)", text)
    verbs = set()
    for command in commands:
        words = [w for w in shlex.split(command.split("|")[0]) if w != "..."]
        args, rest = build_parser().parse_known_args(words)
        if args.verb == "install":  # handed to server_bootstrap.install, as the CLI does
            install = argparse.ArgumentParser(prog="podcode install", exit_on_error=False)
            add_arguments(install)
            install.parse_args(rest)
        else:
            assert rest == [], command
        verbs.add(args.verb)
    assert {"list", "attach", "resume", "edits", "install", "doctor"} <= verbs


def test_timings_are_quoted_from_one_place() -> None:
    """Measured times live in docs/performance.md (written from benchmarks/results.json);
    other pages name the figure instead of copying a number that drifts."""
    import re

    root = Path(__file__).resolve().parents[1]
    docs = root / "docs"
    figures = "".join(p.read_text(encoding="utf-8") for p in (root / "benchmarks").glob("*.py"))
    quoted = re.compile(r"\b\d+\.\d+ ?(?:s|ms|us|µs)\b.{0,40}\bmedian"
                        r"|\bmedian\b.{0,40}\b\d+\.\d+ ?s\b")
    for page in sorted(docs.rglob("*.md")):
        if page.name == "performance.md":
            continue
        text = page.read_text(encoding="utf-8")
        assert not quoted.search(text), f"{page.name} quotes a timing: {quoted.search(text)}"
        for name in re.findall(r"`([a-z0-9_]+_(?:s|ratio|per_call|per_min|mib))`", text):
            named = f'"{name}' in figures or f"``{name}``" in figures
            assert named or name.endswith(("_seconds", "_bytes")), f"{page.name}: {name}"


def _verb_options() -> dict[str, set[str]]:
    """Each verb of ``podcode`` and the options its parser takes (the common ones too)."""
    import argparse

    from interactive.cli.parser import build_parser

    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {verb: set(sub._option_string_actions) for verb, sub in verbs.choices.items()}


def test_every_option_the_docs_show_for_a_verb_is_one_it_takes() -> None:
    """``podcode attach --browser`` in a page once led nowhere: a flag shown after a verb,
    in any page, is one that verb's parser has."""
    import re

    options = _verb_options()
    command = re.compile(r"\bpodcode ([a-z][a-z-]*)([^`\n|#;),]*)")
    wrong = []
    for page in [*DOCS.rglob("*.md"), DOCS.parent / "README.md"]:
        for verb, rest in command.findall(page.read_text()):
            if verb not in options or verb == "install":  # install: its own parser
                continue
            rest = rest.split(" -- ")[0]  # what follows -- is a command run in the pod
            for flag in re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", rest):
                if flag not in options[verb]:
                    wrong.append(f"{page.name}: podcode {verb} ... {flag}")
    assert wrong == []


def test_open_and_attach_name_the_browser_option_alike() -> None:
    """One name for one option: ``--browser`` on both verbs, and no second spelling."""
    from interactive.cli.parser import build_parser

    for verb in ("open", "attach"):
        assert build_parser().parse_args([verb, "--browser"]).browser, verb
        assert not build_parser().parse_args([verb]).browser, verb
        with pytest.raises(SystemExit):
            build_parser().parse_args([verb, "--open"])

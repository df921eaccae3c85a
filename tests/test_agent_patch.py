"""An agent's unified diff, applied all or nothing (interactive/agent/patch.py)."""

from __future__ import annotations

import difflib

import pytest

from interactive.agent.patch import PatchRefused, apply, parse

SOURCE = "".join(f"line {n}\n" for n in range(1, 31))


def diff_of(before: str, after: str, name: str = "jobs/train.py") -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        f"a/{name}", f"b/{name}"))


def test_a_diff_made_by_difflib_gives_back_the_edited_text() -> None:
    after = SOURCE.replace("line 3\n", "line three\n").replace("line 25\n", "")
    [patch] = parse(diff_of(SOURCE, after))
    assert patch.path == "jobs/train.py" and len(patch.hunks) == 2
    assert apply(patch, SOURCE) == after


def test_a_hunk_whose_line_numbers_drifted_is_placed_where_its_lines_are() -> None:
    after = SOURCE.replace("line 20\n", "line twenty\n")
    text = diff_of(SOURCE, after).replace("@@ -17,7 +17,7 @@", "@@ -9,7 +9,7 @@")
    assert "@@ -9,7" in text
    assert apply(parse(text)[0], SOURCE) == after


def test_a_hunk_that_does_not_apply_is_named_with_the_line_that_differs() -> None:
    text = diff_of(SOURCE, SOURCE.replace("line 20\n", "x\n")).replace(" line 18", " line 99")
    with pytest.raises(PatchRefused, match=r"hunk 1 \(@@ -17,7 \+17,7 @@\) does not apply: "
                                           r"line 18 is 'line 18' where the diff expects "
                                           r"'line 99'"):
        apply(parse(text)[0], SOURCE)


def test_new_files_are_created_and_deletions_and_renames_refused() -> None:
    [created] = parse(diff_of("", "print(1)\n", "new.py").replace("a/new.py", "/dev/null"))
    assert created.created and apply(created, None) == "print(1)\n"
    deleting = "--- a/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    with pytest.raises(PatchRefused, match="deletes x.py"):
        parse(deleting)
    with pytest.raises(PatchRefused, match="renames"):
        parse("--- a/x.py\n+++ b/y.py\n@@ -1 +1 @@\n-x\n+y\n")
    with pytest.raises(PatchRefused, match="no such file"):
        apply(parse(diff_of("a\n", "b\n"))[0], None)
    with pytest.raises(PatchRefused, match="no hunk"):
        parse("just words")


def test_a_file_without_a_final_newline_keeps_it_so() -> None:
    [patch] = parse(diff_of("a\nb\n", "a\nc\n"))
    assert apply(patch, "a\nb") == "a\nc"

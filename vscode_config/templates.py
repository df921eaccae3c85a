"""One jinja2 environment per escaping mode, over the package's ``templates/`` folder."""

from __future__ import annotations

import functools

import jinja2


@functools.cache
def environment(autoescape: bool = False) -> jinja2.Environment:
    """Templates with StrictUndefined: a missing value is an error, never an empty string."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("vscode_config", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=autoescape,
        keep_trailing_newline=True,
    )


def render(name: str, *, autoescape: bool = False, **values: object) -> str:
    return environment(autoescape).get_template(name).render(**values)

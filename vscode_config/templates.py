"""One jinja2 environment per escaping mode, over the package's ``templates/`` folder."""

from __future__ import annotations

import functools

import jinja2
from jinja2 import meta


def environment(autoescape: bool = False) -> jinja2.Environment:
    """Templates with StrictUndefined: a missing value is an error, never an empty string.
    One per mode however it is asked for (``environment()`` is ``environment(False)``), so
    that templates compiled ahead are the ones rendered."""
    return _environment(bool(autoescape))


@functools.cache
def _environment(autoescape: bool) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("vscode_config", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=autoescape,  # noqa: S701 - JSON/Python use tojson; HTML autoescapes
        keep_trailing_newline=True,
    )


@functools.cache
def required(name: str) -> frozenset[str]:
    """The values template ``name`` uses."""
    env = environment()
    assert env.loader is not None
    source = env.loader.get_source(env, name)[0]
    return frozenset(meta.find_undeclared_variables(env.parse(source)))


def compile_templates(names: tuple[str, ...]) -> None:
    """Parse and compile ``names`` now, so that a later :func:`render` only renders."""
    for name in names:
        required(name)
        environment().get_template(name)


def render(name: str, *, autoescape: bool = False, **values: object) -> str:
    """Render ``name``; every value it uses must be given (filters such as tojson hide none)."""
    missing = required(name) - set(values)
    if missing:
        raise jinja2.UndefinedError(f"template {name} needs {', '.join(sorted(missing))}")
    return environment(autoescape).get_template(name).render(**values)

"""Apply the engineer's edits to the running program, in place.

Resume must run the fixed code without running the workflow again. Re-importing
an edited module re-executes its top-level statements (a script whose pipeline
runs at top level starts the pipeline again), creates new function and class
objects that the objects already alive (captured inputs, callers holding
``from x import f``, frameworks' registries) never see, and cannot find a module
loaded from a file path (``pyflyte run wf.py``). So podcode patches instead:

- both versions of each changed file are parsed; definitions are matched by
  their qualified name (``Scaler.apply``, ``train.<locals>.step``);
- a changed function or method gets the newly compiled code object (and its new
  default values) assigned to the **existing** function object, so every
  reference to it sees the fix: a method of a class whose instance was passed
  in, a helper imported by name, a task wrapped by decorators;
- a definition whose text is unchanged but whose running code is not its text (a
  Ray node's working_dir copy that an earlier job's session edited, reused for a job
  that ships the unedited code) gets its text's code too: a saved file is what runs;
- a new function, method or class is defined; a new ``import`` and a changed
  constant (``LR = 0.5``: names bound without calling anything) are run;
- every other top-level statement is left alone and named in the report, so a
  script's pipeline never starts again inside a resume;
- what cannot be patched in place (a class whose bases, decorators or class
  attributes changed, a function whose decorators or closure variables changed,
  a syntax error) refuses the whole resume, naming the definition: running the
  old code again would only fail the same way.

A file's definitions are found in every module loaded from it and, for a task shipped
by value (cloudpickle: Ray, a task of ``__main__`` sent to another process), in the
globals that the unpickling made for it, which no module holds. Those globals hold only
what the shipped functions read: an import or a constant of the file that the fix now
reads and the copy lacks is run there too. An edited file that
nothing in this process was loaded from is named in the report: nothing is patched.

Planning (:func:`plan`) reads and compiles; nothing changes in the program until
:meth:`Plan.apply`. Nested functions that are alive on their own (a task defined
inside another function) are found through the garbage collector, once per
resume and only when such a definition changed.
"""

from __future__ import annotations

import ast
import builtins
import functools
import gc
import inspect
import itertools
import logging
import os
import sys
import time
import types
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interactive.base.names import RAW_ATTRIBUTE

log = logging.getLogger(__name__)

Path_ = tuple[str, ...]
"""A definition's qualified name as parts: ``("Scaler", "apply")``, ``("f", "<locals>", "g")``."""

LOCALS = "<locals>"
UNWRAP_ATTRIBUTES = (
    RAW_ATTRIBUTE, "__wrapped__", "task_function", "func", "__func__", "_function",
)
"""Where decorators keep the function they wrap (podcode, functools.wraps, flytekit,
staticmethod, classmethod, bound methods; Flyte 2 and partial keep it in ``func``, Ray's
remote functions in ``_function``)."""
Function = (ast.FunctionDef, ast.AsyncFunctionDef)
Defaults = tuple[tuple[Any, ...] | None, dict[str, Any] | None]
"""A function's ``__defaults__`` and ``__kwdefaults__``."""


class Unpatchable(Exception):
    """An edit that cannot be applied to the running program; names the definition."""


@dataclass(frozen=True)
class Definition:
    """A ``def`` or ``class`` statement of one version of a file."""

    path: Path_
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    first_line: int
    """The line a code object reports for it: its first decorator's, else its own."""

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def is_class(self) -> bool:
        return isinstance(self.node, ast.ClassDef)

    @property
    def nested(self) -> bool:
        return LOCALS in self.path


@dataclass
class Change:
    """One step of a plan: what it does, said for the engineer, and how."""

    label: str
    run: Callable[[], None]


@dataclass
class Plan:
    """What a resume will do to the running program."""

    patched: list[str] = field(default_factory=list)
    """Definitions that get new code (changed or new), qualified by module."""
    not_executed: list[str] = field(default_factory=list)
    """Changed top-level statements left alone: ``file:line: statement``."""
    changes: list[Change] = field(default_factory=list)
    not_loaded: list[str] = field(default_factory=list)
    """Edited files that no code of this process was loaded from: nothing patched there."""
    replaced: dict[int, tuple[types.CodeType, Defaults]] = field(default_factory=dict)
    """New code and defaults by ``id()`` of the function object that will get them."""
    unfound: dict[tuple[str, str], Unpatchable] = field(default_factory=dict)
    """Changed definitions not running in one namespace of their file, by file and name."""
    found: set[tuple[str, str]] = field(default_factory=set)
    """Changed definitions running in some namespace, by file and name."""

    def preview(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` as it will be once applied (itself when it does not change)."""
        if not isinstance(function, types.FunctionType) or id(function) not in self.replaced:
            return function
        code, (positional, keywords) = self.replaced[id(function)]
        future = types.FunctionType(
            code, function.__globals__, function.__name__, positional, function.__closure__
        )
        future.__kwdefaults__ = keywords
        return future

    def apply(self) -> None:
        for change in self.changes:
            change.run()
        if self.patched:
            log.info("patched in place: %s", ", ".join(self.patched))

    def add_patched(self, name: str) -> None:
        """Name a definition that gets new code, once (a file loaded as two modules, or a
        definition changed in two ways, is still one fix)."""
        if name not in self.patched:
            self.patched.append(name)

    def report(self) -> dict[str, list[str]]:
        """What the resume does, for the control API's answer and the IDE."""
        return {"patched": self.patched, "not_executed": self.not_executed,
                "not_loaded": self.not_loaded}

    def summary(self) -> str:
        parts = ["patched " + ", ".join(self.patched) if self.patched else "nothing patched"]
        if self.not_executed:
            parts.append("not executed (top-level statements): " + "; ".join(self.not_executed))
        if self.not_loaded:
            parts.append("not loaded in this process: " + ", ".join(self.not_loaded))
        return "; ".join(parts)


@dataclass(frozen=True)
class Namespace:
    """Where the definitions of one file live in this process: a module's dict, or the
    globals that unpickling made for functions shipped by value."""

    name: str
    filename: str
    globals: dict[str, Any]
    shipped: tuple[types.FunctionType, ...] = ()
    """Shipped by value: the tasks themselves (their copy holds only the globals they use,
    so a definition it lacks is not refused: it does not run here)."""

    @classmethod
    def of_module(cls, module: types.ModuleType) -> Namespace:
        return cls(module.__name__, str(module.__file__), vars(module))


def plan(
    edits: Iterable[tuple[Path, str, str]], tasks: Iterable[Callable[..., Any]] = ()
) -> Plan:
    """The plan for ``(file, old text, new text)`` of each edited file; ``tasks`` are the
    running tasks, whose globals are searched too when they were shipped by value.

    Raises :class:`Unpatchable` naming the first definition that cannot be patched."""
    result = Plan()
    for path, old, new in edits:
        if path.suffix != ".py":
            continue  # a file saved unchanged still counts: what runs may not be its text
        namespaces = namespaces_of(path, tasks)
        if not namespaces and old != new:
            result.not_loaded.append(path.name)
        for namespace in namespaces:
            FilePatcher(namespace, path, old, new, result).plan()
    for where, refusal in result.unfound.items():
        if where not in result.found:  # a module imported on the side lacks what a copy runs
            raise refusal
    return result


def namespaces_of(path: Path, tasks: Iterable[Callable[..., Any]] = ()) -> list[Namespace]:
    """The modules loaded from ``path``, then the by-value globals of ``tasks`` compiled
    from it (each namespace once)."""
    found = [Namespace.of_module(module) for module in modules_of(path)]
    wanted = _resolved(str(path))
    for task in tasks:
        for function in unwrap(task):
            namespace = function.__globals__
            if any(namespace is seen.globals for seen in found) or not shipped(function):
                continue  # by reference: its module was searched
            filenames = (function.__code__.co_filename, namespace.get("__file__"))
            if any(_same_file(name, path, wanted) for name in filenames):
                found.append(Namespace(function.__module__, str(path), namespace, (function,)))
    return found


def shipped(function: types.FunctionType) -> bool:
    """Whether ``function`` came by value (cloudpickle): its globals are no module's."""
    module = sys.modules.get(function.__module__)
    return module is None or vars(module) is not function.__globals__


def _same_file(filename: object, path: Path, wanted: Path | None) -> bool:
    """Whether ``filename`` (a code object's, or a module's ``__file__``; cloudpickle may
    write ``<dynamic-code>`` in the first) is ``path``."""
    return (
        isinstance(filename, str)
        and os.path.basename(filename) == path.name
        and _resolved(filename) == wanted
    )


def modules_of(path: Path) -> list[types.ModuleType]:
    """The loaded modules whose source is ``path`` (a script can be ``__main__`` and a
    module at once; ``pyflyte run`` loads a file under a name of its own)."""
    wanted = _resolved(str(path))
    found = []
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if not isinstance(module, types.ModuleType) or not isinstance(filename, str):
            continue
        if _same_file(filename, path, wanted):
            found.append(module)  # the name first: resolving every module's path is slow
    return found


def _resolved(filename: str) -> Path | None:
    try:
        return Path(filename).resolve()
    except (OSError, RuntimeError):
        return None


def definitions(tree: ast.Module) -> dict[Path_, list[Definition]]:
    """Every ``def`` and ``class`` in the file by qualified name, in source order."""
    found: dict[Path_, list[Definition]] = defaultdict(list)

    def visit(body: list[ast.stmt], prefix: Path_) -> None:
        for node in body:
            if isinstance(node, (*Function, ast.ClassDef)):
                path = (*prefix, node.name)
                lines = [node.lineno, *(d.lineno for d in node.decorator_list)]
                found[path].append(Definition(path, node, min(lines)))
                inner = path if isinstance(node, ast.ClassDef) else (*path, LOCALS)
                visit(node.body, inner)
            else:
                for child in _statement_bodies(node):
                    visit(child, prefix)

    visit(tree.body, ())
    return found


def _statement_bodies(node: ast.stmt) -> Iterator[list[ast.stmt]]:
    """Bodies of compound statements (``if``, ``try``, ``with``...): defs inside them count."""
    for name in ("body", "orelse", "finalbody"):
        body = getattr(node, name, None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            yield body
    for handler in getattr(node, "handlers", ()):
        yield handler.body


def _same(a: ast.AST | list[Any] | None, b: ast.AST | list[Any] | None) -> bool:
    return _dump(a) == _dump(b)


def _dump(node: ast.AST | list[Any] | None) -> str:
    if isinstance(node, list):
        return "[" + ",".join(_dump(n) for n in node) + "]"
    return "None" if node is None else ast.dump(node, include_attributes=False)


def class_layout(node: ast.ClassDef) -> list[Any]:
    """What patching methods cannot change: bases, keywords, decorators, class statements."""
    body = [
        stmt
        for index, stmt in enumerate(node.body)
        if not isinstance(stmt, (*Function, ast.ClassDef)) and not _is_docstring(index, stmt)
    ]
    return [node.bases, node.keywords, node.decorator_list, body]


def _is_docstring(index: int, stmt: ast.stmt) -> bool:
    return (
        index == 0
        and isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


CodeIndex = dict[tuple[Path_, int], types.CodeType]
"""Code objects by qualified name and first line."""


def code_objects(code: types.CodeType, prefix: Path_ = ()) -> CodeIndex:
    """The code objects compiled from a file, by qualified name and first line."""
    found: CodeIndex = {}
    in_function = bool(code.co_flags & inspect.CO_NEWLOCALS) and code.co_name != "<module>"
    for const in code.co_consts:
        if not isinstance(const, types.CodeType) or const.co_name.startswith("<"):
            continue
        path = (*prefix, LOCALS, const.co_name) if in_function else (*prefix, const.co_name)
        found[(path, const.co_firstlineno)] = const
        found.update(code_objects(const, path))
    return found


class FilePatcher:
    """Plans the changes of one edited file for one module loaded from it."""

    def __init__(self, namespace: Namespace, path: Path, old: str, new: str, plan: Plan):
        self.namespace = namespace
        self.globals = namespace.globals
        self.filename = namespace.filename
        self.display = path.name
        self.result = plan
        self.old_tree = _parse(old, self.filename, "before the edit")
        self.new_tree = _parse(new, self.filename, "after the edit")
        self.new_codes = code_objects(
            compile(self.new_tree, self.filename, "exec", dont_inherit=True)  # as imported
        )
        self._nested_lookup: dict[types.CodeType, list[types.FunctionType]] | None = None

    def plan(self) -> None:
        old_defs, new_defs = definitions(self.old_tree), definitions(self.new_tree)
        for path, versions in new_defs.items():
            before = old_defs.get(path, [])
            for index, definition in enumerate(versions):
                if index < len(before):
                    self._changed(before[index], definition)
                else:
                    self._added(definition, old_defs)
        self._top_level()

    # -- definitions ------------------------------------------------------------------
    def _changed(self, old: Definition, new: Definition) -> None:
        if old.is_class != new.is_class:
            self._refuse(new, "it changed between a class and a function")
        if isinstance(old.node, ast.ClassDef) and isinstance(new.node, ast.ClassDef):
            if not _same(class_layout(old.node), class_layout(new.node)):
                self._refuse(new, "its bases, decorators or class attributes changed")
            return  # its methods are definitions of their own
        stale = False
        if _same(old.node, new.node) and old.first_line == new.first_line:
            stale = self._runs_other_code(old, new)
            if not stale:
                return
        if not _same(old.node.decorator_list, new.node.decorator_list):
            self._refuse(new, "its decorators changed")
        code = self._new_code(new)
        functions = self._live_functions(old)
        if not functions and not new.nested and self.namespace.shipped:
            return  # a copy shipped by value runs only what it holds
        if not functions and not new.nested:  # a nested one is made anew by its encloser
            self.result.unfound.setdefault((self.filename, new.name), self._refusal(
                new, "no running function was found for it"))
            return  # refused by plan() unless another namespace of the file runs it
        for function in functions:
            if function.__code__.co_freevars != code.co_freevars:
                self._refuse(
                    new,
                    "the variables it takes from enclosing scopes changed "
                    f"({', '.join(function.__code__.co_freevars) or 'none'} -> "
                    f"{', '.join(code.co_freevars) or 'none'})",
                )
        self.result.found.add((self.filename, new.name))
        defaults = self._defaults(new)
        self.result.replaced.update((id(f), (code, defaults)) for f in functions)
        if stale or not _same(old.node, new.node):
            self.result.add_patched(self._qualified(new))
        self.result.changes.append(
            Change(self._qualified(new), lambda: _replace_code(functions, code, defaults))
        )

    def _runs_other_code(self, old: Definition, new: Definition) -> bool:
        """Whether an unedited definition runs code other than its text: the file was
        changed before the task loaded it (a Ray node's working_dir copy that an earlier
        job's session edited, while the task runs the code its driver shipped). Saving the
        file makes its text what runs. Nested definitions are left to their encloser."""
        code = self.new_codes.get((new.path, new.first_line))
        if new.nested or code is None:
            return False
        return any(not same_behaviour(f.__code__, code) for f in self._live_functions(old))

    def _added(self, new: Definition, old_defs: dict[Path_, list[Definition]]) -> None:
        parent = new.path[:-1]
        if new.nested:
            return  # created by its enclosing function, which runs the new code
        if parent and parent not in old_defs:
            return  # inside a class that is new as a whole
        owner = self._live_owner(parent, new)
        node = new.node
        source = ast.Module(body=[node], type_ignores=[])
        if isinstance(node, ast.ClassDef) or not parent:
            code = compile(source, self.filename, "exec")
            namespace = self.globals if not parent else None
            if namespace is None:
                self._refuse(new, "a class defined inside a class cannot be added in place")

            def define() -> None:
                exec(code, namespace)  # noqa: S102 - a definition from the engineer's own file

            change = define
        else:
            function = self._new_function(new, owner)

            def change() -> None:
                setattr(owner, new.path[-1], function())

        self.result.add_patched(self._qualified(new))
        self.result.changes.append(Change(self._qualified(new), change))

    def _new_function(self, new: Definition, owner: Any) -> Callable[[], Any]:
        """A new method: its compiled code with the class cell ``super()`` needs, and its
        decorators applied (evaluated when the plan is applied)."""
        code = self._new_code(new)
        defaults = self._defaults(new)
        closure = tuple(types.CellType(owner) for name in code.co_freevars if name == "__class__")
        if len(closure) != len(code.co_freevars):
            self._refuse(new, "it uses variables of an enclosing scope")
        node = new.node
        decorators = [
            compile(ast.Expression(body=d), self.filename, "eval") for d in node.decorator_list
        ]

        def build() -> Any:
            function = types.FunctionType(
                code, self.globals, code.co_name, defaults[0], closure or None
            )
            function.__kwdefaults__ = defaults[1]
            function.__qualname__ = ".".join(new.path)
            value: Any = function
            for decorator in reversed(decorators):
                value = eval(decorator, self.globals)(value)  # noqa: S307 - the user's source
            return value

        return build

    def _new_code(self, new: Definition) -> types.CodeType:
        code = self.new_codes.get((new.path, new.first_line))
        if code is None:
            raise self._refusal(new, "its compiled code was not found")
        return code

    def _defaults(self, new: Definition) -> Defaults:
        """The new default values, evaluated in the module (as Python does at ``def``)."""
        node = new.node
        if not isinstance(node, Function):  # only a def has defaults
            raise self._refusal(new, "it is not a function")
        args = node.args
        if not args.defaults and not any(args.kw_defaults):
            return None, None
        try:
            positional = tuple(self._evaluate(d) for d in args.defaults) or None
            keywords = {
                arg.arg: self._evaluate(d)
                for arg, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                if d is not None
            }
        except Exception as exc:
            self._refuse(new, f"its default values cannot be evaluated ({exc!r})")
        return positional, keywords or None

    def _evaluate(self, expression: ast.expr) -> Any:
        code = compile(ast.Expression(body=expression), self.filename, "eval")
        return eval(code, self.globals)  # noqa: S307 - a default from the user's source

    # -- finding what runs --------------------------------------------------------------
    def _live_owner(self, path: Path_, new: Definition) -> Any:
        owner: Any = self.namespace
        for part in path:
            owner = self._member(owner, part)
            if owner is None:
                self._refuse(new, f"{'.'.join(path)} is not defined in the running program")
        return owner

    def _live_functions(self, old: Definition) -> list[types.FunctionType]:
        """The running function objects of ``old``: through the module, its classes and
        decorator chains; nested ones through the code object they were made from."""
        if old.nested:
            return self._nested_functions(old)
        shipped = [f for f in self.namespace.shipped if f.__qualname__ == old.name]
        if shipped:
            return shipped
        value: Any = self.namespace
        for part in old.path:
            value = self._member(value, part)
        name = old.path[-1]
        found = [f for f in unwrap(value) if f.__code__.co_name == name]
        same_line = [f for f in found if f.__code__.co_firstlineno == old.first_line]
        return same_line or found

    def _member(self, owner: Any, name: str) -> Any:
        if owner is self.namespace:
            return self.globals.get(name)
        return vars(owner).get(name) if hasattr(owner, "__dict__") else None

    def _nested_functions(self, old: Definition) -> list[types.FunctionType]:
        outer = next(i for i, part in enumerate(old.path) if part == LOCALS) - 1
        enclosing = Definition(old.path[: outer + 1], old.node, 0)
        codes = set()
        for function in self._live_functions(enclosing):
            for (path, line), code in code_objects(function.__code__, enclosing.path).items():
                if path == old.path and line == old.first_line:
                    codes.add(code)
        if self._nested_lookup is None:
            self._nested_lookup = functions_by_code()
        return [f for code in codes for f in self._nested_lookup.get(code, [])]

    # -- top-level statements ------------------------------------------------------------
    def _top_level(self) -> None:
        old = {_dump(s) for s in self.old_tree.body if not isinstance(s, (*Function, ast.ClassDef))}
        missing = self._missing_globals()
        for index, stmt in enumerate(self.new_tree.body):
            if isinstance(stmt, (*Function, ast.ClassDef)) or _is_docstring(index, stmt):
                continue
            if _has_definitions(stmt):
                continue
            if _dump(stmt) in old:
                if _bound_names(stmt) & missing:  # the copy lacks what the fix now uses
                    self.result.changes.append(self._run_statement(stmt, f"line {stmt.lineno}"))
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.result.changes.append(self._run_statement(stmt, f"import at {stmt.lineno}"))
                continue
            if is_constant_assignment(stmt):
                names = [t.id for t in ast.walk(stmt) if isinstance(t, ast.Name)]
                self.result.add_patched(f"{self.namespace.name}.{names[0]}")
                self.result.changes.append(self._run_statement(stmt, names[0]))
                continue
            text = ast.unparse(stmt).split("\n")[0]
            self.result.not_executed.append(f"{self.display}:{stmt.lineno}: {text[:60]}")

    def _missing_globals(self) -> set[str]:
        """Names the new text's functions read that a copy shipped by value lacks:
        cloudpickle ships only the globals a function used, and the fix may use another
        (a module constant, an import). Empty for a module, which has them all."""
        if not self.namespace.shipped:
            return set()
        functions = [n for n in ast.walk(self.new_tree) if isinstance(n, Function)]
        read = {node.id for function in functions for node in ast.walk(function)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        return {name for name in read
                if name not in self.globals and not hasattr(builtins, name)}

    def _run_statement(self, stmt: ast.stmt, label: str) -> Change:
        """A statement that only binds names (an import, a constant): safe to run again."""
        code = compile(ast.Module(body=[stmt], type_ignores=[]), self.filename, "exec")
        namespace = self.globals

        def run() -> None:
            exec(code, namespace)  # noqa: S102 - a statement from the engineer's own file

        return Change(label, run)

    def _qualified(self, definition: Definition) -> str:
        return f"{self.namespace.name}.{definition.name}"

    def _refuse(self, definition: Definition, reason: str) -> Any:
        raise self._refusal(definition, reason)

    def _refusal(self, definition: Definition, reason: str) -> Unpatchable:
        return Unpatchable(
            f"{self.display}:{definition.node.lineno}: {definition.name} cannot be patched in "
            f"place: {reason}"
        )


def is_constant_assignment(stmt: ast.stmt) -> bool:
    """``LR = 0.5``, ``LABELS: list[str] = ["a", "b"]``: names bound to values computed
    without calling anything, so running it again does no work and has no side effect."""
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets, value = [stmt.target], stmt.value
    else:
        return False
    if not all(isinstance(target, ast.Name) for target in targets):
        return False
    dynamic = (ast.Call, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)
    comprehension = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    return not any(isinstance(node, dynamic + comprehension) for node in ast.walk(value))


def _bound_names(stmt: ast.stmt) -> set[str]:
    """The names an import or a constant assignment binds (none for other statements)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {alias.asname or alias.name.split(".")[0] for alias in stmt.names}
    if is_constant_assignment(stmt):
        return {node.id for node in ast.walk(stmt) if isinstance(node, ast.Name)
                and isinstance(node.ctx, ast.Store)}
    return set()


def _has_definitions(stmt: ast.stmt) -> bool:
    return any(isinstance(n, (*Function, ast.ClassDef)) for n in ast.walk(stmt))


def _parse(text: str, filename: str, when: str) -> ast.Module:
    try:
        return ast.parse(text, filename)
    except SyntaxError as exc:
        raise Unpatchable(
            f"{Path(filename).name}:{exc.lineno}: syntax error {when}: {exc.msg}"
        ) from None


def unwrap(value: Any, depth: int = 8) -> list[types.FunctionType]:
    """The plain functions behind ``value``: through staticmethod, classmethod, property,
    ``functools.wraps`` chains, flytekit's task and ``functools.partial``."""
    found: list[types.FunctionType] = []
    seen: set[int] = set()
    pending = [(value, 0)]
    while pending:
        current, level = pending.pop()
        if current is None or id(current) in seen or level > depth:
            continue
        seen.add(id(current))
        if isinstance(current, types.FunctionType):
            found.append(current)
        if isinstance(current, property):
            pending.extend((f, level + 1) for f in (current.fget, current.fset, current.fdel))
        if isinstance(current, functools.partial):
            pending.append((current.func, level + 1))
        for attribute in UNWRAP_ATTRIBUTES:
            try:
                inner = getattr(current, attribute, None)
            except Exception:  # an object whose attribute lookup itself fails
                inner = None
            if inner is not None and not isinstance(inner, (str, int, float, bool)):
                pending.append((inner, level + 1))
    return found


def same_behaviour(a: types.CodeType, b: types.CodeType) -> bool:
    """Whether two code objects run the same instructions on the same names and constants
    (their file, name and line numbers aside)."""
    if (a.co_code, a.co_names, a.co_varnames, a.co_freevars, a.co_cellvars) != (
            b.co_code, b.co_names, b.co_varnames, b.co_freevars, b.co_cellvars):
        return False
    if len(a.co_consts) != len(b.co_consts):
        return False
    return all(
        same_behaviour(x, y) if isinstance(x, types.CodeType) and isinstance(y, types.CodeType)
        else type(x) is type(y) and (x == y or repr(x) == repr(y))  # NaN is itself
        for x, y in zip(a.co_consts, b.co_consts, strict=True)
    )


HEAP_SLICE = 50_000
"""Objects looked at between two pauses of the heap scan (about a millisecond's work)."""


def functions_by_code() -> dict[types.CodeType, list[types.FunctionType]]:
    """Every live Python function by its code object (one pass over the heap).

    The scan holds the GIL as little as it can, for the threads that serve meanwhile (the
    control API, an event loop): the heap is listed one generation at a time, the youngest
    first (an object promoted meanwhile is seen twice, never missed), and walked in
    slices of :data:`HEAP_SLICE`, each followed by a pause that lets the other threads
    run. The longest hold is listing the oldest generation (about 25 ms per 2M objects)."""
    found: dict[int, types.FunctionType] = {}
    function_type = types.FunctionType
    for generation in range(3):
        objects = iter(gc.get_objects(generation))
        while chunk := list(itertools.islice(objects, HEAP_SLICE)):
            for obj in chunk:
                if type(obj) is function_type:
                    found[id(obj)] = obj
            time.sleep(0)  # let the other threads have the GIL
        del objects
    table: dict[types.CodeType, list[types.FunctionType]] = defaultdict(list)
    for function in found.values():
        table[function.__code__].append(function)
    return table


def _replace_code(
    functions: list[types.FunctionType],
    code: types.CodeType,
    defaults: Defaults,
) -> None:
    for function in functions:
        function.__code__ = code
        function.__defaults__, function.__kwdefaults__ = defaults

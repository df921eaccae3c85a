"""What a snapshot of one argument would cost, decided before anything is copied.

The snapshot (:mod:`interactive.inputs.snapshot`) runs at every call of an enabled task,
and almost every call succeeds. So before it pickles anything it walks the argument,
without serialising it and without running any code of the argument's own classes, and
decides:

- ``UNCHANGEABLE``: nothing the task could change in place (numbers, strings, tuples of
  them, read-only arrays, read-only memory-mapped files, Arrow data): nothing is kept,
  the capture at the failure pickles it then;
- ``KEEP``: copy it now; ``nbytes`` is about what the copy costs (writable buffers by
  their size, other objects by a rough estimate);
- ``ON_DISK``: a writable memory-mapped file: its changes go to the file itself, which
  podcode does not copy;
- ``AT_FAILURE``: captured at the failure only, for the ``reason`` given: a class that
  pickles itself with its own code (``__reduce__``, ``__getstate__``...), more objects
  than :data:`NODE_BOUND`, a tensor on a GPU, a type podcode does not know.

Buffers are sized by ``nbytes``; containers, and the ``__dict__`` and slots of plain
instances, are walked up to :data:`NODE_BOUND` objects. Types are looked at with
``type()``, never ``isinstance`` (which may read a ``__class__`` property), and a class's
verdict is computed once (:func:`_kind_of`).

The code of NumPy, PyTorch, pandas, pyarrow and the standard library is trusted to pickle
their own objects; any other class that pickles itself is left for the failure.
"""

from __future__ import annotations

import collections
import copyreg
import enum
import functools
import mmap
import sys
import types
from dataclasses import dataclass
from typing import Any

NODE_BOUND = 10_000
"""The most objects walked in one argument: beyond, it is captured at the failure (a
million small objects would cost seconds to copy at every call)."""
BIG_BYTES = 1 << 20
"""``bytes`` objects at least this large go out of band (and are never copied)."""
TRUSTED_LIBRARIES = frozenset({"numpy", "torch", "pandas", "pyarrow", "interactive"})
"""Top-level packages whose own pickling code runs at the call (besides the standard
library's)."""
SELF_PICKLING = (
    "__reduce__", "__reduce_ex__", "__getstate__", "__getnewargs__", "__getnewargs_ex__",
    "__deepcopy__", "__copy__", "__getattribute__",
)
"""Methods through which a class's own code runs while it is pickled (or copied)."""
if sys.version_info < (3, 11):  # no object.__getstate__ yet: pickle falls to __getattr__
    SELF_PICKLING = (*SELF_PICKLING, "__getattr__")

UNCHANGEABLE = "unchangeable"
KEEP = "keep"
ON_DISK = "on_disk"
AT_FAILURE = "at_failure"

ATOMS: frozenset[type] = frozenset({
    int, float, complex, bool, str, bytes, type(None), range, slice, type(Ellipsis),
    types.FunctionType, types.BuiltinFunctionType, type,
})
"""Types whose values cannot change in place (functions and classes pickle by name)."""
_IMMUTABLE_CONTAINERS: frozenset[type] = frozenset({tuple, frozenset})
_MUTABLE_CONTAINERS: frozenset[type] = frozenset({
    list, set, dict, collections.OrderedDict, collections.defaultdict, collections.deque,
    collections.Counter,
})
_ATOM_BYTES = 16
"""What a small object adds to a pickle, roughly."""


@dataclass(frozen=True)
class Estimate:
    """The decision for one argument."""

    verdict: str
    nbytes: int = 0
    """About how many bytes a snapshot copies (``KEEP``)."""
    reason: str = ""
    """Why it is not kept at the call (``ON_DISK``, ``AT_FAILURE``)."""


NOTHING_TO_KEEP = Estimate(UNCHANGEABLE)


class _Stop(Exception):
    """The walk ends with this estimate."""

    def __init__(self, estimate: Estimate) -> None:
        self.estimate = estimate


def estimate(value: Any, bound: int = NODE_BOUND) -> Estimate:
    """What a snapshot of ``value`` would be, walking at most ``bound`` objects."""
    kind = type(value)
    if kind in ATOMS:
        return NOTHING_TO_KEEP
    walk = _Walk(bound)
    try:
        walk.push((value,))
        while walk.stack:
            walk.visit(walk.stack.pop())
    except _Stop as stop:
        return stop.estimate
    return Estimate(KEEP, walk.nbytes) if walk.changeable else NOTHING_TO_KEEP


class _Walk:
    """One argument's walk: what it holds, how big, whether any of it can change."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.nodes = 0
        self.nbytes = 0
        self.changeable = False
        self.stack: list[Any] = []
        self.seen: set[int] = set()

    def count(self, nodes: int) -> None:
        self.nodes += nodes
        if self.nodes > self.bound:
            raise _Stop(Estimate(AT_FAILURE, reason=(
                f"it holds more than {self.bound:,} objects, too many to copy at every call")))

    def push(self, values: Any, count: int | None = None) -> None:
        """Walk ``values`` later; counted now (before a huge container is copied out)."""
        self.count(len(values) if count is None else count)
        self.stack.extend(values)

    def visit(self, value: Any) -> None:
        kind = type(value)
        if kind in ATOMS:
            if kind is str or kind is bytes:
                self.nbytes += len(value) if len(value) < BIG_BYTES or kind is str else 0
            else:
                self.nbytes += _ATOM_BYTES
            return
        if id(value) in self.seen:
            return
        self.seen.add(id(value))
        _kind_of(kind)(self, value)  # type: ignore[arg-type]  # classes are hashable


def _immutable_container(walk: _Walk, value: Any) -> None:
    walk.push(value)


def _mutable_container(walk: _Walk, value: Any) -> None:
    walk.changeable = True
    if issubclass(type(value), dict):
        walk.count(len(value))  # the keys
        walk.stack.extend(dict.keys(value))
        walk.push(dict.values(value))
    else:
        walk.push(value)


def _bytearray(walk: _Walk, value: bytearray) -> None:
    walk.changeable = True
    walk.nbytes += len(value)


def _opaque_trusted(walk: _Walk, value: Any) -> None:
    """An object of a trusted library or the standard library that podcode does not walk:
    its buffer's size where it has one."""
    walk.changeable = True
    size = getattr(value, "nbytes", None)
    walk.nbytes += size if type(size) is int else _ATOM_BYTES


def _numpy_array(walk: _Walk, value: Any) -> None:
    if _file_backed(value):
        if value.flags.writeable:
            raise _Stop(Estimate(ON_DISK, reason=(
                "it is a writable memory-mapped file: its changes go to the file on disk, "
                "which podcode does not copy")))
        return  # read-only and on disk: cannot change, kept by reference
    if value.dtype.hasobject:
        walk.changeable = True
        walk.push(value.flat, count=value.size)
        return
    if value.flags.writeable:
        walk.changeable = True
        walk.nbytes += int(value.nbytes)


def _file_backed(array: Any) -> bool:
    """Whether ``array``'s memory is a memory-mapped file (``np.memmap``, ``np.load(...,
    mmap_mode=...)``, or a view of one)."""
    numpy = sys.modules["numpy"]
    base = array
    while base is not None:
        if issubclass(type(base), (numpy.memmap, mmap.mmap)):
            return True
        base = getattr(base, "base", None) if issubclass(type(base), numpy.ndarray) else None
    return False


def _torch_tensor(walk: _Walk, value: Any) -> None:
    try:
        device = value.device
        nbytes = value.untyped_storage().nbytes()
    except Exception as exc:  # sparse, nested, functional tensors: no plain storage
        reason = f"a tensor without a plain storage ({exc})"
        raise _Stop(Estimate(AT_FAILURE, reason=reason)) from None
    _on_host(device)
    walk.changeable = True
    walk.nbytes += int(nbytes)


def _torch_storage(walk: _Walk, value: Any) -> None:
    _on_host(value.device)
    walk.changeable = True
    walk.nbytes += int(value.nbytes())


def _on_host(device: Any) -> None:
    if device.type != "cpu":
        raise _Stop(Estimate(AT_FAILURE, reason=(
            f"it holds a tensor on {device}, which is not copied to the host at every call")))


def _pandas(walk: _Walk, value: Any) -> None:
    """A DataFrame, Series or Index: its columns' memory (from their NumPy dtypes when all
    have one: ``memory_usage`` builds a Series per column, half a millisecond); object
    columns are walked by count (their objects are pickled in band). An Index cannot
    change in place."""
    if issubclass(type(value), sys.modules["pandas"].Index):
        return
    walk.changeable = True
    dtypes = list(value.dtypes) if hasattr(value, "columns") else [value.dtype]
    if all(type(dtype).__module__.startswith("numpy") for dtype in dtypes):
        index = getattr(value, "index", None)
        walk.nbytes += sum(dtype.itemsize for dtype in dtypes) * len(value) + int(
            getattr(index, "nbytes", 0))
    else:
        usage = value.memory_usage(deep=False)
        walk.nbytes += int(usage.sum() if hasattr(usage, "sum") else usage)
    objects = sum(1 for dtype in dtypes if _python_objects(dtype))
    if objects:
        walk.count(objects * len(value))
        walk.nbytes += objects * len(value) * _ATOM_BYTES


def _python_objects(dtype: Any) -> bool:
    """Whether a pandas column of ``dtype`` holds Python objects (pickled one by one)."""
    return bool(getattr(dtype, "hasobject", False)) or getattr(dtype, "storage", None) == "python"


def _instance(walk: _Walk, value: Any) -> None:
    """A plain instance (no pickling code of its own): its ``__dict__`` and slots."""
    walk.changeable = True
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except AttributeError:
        attributes = None
    if type(attributes) is dict:
        walk.push(dict.values(attributes))
    for name in _slots(type(value)):
        try:
            walk.push((object.__getattribute__(value, name),))
        except AttributeError:
            continue


def _method(walk: _Walk, value: Any) -> None:
    """A bound method pickles its object (and its function by name)."""
    walk.push((value.__self__,))


def _partial(walk: _Walk, value: Any) -> None:
    walk.changeable = True
    walk.push((value.func, *value.args, *value.keywords.values()))


def _unchangeable(walk: _Walk, value: Any) -> None:
    """Enum members, and Arrow data (immutable): nothing to keep."""


def _reason(text: str) -> Any:
    def stop(walk: _Walk, value: Any) -> None:
        raise _Stop(Estimate(AT_FAILURE, reason=text))

    return stop


@functools.lru_cache(maxsize=4096)
def _kind_of(kind: type) -> Any:
    """How values of ``kind`` are walked (once per class)."""
    if kind in _IMMUTABLE_CONTAINERS:
        return _immutable_container
    if kind in _MUTABLE_CONTAINERS:
        return _mutable_container
    if kind is bytearray:
        return _bytearray
    if kind in _SPECIAL:
        return _SPECIAL[kind]
    top = (getattr(kind, "__module__", None) or "").partition(".")[0]
    if top == "numpy":
        numpy = sys.modules["numpy"]
        if issubclass(kind, numpy.ndarray):
            return _numpy_array
        return _unchangeable if issubclass(kind, numpy.generic) else _opaque_trusted
    torch: Any = sys.modules.get("torch")
    if torch is not None and issubclass(kind, torch.Tensor):
        return _torch_tensor if _own_code(kind) is None else _reason(_own_code_reason(kind))
    if top == "torch":
        if issubclass(kind, (torch.UntypedStorage, torch.storage.TypedStorage)):
            return _torch_storage
        return _instance if issubclass(kind, torch.nn.Module) else _opaque_trusted
    if top == "pandas":
        return _pandas if hasattr(kind, "memory_usage") else _opaque_trusted
    if top == "pyarrow" or issubclass(kind, enum.Enum):
        return _unchangeable
    own = _own_code(kind)
    if own is not None:
        return _reason(_own_code_reason(kind))
    if top in sys.stdlib_module_names or top in TRUSTED_LIBRARIES:
        return _opaque_trusted
    if kind.__flags__ & _HEAPTYPE:  # a class statement's: pickled from its __dict__, slots
        return _instance
    return _reason(f"podcode does not copy a {_name(kind)} at every call")


_HEAPTYPE = 1 << 9
"""``Py_TPFLAGS_HEAPTYPE``: a class made by a class statement (not an extension's C type)."""
_SPECIAL = {
    types.MethodType: _method,
    functools.partial: _partial,
    types.SimpleNamespace: _instance,
}


def _slots(kind: type) -> tuple[str, ...]:
    names: list[str] = []
    for klass in kind.__mro__:
        slots = vars(klass).get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return tuple(name for name in names if name not in ("__dict__", "__weakref__"))


def _own_code(kind: type) -> str | None:
    """The first method in :data:`SELF_PICKLING` (and, for a dict or list subclass, the
    one pickle iterates it with) that ``kind`` takes from untrusted code; a reducer
    registered with ``copyreg`` counts too."""
    names = list(SELF_PICKLING)
    if issubclass(kind, dict):
        names += ["items", "__iter__"]
    elif issubclass(kind, (list, set)):
        names.append("__iter__")
    for name in names:
        for klass in kind.__mro__:
            if name in vars(klass):
                if not _trusted(klass):
                    return name
                break
    reducer = copyreg.dispatch_table.get(kind)
    if reducer is not None and not _trusted_module(getattr(reducer, "__module__", None)):
        return "a copyreg reducer"
    return None


def _own_code_reason(kind: type) -> str:
    return (f"its class {_name(kind)} defines {_own_code(kind)}, code of its own that podcode "
            "does not run at every call")


def _trusted(klass: type) -> bool:
    return klass is object or _trusted_module(klass.__module__)


def _trusted_module(module: str | None) -> bool:
    top = (module or "").partition(".")[0]
    return top in sys.stdlib_module_names or top in TRUSTED_LIBRARIES


def _name(kind: type) -> str:
    module = getattr(kind, "__module__", "") or ""
    qualname = getattr(kind, "__qualname__", kind.__name__)
    return qualname if module in ("builtins", "__main__") else f"{module}.{qualname}"

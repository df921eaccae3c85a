"""What the call may copy, decided by exact type identity while it is copied.

The snapshot (:mod:`interactive.inputs.snapshot`) runs at every call of an enabled task,
and almost every call succeeds, so it must not run any code of the task's arguments, nor
raise, nor cost more than what it keeps. It pickles each argument with
:class:`CallPickler`, which trusts types by identity only:

- a type is never hashed or compared (a metaclass may define ``__eq__`` or ``__hash__``):
  it is looked up by ``id()`` in tables that hold it (so no other object can have that
  id), then checked with ``is``; a class's names and flags are read through ``type``'s own
  descriptors, never through the class's attributes;
- the C pickler saves exact ``int``, ``float``, ``str``, ``bytes``, ``bytearray``,
  ``list``, ``tuple``, ``dict``, ``set``, ``frozenset``, ``None`` and ``bool`` by itself,
  without calling back into Python; every other object reaches
  :meth:`CallPickler.reducer_override`, which hands it to the rule of its exact type or
  refuses it (:class:`Refused`): that argument is then named, not kept, and left to the
  capture at the failure;
- trusted exactly: the built-in containers and numbers, ``collections``'s containers,
  ``types.SimpleNamespace``, ``argparse.Namespace``, ``array.array``, ``memoryview``,
  ``functools.partial``, bound methods, ``object()``, members of an ``Enum``, NumPy arrays
  and memory maps, PyTorch CPU tensors, parameters and storages, a few immutable standard
  types (dates, ``Decimal``, ``Fraction``, ``UUID``, paths), and the classes of NumPy,
  PyTorch, pandas and pyarrow themselves (found again under their own name in their own
  module, so a subclass or a look-alike is not). Subclasses of all of these, user classes
  and dataclasses are refused: copying them means running or trusting their code;
- a class or function inside an argument is pickled by name only when its exact-``str``
  module and name find it again through plain dictionaries of an exact module;
- an object's own ``__dict__`` may hide a method that pickling looks up (a
  ``__reduce_ex__`` set on the instance): a trusted object whose ``__dict__`` shadows
  anything of its class but a plain default value is refused (:func:`clean_instance`).

Size is decided before anything is copied: an array, tensor storage, ``array.array``,
``memoryview`` or ``bytearray`` is checked against the room left (:meth:`CallPickler.need`)
before its bytes are touched; buffers go out of band and are copied only once the whole
argument is known to fit. The pickle of the Python objects themselves is counted as the C
pickler writes it, a 64 KiB frame at a time, and stopped at :data:`MAX_OBJECT_BYTES`; a
top-level container longer than that is stopped before it starts.
"""

from __future__ import annotations

import abc
import array
import collections
import copyreg
import enum
import functools
import mmap
import pickle
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

BIG_BYTES = 1 << 20
"""``bytes`` and ``bytearray`` arguments at least this large go out of band."""
MAX_OBJECT_BYTES = 256 << 10
"""The most bytes the pickle of an argument's Python objects may take at the call (array
and tensor buffers are not counted here, but against ``max_snapshot_bytes``). Small objects
cost about 4 ms per MiB to copy, so a bigger structure is left for the failure: stopping
there costs at most what pickling this much does."""
TRUSTED_LIBRARIES = frozenset({"numpy", "torch", "pandas", "pyarrow"})
"""Packages whose own classes are trusted to pickle themselves at the call."""
UNCHANGING_LIBRARIES = frozenset({"pyarrow"})
"""Packages whose objects cannot change in place (Arrow data): nothing to keep."""

_type_flags: Callable[[type], int] = type.__dict__["__flags__"].__get__
_type_mro: Callable[[type], tuple[type, ...]] = type.__dict__["__mro__"].__get__
_type_dict: Callable[[type], Any] = type.__dict__["__dict__"].__get__
_type_module: Callable[[type], Any] = type.__dict__["__module__"].__get__
_type_qualname: Callable[[type], Any] = type.__dict__["__qualname__"].__get__
_type_dictoffset: Callable[[type], int] = type.__dict__["__dictoffset__"].__get__
_type_basicsize: Callable[[type], int] = type.__dict__["__basicsize__"].__get__
_module_dict: Callable[[types.ModuleType], Any] = vars(types.ModuleType)["__dict__"].__get__
_instance_getattr = object.__getattribute__
_STR_SUBCLASS = 1 << 28
_TYPE_SUBCLASS = 1 << 31
_ABSENT = object()
_NEWOBJ: Callable[..., Any] = copyreg.__newobj__  # type: ignore[attr-defined]


def _ids(*kinds: type) -> frozenset[int]:
    return frozenset(id(kind) for kind in kinds)


ATOMS = _ids(
    int, float, bool, str, bytes, type(None), complex, range, slice, type(Ellipsis),
    type(NotImplemented), types.FunctionType, types.BuiltinFunctionType, type,
)
"""``id()`` of the types whose values cannot change in place (functions and classes are
pickled by name): such an argument costs one look-up. These types live as long as the
interpreter, so no other object can have their ids."""
_PLAIN_DATA = _ids(type(None), bool, int, float, str, bytes, tuple, frozenset)
"""A class attribute of one of these types is a default value: an instance may shadow it."""
_CONTAINERS = _ids(list, tuple, set, frozenset)
_STATELESS_BASES = _ids(int, float, complex, str, bytes)
_MUTABLE = _ids(list, dict, set, bytearray)
_SPECIAL_TYPES = (type(None), type(NotImplemented), type(Ellipsis))
"""Classes that pickle saves by their own rule, not by their (unreachable) names."""


class Refused(Exception):
    """An object the call does not copy; the message says which and why, as the session
    shows it ("it holds a ...")."""


class OverBudget(Exception):
    """The argument does not fit in what is left of ``max_snapshot_bytes``."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


Rule = Callable[["CallPickler", Any], Any]
"""How objects of one exact type are pickled at the call: ``NotImplemented`` (pickle's own
way, which runs only trusted code for that type), a reduce tuple, or :class:`Refused`."""


class Budget:
    """What one argument's pickle takes: its bytes as the C pickler flushes them (a frame,
    or a large payload, at a time), stopped once they pass :data:`MAX_OBJECT_BYTES`; its
    out-of-band buffers, the writable ones counted against ``room`` as they come."""

    __slots__ = ("room", "chunks", "written", "copied", "buffers", "views")

    def __init__(self, room: int) -> None:
        self.room = room
        self.chunks: list[bytes] = []
        self.written = 0
        self.copied = 0
        """Bytes of the buffers that will be copied (writable ones, and copies made here)."""
        self.buffers: list[pickle.PickleBuffer] = []
        self.views: list[memoryview] = []

    def write(self, data: Any) -> int:
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        if self.written + size > MAX_OBJECT_BYTES:
            raise Refused(too_many_objects())
        self.written += size
        self.chunks.append(data if type(data) is bytes else bytes(data))  # a live bytearray
        return size

    def need(self, size: int) -> None:
        """Raise :class:`OverBudget` unless ``size`` more bytes fit in the room left."""
        total = self.written + self.copied + size
        if total > self.room:
            raise OverBudget(total)

    def buffer(self, buffer: pickle.PickleBuffer) -> bool:
        view = buffer.raw()
        if not view.readonly:
            self.need(view.nbytes)
            self.copied += view.nbytes
        self.buffers.append(buffer)
        self.views.append(view)
        return False  # out of band

    def release(self) -> None:
        """Let go of the pickle and the buffers (the arrays they export can be resized
        again), ready for the next argument."""
        for view in self.views:
            view.release()
        self.views = []
        self.buffers = []
        self.chunks = []
        self.written = self.copied = 0


class CallPickler(pickle.Pickler):
    """Pickles one argument at a time (protocol 5) with the rules of :data:`_RULES`,
    refusing every other type; writable buffers out of band, checked against the room left
    before they are copied (:meth:`need`). Made once and reused (:func:`pickler`): its
    memo, budget and decisions are reset for each argument."""

    def __init__(self) -> None:
        self.budget = Budget(0)
        super().__init__(self.budget, protocol=5, buffer_callback=self.budget.buffer)
        self.need = self.budget.need
        self.argument: Any = None
        self.decided: dict[int, tuple[type, Rule]] = {}
        self.storages: Any = None

    def pickle(self, argument: Any, room: int) -> bytes:
        """``argument`` pickled, within ``room`` bytes; its buffers in :attr:`budget`."""
        self.argument = argument
        self.budget.room = room
        self.dump(argument)
        return b"".join(self.budget.chunks)

    def reset(self) -> None:
        """Forget the last argument (its objects, buffers and types), ready for the next."""
        self.clear_memo()
        self.budget.release()
        self.argument = self.storages = None
        self.decided.clear()

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        entry = _RULES.get(id(kind)) or self.decided.get(id(kind))
        if entry is None or entry[0] is not kind:
            entry = self.decided[id(kind)] = (kind, _rule_for(kind))
        return entry[1](self, obj)

    def what(self, obj: Any) -> str:
        """How a reason starts: "it is" for the argument itself, "it holds" for a part."""
        return "it is" if obj is self.argument else "it holds"


_IDLE: list[CallPickler] = []
"""Picklers not in use. ``list.pop`` and ``append`` are atomic: two threads, or a task
called from a signal handler in the middle of a snapshot, never share one."""


def pickler() -> CallPickler:
    """A pickler for one argument; give it back with :func:`done`."""
    try:
        return _IDLE.pop()
    except IndexError:
        return CallPickler()


def done(used: CallPickler) -> None:
    """Take back a pickler: kept for the next argument only after a small pickle (its memo
    table and output buffer keep their largest size, and are cleared whole at each use)."""
    small = used.budget.written <= _POOLED_BYTES
    used.reset()
    if small and len(_IDLE) < 4:
        _IDLE.append(used)


_POOLED_BYTES = 1024


def too_many_objects() -> str:
    return (f"its Python objects take more than {MAX_OBJECT_BYTES >> 10} KiB to pickle, "
            "too many to copy at every call")


def object_floor(value: Any) -> int:
    """At least how many bytes the pickle of a top-level built-in container takes (one
    byte per item at least, two per dict entry), without looking at its items."""
    kind = type(value)
    if id(kind) in _CONTAINERS:
        return len(value)
    return 2 * len(value) if kind is dict else 0


# -- reading a class without running its code ----------------------------------------


def text(value: Any) -> str | None:
    """``value`` as an exact ``str`` without running its code (a ``str`` subclass is
    copied by ``str``'s own method); None for anything else."""
    if type(value) is str:
        return value
    if _type_flags(type(value)) & _STR_SUBCLASS:
        return str.__str__(value)
    return None


def describe(kind: type) -> str:
    """``module.qualname`` of ``kind``, read through ``type``'s descriptors; a name that is
    not a string is left out."""
    try:
        qualname = text(_type_qualname(kind)) or "?"
        module = text(_type_module(kind))
    except Exception:  # a class whose __dict__ lost its __module__
        return "object of an unnamed class"
    return qualname if module in (None, "builtins", "__main__") else f"{module}.{qualname}"


def reachable(obj: Any, module: Any, qualname: Any) -> bool:
    """Whether ``module.qualname`` names ``obj`` itself, found through the ``__dict__`` of
    an exact module and of classes whose metaclass is exactly ``type`` (what pickle will
    then find again by name)."""
    if type(module) is not str or type(qualname) is not str:
        return False
    namespace = sys.modules.get(module)
    if type(namespace) is not types.ModuleType:
        return False
    scope = _module_dict(namespace)
    found: Any = None
    for part in qualname.split("."):
        if scope is None:
            return False
        found = scope.get(part)
        scope = _type_dict(found) if type(found) is type else None
    return found is obj


def library_class(kind: type) -> bool:
    """Whether ``kind`` is one of the classes of :data:`TRUSTED_LIBRARIES`, found there
    under its own name (a subclass defined elsewhere, or a look-alike, is not)."""
    known = _LIBRARY.get(id(kind))
    if known is kind:
        return True
    try:
        module, qualname = _type_module(kind), _type_qualname(kind)
    except AttributeError:
        return False
    if type(module) is not str or module.partition(".")[0] not in TRUSTED_LIBRARIES:
        return False
    if not reachable(kind, module, qualname):
        return False
    _LIBRARY[id(kind)] = kind  # held: its id cannot be reused
    return True


_LIBRARY: dict[int, type] = {}


def clean_instance(obj: Any, kind: type) -> bool:
    """Whether the instance ``__dict__`` of ``obj`` (of trusted ``kind``) hides nothing
    pickling looks up: no dunder name, nothing that shadows its class's attributes other
    than a plain default value."""
    if not _type_dictoffset(kind):
        return True
    try:
        attributes = _instance_getattr(obj, "__dict__")
    except AttributeError:
        return True
    if type(attributes) is not dict:
        return False
    if not attributes:
        return True
    classes = [_type_dict(klass) for klass in _type_mro(kind)]
    for key in attributes:
        if type(key) is not str or (key.startswith("__") and key.endswith("__")):
            return False
        for scope in classes:
            found = scope.get(key, _ABSENT)
            if found is not _ABSENT and id(type(found)) not in _PLAIN_DATA:
                return False
    return True


def unchanging(value: Any) -> bool:
    """Whether the argument cannot change in place, decided by its exact type: numbers,
    strings, bytes, small tuples of them, classes and functions (pickled by name), members
    of an Enum, read-only arrays and memory maps, NumPy scalars, Arrow data."""
    return _unchanging(value, 3)


def _unchanging(value: Any, depth: int) -> bool:
    kind = type(value)
    if id(kind) in ATOMS:
        return True
    if id(kind) in _MUTABLE:
        return False
    if kind is tuple or kind is frozenset:
        return depth > 0 and len(value) <= 16 and all(
            _unchanging(item, depth - 1) for item in value)
    if _type_flags(kind) & _TYPE_SUBCLASS or type(kind) is enum.EnumMeta:
        return True  # a class, or an Enum member
    base = _stateless_base(kind)
    if base is not None:  # a NamedTuple, a str subclass: its base's value only
        return base is not tuple or depth > 0 and tuple.__len__(value) <= 16 and all(
            _unchanging(item, depth - 1) for item in tuple.__iter__(value))
    numpy = sys.modules.get("numpy")
    if numpy is not None and (kind is numpy.ndarray or kind is numpy.memmap):
        return not numpy.ndarray.flags.__get__(value).writeable and not (
            numpy.ndarray.dtype.__get__(value).hasobject)
    if library_class(kind):
        top = text(_type_module(kind)) or ""
        return top.partition(".")[0] in UNCHANGING_LIBRARIES or (
            numpy is not None and any(klass is numpy.generic for klass in _type_mro(kind)))
    return False


def _stateless_base(kind: type) -> type | None:
    """The unchanging built-in type (``tuple``, ``str``, ``int``...) that ``kind`` derives
    from without adding any state (no ``__dict__``, no slots); None if there is none."""
    mro = _type_mro(kind)
    if len(mro) < 3 or _type_dictoffset(kind):
        return None
    base = mro[-2]  # the last before object
    if base is not tuple and id(base) not in _STATELESS_BASES:
        return None
    return base if _type_basicsize(kind) == _type_basicsize(base) else None


# -- the rules ---------------------------------------------------------------------------


def _as_is(pickler: CallPickler, obj: Any) -> Any:
    """A trusted type without an instance ``__dict__``: its own (trusted) reduction."""
    return NotImplemented


def _checked(pickler: CallPickler, obj: Any) -> Any:
    """A trusted type with an instance ``__dict__``: its own reduction, once the
    ``__dict__`` is known to hide nothing."""
    _require_clean(pickler, obj)
    return NotImplemented


def _require_clean(pickler: CallPickler, obj: Any) -> None:
    kind = type(obj)
    if not clean_instance(obj, kind):
        raise Refused(f"{pickler.what(obj)} {_a(describe(kind))} whose own attributes hide "
                      "its class's methods, which podcode does not copy")


def _plain(pickler: CallPickler, obj: Any) -> Any:
    """A trusted plain class (``UserList``, ``Namespace``...): rebuilt from its
    ``__dict__``, read directly (nothing is looked up on the instance)."""
    kind = type(obj)
    try:
        state = _instance_getattr(obj, "__dict__")
    except AttributeError:
        state = None
    if state is not None and type(state) is not dict:
        raise Refused(f"{pickler.what(obj)} {_a(describe(kind))} whose __dict__ is not a dict")
    return (_NEWOBJ, (kind,), state or None)


def _global(pickler: CallPickler, obj: Any) -> Any:
    """A class or function: pickled by name, when the name finds it again."""
    if not _type_flags(type(obj)) & _TYPE_SUBCLASS:
        module, qualname = obj.__module__, obj.__qualname__  # a function's own slots
    elif any(obj is special for special in _SPECIAL_TYPES):
        return NotImplemented
    else:
        module, qualname = _type_module(obj), _type_qualname(obj)
    if not reachable(obj, module, qualname):
        name = text(qualname) or "?"
        raise Refused(f"{pickler.what(obj)} {name}, which cannot be pickled by its name "
                      "(defined inside a function, or renamed)")
    return NotImplemented


def _builtin(pickler: CallPickler, obj: Any) -> Any:
    """A built-in function (by name) or a built-in method (``getattr(its object, name)``)."""
    owner = obj.__self__
    if owner is None or type(owner) is types.ModuleType:
        return _global(pickler, obj)
    return (getattr, (owner, obj.__name__))


def _method(pickler: CallPickler, obj: Any) -> Any:
    """A bound method of a Python function: ``getattr(its object, name)``."""
    function = obj.__func__
    if type(function) is not types.FunctionType:
        raise Refused(f"{pickler.what(obj)} a method bound to "
                      f"{_a(describe(type(function)))}")
    return (getattr, (obj.__self__, function.__name__))


def _enum_member(pickler: CallPickler, obj: Any) -> Any:
    """A member of an Enum: ``getattr(its class, name)``, the name read from the member's
    own ``__dict__`` and checked against the class's members."""
    kind = type(obj)
    members = _type_dict(kind).get("_member_map_")
    state = _instance_getattr(obj, "__dict__") if _dict_is_plain(kind) else None
    name = state.get("_name_") if type(state) is dict else None
    if type(name) is not str or type(members) is not dict or members.get(name) is not obj:
        raise Refused(f"{pickler.what(obj)} a member of {describe(kind)} that podcode cannot "
                      "name at the call")
    return (getattr, (kind, name))


def _dict_is_plain(kind: type) -> bool:
    """Whether instances of ``kind`` reach their ``__dict__`` through ``type``'s own
    descriptor (no class defines ``__dict__`` as something else)."""
    for klass in _type_mro(kind):
        found = _type_dict(klass).get("__dict__", None)
        if found is not None and type(found) is not types.GetSetDescriptorType:
            return False
    return True


def _array(pickler: CallPickler, obj: array.array[Any]) -> Any:
    """``array.array``: sized first, its buffer out of band."""
    pickler.need(len(obj) * obj.itemsize)
    return (rebuild_array, (obj.typecode, pickle.PickleBuffer(obj)))


def rebuild_array(typecode: str, data: Any) -> array.array[Any]:
    """An ``array.array`` from its bytes (how a snapshot's arrays load)."""
    rebuilt = array.array(typecode)
    rebuilt.frombytes(data)
    return rebuilt


def _memoryview(pickler: CallPickler, obj: memoryview) -> Any:
    """A ``memoryview``: sized first, its bytes out of band (by reference if read-only)."""
    if not obj.readonly:
        pickler.need(obj.nbytes)
    return (memoryview, (pickle.PickleBuffer(obj),))


def _ndarray(pickler: CallPickler, obj: Any) -> Any:
    """An exact NumPy array or memory map: a writable memory map is on disk (not copied);
    the buffer is sized before numpy's reduction hands it out (out of band, so nothing is
    copied yet); a non-contiguous array, which numpy would copy in band, is copied once
    here, after its size is checked."""
    numpy = sys.modules["numpy"]
    ndarray, kind = numpy.ndarray, type(obj)
    if kind is not ndarray:
        _require_clean(pickler, obj)
    flags = ndarray.flags.__get__(obj)
    if flags.writeable and _file_backed(obj, numpy):
        raise Refused(f"{pickler.what(obj)} a writable memory-mapped file: its changes go to "
                      "the file on disk, which podcode does not copy")
    if ndarray.dtype.__get__(obj).hasobject:
        return _object_array(pickler, obj, numpy)
    size = ndarray.nbytes.__get__(obj)
    if not (flags.c_contiguous or flags.f_contiguous):
        pickler.need(size)
        copy = numpy.ascontiguousarray(obj)
        copy.flags.writeable = False  # a private copy: kept by reference, not copied again
        pickler.budget.copied += size
        return ndarray.__reduce_ex__(copy, 5)
    if flags.writeable:
        pickler.need(size)
    if kind is ndarray:
        return NotImplemented
    return ndarray.__reduce_ex__(ndarray.view(obj, ndarray), 5)  # a map: a plain array


def _object_array(pickler: CallPickler, obj: Any, numpy: Any) -> Any:
    """An array of Python objects: its items are pickled one by one (through these rules);
    records holding objects are refused."""
    ndarray = numpy.ndarray
    if type(obj) is not ndarray or ndarray.dtype.__get__(obj).kind != "O":
        raise Refused(f"{pickler.what(obj)} a NumPy array of records holding Python objects")
    if ndarray.size.__get__(obj) > MAX_OBJECT_BYTES:
        raise Refused(too_many_objects())
    return NotImplemented


def _file_backed(array: Any, numpy: Any) -> bool:
    """Whether the memory of ``array`` is a memory-mapped file (``np.memmap``,
    ``np.load(..., mmap_mode=...)``, or a view of one)."""
    base = array
    for _ in range(64):
        kind = type(base)
        if kind is numpy.memmap or kind is mmap.mmap:
            return True
        if kind is not numpy.ndarray:
            return False
        base = numpy.ndarray.base.__get__(base)
    return False


def _tensor(pickler: CallPickler, obj: Any) -> Any:
    """An exact PyTorch tensor or parameter: on the CPU, strided; torch's own reduction
    then reaches its storage (:func:`_storage`)."""
    torch = sys.modules["torch"]
    _require_clean(pickler, obj)
    if obj.layout is not torch.strided:
        raise Refused(f"{pickler.what(obj)} a {obj.layout} tensor, which podcode does not copy "
                      "at the call")
    _on_host(pickler, obj, obj.device)
    return NotImplemented


def _storage(pickler: CallPickler, obj: Any) -> Any:
    """A PyTorch storage: sized (once, however many tensors share it) before its bytes go
    out of band (:class:`interactive.inputs.tensors.Storages`)."""
    from interactive.inputs import tensors

    torch = sys.modules["torch"]
    _require_clean(pickler, obj)
    typed = type(obj) is torch.storage.TypedStorage
    untyped = obj._untyped_storage if typed else obj
    if type(untyped) is not torch.UntypedStorage:
        raise Refused(f"{pickler.what(obj)} a storage over a {describe(type(untyped))}")
    _require_clean(pickler, untyped)
    _on_host(pickler, obj, untyped.device)
    if pickler.storages is None:
        pickler.storages = tensors.Storages(torch)
    if not pickler.storages.has(untyped):
        pickler.need(untyped.nbytes())
    return pickler.storages.reduce(untyped, obj.dtype if typed else torch.uint8)


def _on_host(pickler: CallPickler, obj: Any, device: Any) -> None:
    if device.type != "cpu":
        raise Refused(f"{pickler.what(obj)} a tensor on {device}, which is not copied to the "
                      "host at every call")


def _library_array(pickler: CallPickler, obj: Any) -> Any:
    """A NumPy array subclass of :data:`TRUSTED_LIBRARIES` (``np.ma.MaskedArray``...):
    numpy pickles it in band, so it is sized first."""
    _require_clean(pickler, obj)
    size = sys.modules["numpy"].ndarray.nbytes.__get__(obj)
    if size > MAX_OBJECT_BYTES:
        raise Refused(f"{pickler.what(obj)} {_a(describe(type(obj)))} of {size:,} bytes, which "
                      "numpy copies in band: too much to copy at every call")
    pickler.need(size)
    return NotImplemented


def _library_rule(kind: type) -> Rule:
    """An object of a class of :data:`TRUSTED_LIBRARIES`: its own reduction, once its
    ``__dict__`` hides nothing (:func:`trust`)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and any(klass is numpy.ndarray for klass in _type_mro(kind)):
        return _library_array
    return _checked if _type_dictoffset(kind) else _as_is


def _refusal(kind: type) -> Rule:
    """The rule that refuses ``kind``, its reason written once."""
    base = next((klass for klass in _type_mro(kind)[1:] if id(klass) in _TRUSTED_BASES), None)
    of = f" (a subclass of {describe(base)})" if base is not None and base is not object else ""
    reason = (f"{_a(describe(kind))}{of}: podcode copies only built-in containers, arrays "
              "and tensors then, and never runs code of an argument's own classes")

    def refuse(pickler: CallPickler, obj: Any) -> Any:
        raise Refused(f"{pickler.what(obj)} {reason}")

    return refuse


def _refuse_metaclass(pickler: CallPickler, obj: Any) -> Any:
    raise Refused(f"{pickler.what(obj)} the class {describe(obj)}, whose metaclass "
                  f"{describe(type(obj))} podcode does not run at the call")


def _a(name: str) -> str:
    return f"an {name}" if name[:1] in ("a", "e", "i", "o", "u") else f"a {name}"


def _rule_for(kind: type) -> Rule:
    """The rule for a type first met in this pickle (the libraries loaded since are added
    to :data:`_RULES` first)."""
    refused = _REFUSED.get(id(kind))
    if refused is not None and refused[0]() is kind:
        return refused[1]
    if len(sys.modules) != _LOADED_COUNT[0]:
        _add_loaded_libraries()
    entry = _RULES.get(id(kind))
    if entry is not None and entry[0] is kind:
        return entry[1]
    if _type_flags(kind) & _TYPE_SUBCLASS:  # the object is a class, ``kind`` its metaclass
        return _global if library_class(kind) else _refuse_metaclass
    if type(kind) is enum.EnumMeta:
        return _enum_member
    if library_class(kind):
        rule = _library_rule(kind)
        trust(kind, rule)
        return rule
    if _cython_function(kind):
        trust(kind, _global)
        return _global
    rule = _refusal(kind)
    if len(_REFUSED) > 4096:
        _REFUSED.clear()
    _REFUSED[id(kind)] = (weakref.ref(kind), rule)
    return rule


_REFUSED: dict[int, tuple[weakref.ref[type], Rule]] = {}
"""``id(type)`` → the type, held weakly (it is not kept alive, and a dead one no longer
answers to its id), and the rule that refuses it."""


def _cython_function(kind: type) -> bool:
    """The function type of a Cython runtime (the functions pandas and pyarrow pickle
    their objects with): found, by identity, in a loaded ``_cython_*`` module (such a type
    keeps its instances' ``__module__`` in its ``__dict__``, not its own)."""
    qualname = _type_qualname(kind)
    if type(qualname) is not str or qualname not in _CYTHON_TYPES:
        return False
    for name, module in list(sys.modules.items()):
        if (type(name) is str and name.startswith("_cython_")
                and type(module) is types.ModuleType
                and _module_dict(module).get(qualname) is kind):
            return True
    return False


_CYTHON_TYPES = frozenset({"cython_function_or_method", "fused_cython_function"})


# -- the table ---------------------------------------------------------------------------


_RULES: dict[int, tuple[type, Rule]] = {}
"""``id(type)`` → the type itself (held, so the id is never reused) and its rule."""
_TRUSTED_BASES: set[int] = {id(object), *ATOMS, *_CONTAINERS, id(dict), id(bytearray)}
"""Types a refused subclass is said to come from."""
_LOADED: set[str] = set()
_LOADED_COUNT = [0]
"""``len(sys.modules)`` when the loaded libraries were last looked for."""


def trust(kind: type, rule: Rule | None = None) -> None:
    """Trust ``kind`` exactly: with ``rule``, or its own reduction (``__dict__`` checked
    where its instances have one)."""
    if rule is None:
        rule = _checked if _type_dictoffset(kind) else _as_is
    _RULES[id(kind)] = (kind, rule)
    _TRUSTED_BASES.add(id(kind))


_OWN_REDUCTION: tuple[type, ...] = (
    complex, range, slice, type(Ellipsis), type(NotImplemented), object,
    collections.OrderedDict, collections.Counter, collections.defaultdict, collections.deque,
    functools.partial)
_PLAIN: tuple[type, ...] = (
    collections.ChainMap, collections.UserDict, collections.UserList, collections.UserString,
    types.SimpleNamespace)
_BY_NAME: tuple[type, ...] = (type, abc.ABCMeta, enum.EnumMeta, types.FunctionType)
for _kind in _OWN_REDUCTION:
    trust(_kind)
for _kind in _PLAIN:
    trust(_kind, _plain)
for _kind in _BY_NAME:
    trust(_kind, _global)
trust(types.BuiltinFunctionType, _builtin)
trust(types.MethodType, _method)
trust(memoryview, _memoryview)
trust(array.array, _array)


def _add_loaded_libraries() -> None:
    """Trust the types of the modules imported since the last call (never imported here;
    one still being imported is tried again later)."""
    _LOADED_COUNT[0] = len(sys.modules)
    for name, add in _LIBRARY_RULES.items():
        if name not in _LOADED and name in sys.modules:
            try:
                add(sys.modules[name])
            except AttributeError:
                continue
            _LOADED.add(name)


def _add_numpy(numpy: Any) -> None:
    trust(numpy.ndarray, _ndarray)
    trust(numpy.memmap, _ndarray)
    trust(type(numpy.dtype), _global)  # the dtypes' metaclass, found under no name


def _add_torch(torch: Any) -> None:
    from interactive.inputs import tensors

    trust(torch.Tensor, _tensor)
    trust(torch.nn.Parameter, _tensor)
    trust(torch.UntypedStorage, _storage)
    trust(torch.storage.TypedStorage, _storage)
    trust(tensors.Carrier)


def _add_names(names: tuple[str, ...], rule: Rule | None = None) -> Callable[[Any], None]:
    def add(loaded: Any) -> None:
        for name in names:
            kind: Any = getattr(loaded, name, None)
            if _type_flags(type(kind)) & _TYPE_SUBCLASS:
                trust(kind, rule)

    return add


_LIBRARY_RULES: dict[str, Callable[[Any], None]] = {
    "numpy": _add_numpy,
    "torch": _add_torch,
    "argparse": _add_names(("Namespace",), _plain),
    "datetime": _add_names(("date", "time", "datetime", "timedelta", "timezone")),
    "decimal": _add_names(("Decimal",)),
    "fractions": _add_names(("Fraction",)),
    "uuid": _add_names(("UUID",)),
    "pathlib": _add_names((
        "PurePath", "PurePosixPath", "PureWindowsPath", "Path", "PosixPath", "WindowsPath")),
}
"""What is trusted of each module once something has imported it."""

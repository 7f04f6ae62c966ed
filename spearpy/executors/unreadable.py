"""What the parent can still read of a worker's message that pickle.loads
refused: a class only the worker has, a constructor that raises here.

A worker's write may combine several runs' messages (worker._Combined), so
one object nobody here can rebuild would otherwise lose them all. Read
again with the pure-Python unpickler, each object that cannot be rebuilt
becomes an `Unreadable` that says why, and the messages around it are
intact: procs.py then ends only the runs whose own message holds one. Only
a message that failed already is read this way (the Python unpickler is
far slower). It calls nothing the write does not name, as pickle.loads,
though it builds again what pickle.loads built before it failed and goes on
past the failure.
"""

from __future__ import annotations

import io
import pickle
import struct
from collections.abc import Callable
from typing import Any, cast

Message = tuple[Any, ...]


class Unreadable:
    """Stands where an object of the message could not be rebuilt. Whatever
    the unpickler does next with the object it stands for (calls it, sets
    its state, appends or stores into it) is absorbed."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def __call__(self, *args: Any, **kwargs: Any) -> Unreadable:
        return self  # a class or function the worker has and this process lacks

    def __setstate__(self, state: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


class _Salvager(pickle._Unpickler):
    """The Python unpickler, each opcode that finds or builds an object
    replaced by one that leaves an Unreadable where it fails."""

    stack: list[Any]  # the unpickler's, untyped in its stubs

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self._size = len(data)

    def load_bytearray8(self) -> None:
        # pickle._Unpickler allocates and zero-fills the declared length
        # before it reads (the C one does neither): a few bytes declaring
        # gigabytes would make the parent fill them.
        this: Any = self  # read, readinto and append are set by load()
        size = struct.unpack("<Q", this.read(8))[0]
        if size > self._size:
            raise pickle.UnpicklingError("a bytearray longer than the message")
        buffer = bytearray(size)
        this.readinto(buffer)
        this.append(buffer)

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except BaseException as exc:  # an import that raises SystemExit too
            return Unreadable(f"{module}.{name}: {_why(exc)}"[:300])

    def load_reduce(self) -> None:
        stack = self.stack
        args = stack.pop()
        try:
            stack[-1] = stack[-1](*args)
        except BaseException as exc:  # SystemExit too: a worker's object must not end the reader
            stack[-1] = Unreadable(_why(exc))

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        try:
            built = cls if isinstance(cls, Unreadable) else cls.__new__(cls, *args)
        except BaseException as exc:
            built = Unreadable(_why(exc))
        self.stack.append(built)

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        try:
            built = cls if isinstance(cls, Unreadable) else cls.__new__(cls, *args, **kwargs)
        except BaseException as exc:
            built = Unreadable(_why(exc))
        self.stack.append(built)

    def load_build(self) -> None:
        try:
            _BUILD(self)  # pops the state; the object stays
        except BaseException as exc:
            self.stack[-1] = Unreadable(_why(exc))

    def _instantiate(self, klass: Any, args: Any) -> None:  # INST and OBJ (protocols 0, 1)
        try:
            _INSTANTIATE(self, klass, args)
        except BaseException as exc:
            self.stack.append(Unreadable(_why(exc)))


_Op = Callable[[Any], None]
_BUILD: _Op = pickle._Unpickler.dispatch[pickle.BUILD[0]]
_INSTANTIATE: Callable[[Any, Any, Any], None] = \
    pickle._Unpickler._instantiate  # type: ignore[attr-defined]
_Salvager.dispatch = {**pickle._Unpickler.dispatch,
                      pickle.REDUCE[0]: cast(_Op, _Salvager.load_reduce),
                      pickle.NEWOBJ[0]: cast(_Op, _Salvager.load_newobj),
                      pickle.NEWOBJ_EX[0]: cast(_Op, _Salvager.load_newobj_ex),
                      pickle.BUILD[0]: cast(_Op, _Salvager.load_build),
                      pickle.BYTEARRAY8[0]: cast(_Op, _Salvager.load_bytearray8)}


def salvage(data: bytes) -> list[Message] | None:
    """The messages of a write the parent could not read, an Unreadable in
    place of each object that failed; None when not even that much can be
    read (not a pickle, cut short, not a message)."""
    try:
        message = _Salvager(data).load()
    except BaseException:  # as pickle.loads in the read loop: nothing may end it
        return None
    if not _is_message(message):
        return None
    parts = message[1] if message[0] == "batch" and isinstance(message[1], list) else [message]
    return parts if all(_is_message(part) for part in parts) else None


def sort_out(data: bytes, exc: BaseException) -> tuple[Message, str | None]:
    """What to handle of a write pickle.loads refused with `exc`, and why
    the worker must go (a message naming no run failed), if it must: a
    "batch" of the write's messages in order, each run's message that holds
    what could not be rebuilt replaced by ("unreadable", key, whether it was
    the run's end, why). The whole ones stay even when the worker must go:
    a run's end that was read is its end."""
    parts = salvage(data)
    if parts is None:
        return ("batch", []), f"a message from it could not be read ({_why(exc)})"
    kept: list[Message] = []
    stop = None
    for part in parts:
        try:
            bad = first_unreadable(part)
        except BaseException as err:  # an attribute lookup of one of its objects raised
            bad = Unreadable(_why(err))
        if bad is None:
            kept.append(part)
        elif part[0] in ("event", "end") and len(part) > 1 and isinstance(part[1], str):
            kept.append(("unreadable", part[1], part[0] == "end", bad.why))
        elif part[0] != "loaded" and stop is None:  # a count of cache hits is no loss
            stop = f"its {part[0][:40]!r} message could not be read ({bad.why})"
    return ("batch", kept), stop


def _is_message(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and isinstance(value[0], str)


def first_unreadable(value: Any) -> Unreadable | None:
    """The first Unreadable in `value`, looked for through containers and
    objects' attributes (a run's result, an event)."""
    seen: set[int] = set()
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, Unreadable):
            return item
        if item is None or isinstance(item, (str, bytes, bytearray, int, float)) or \
                id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo.extend(item)
        else:
            state = getattr(item, "__dict__", None)
            if isinstance(state, dict):
                todo.extend(state.values())
            for cls in type(item).__mro__:
                slots = cls.__dict__.get("__slots__", ())
                for slot in (slots,) if isinstance(slots, str) else slots:
                    todo.append(getattr(item, slot, None))
    return None

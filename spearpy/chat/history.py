"""A session's messages, kept also as the JSON array a request sends.

Every completion sends the whole conversation; encoding it again each time
cost ~1 us per message (210 us at 200 messages), so a long conversation paid
more per iteration than a short one. Messages are never changed once
appended (the session and the loop only append new dicts), so each is
encoded once, the first time a request needs it, onto the end of the array
built so far; a request copies that array once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, SupportsIndex

from spearpy import _json
from spearpy.chat.protocol import JSONDict


class History(list[JSONDict]):
    """A list of messages (it is one, for every reader) that also keeps the
    compact JSON array of them. Appending extends the array; any other change
    to the list makes the next request encode it again from the start."""

    __slots__ = ("_array", "_encoded")

    def __init__(self, messages: Iterable[JSONDict] = ()) -> None:
        super().__init__(messages)
        self._array = bytearray(b"[")
        self._encoded = 0  # how many messages the array holds

    def encoded(self) -> bytes:
        """compact_bytes(list(self)), encoding only what was appended since last time."""
        array, done = self._array, self._encoded
        for message in self[done:]:
            part = _json.compact_bytes(message)  # may raise: the array is left whole
            if done:
                array += b","
            array += part
            done += 1
            self._encoded = done
        array += b"]"
        try:
            return bytes(array)
        finally:
            del array[-1]

    def _restart(self) -> None:
        self._array = bytearray(b"[")
        self._encoded = 0

    # Everything that changes the list other than at its end starts over.

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._restart()

    def __delitem__(self, index: SupportsIndex | slice) -> None:
        super().__delitem__(index)
        self._restart()

    def __imul__(self, count: SupportsIndex) -> History:
        super().__imul__(count)
        self._restart()
        return self

    def insert(self, index: SupportsIndex, value: JSONDict) -> None:
        super().insert(index, value)
        self._restart()

    def pop(self, index: SupportsIndex = -1) -> JSONDict:
        value = super().pop(index)
        self._restart()
        return value

    def remove(self, value: JSONDict) -> None:
        super().remove(value)
        self._restart()

    def clear(self) -> None:
        super().clear()
        self._restart()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        super().sort(*args, **kwargs)
        self._restart()

    def reverse(self) -> None:
        super().reverse()
        self._restart()

"""A session's messages, each also kept in its wire encoding.

Every completion sends the whole conversation; encoding it again each time
cost ~1 us per message (210 us at 200 messages), so a long conversation paid
more per iteration than a short one. Messages are never changed once
appended (the session and the loop only append new dicts), so each is
encoded once, the first time a request needs it, and a request joins the
encoded parts.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import is_

from spearpy import _json
from spearpy.chat.protocol import JSONDict


class History(list[JSONDict]):
    """A list of messages (it is one, for every reader) that also knows the
    compact JSON of each; the encoding follows whatever the list holds."""

    __slots__ = ("_encoded", "_of")

    def __init__(self, messages: Iterable[JSONDict] = ()) -> None:
        super().__init__(messages)
        self._encoded: list[bytes] = []
        self._of: list[JSONDict] = []  # the message each part was made from

    def encoded(self) -> bytes:
        """compact_bytes(list(self)), from the parts kept so far plus the new ones."""
        encoded, of = self._encoded, self._of
        # A list changed other than by appending (replaced, removed, cleared)
        # starts over; the identity check costs ~1 us per 100 messages.
        if len(of) > len(self) or not all(map(is_, of, self)):
            encoded.clear()
            of.clear()
        for message in self[len(of):]:
            encoded.append(_json.compact_bytes(message))
            of.append(message)
        return b"[" + b",".join(encoded) + b"]"

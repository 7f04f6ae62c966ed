"""The digest a completion's journal step keeps of its request.

docs/durable.md: `request_sha256` is the sha256 of the canonical JSON
(sorted keys, no spaces, ASCII) of the request's messages, params, stream
flag and tools, scrubbed of the run's secrets.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from spearpy.journal._jsonenc import canonical_text
from spearpy.journal.lines import EncodedScrub
from spearpy.journal.records import canonical, kind_of, stored_request
from spearpy.observe.scrub import SecretScrubber

if TYPE_CHECKING:
    from spearpy.backends.base import CompletionRequest

# The canonical JSON of a completion's request is {"messages": [...],
# "params": ..., "stream": ..., "tools": ...} (keys sorted): these keys, and
# the spelling between the parts.
_REQUEST_KEYS = ("messages", "params", "stream", "tools")
_MESSAGES_OPEN = b'{"messages":['
_BOOLS = {True: b"true", False: b"false"}


class RequestDigests:
    """What a completion asks, as the journal compares it: the sha256 of the
    canonical JSON of {messages, params, stream, tools}, scrubbed (not the
    model: a fork may ask another, and a resume checks it with the flags at
    step 0; nor the timeout, deadline or callbacks, which say how it is
    asked, not what). docs/durable.md's `request_sha256`.

    A send's messages are one list that grows in place, and sha256 is fed
    in order: the digest is kept open after the messages so far and fed
    only those appended since the last completion, then a copy of it the
    rest of the request (re-encoding the whole conversation at every
    completion grew with it). Each message is scrubbed only when its text
    may hold a secret (EncodedScrub). Live and replay digest by the same
    steps."""

    __slots__ = ("_count", "_history", "_messages", "_params", "_scrub", "_scrubber", "_stream",
                 "_tail", "_tools", "_whole")

    def __init__(self) -> None:
        self._messages: list[Any] | None = None
        self._count = 0
        self._history = hashlib.sha256()
        self._params: Any = None
        self._stream: Any = None
        self._tools: Any = None
        self._tail: bytes | None = None  # the canonical request after its messages
        self._scrubber: SecretScrubber | None = None
        self._scrub: EncodedScrub | None = None
        self._whole = False  # a secret spells part of a key: digest the request whole

    def of(self, request: CompletionRequest, scrubber: SecretScrubber) -> str:
        if scrubber is not self._scrubber:
            # None when there is nothing to scrub: each message then skips the check.
            self._scrubber, self._scrub = scrubber, EncodedScrub(scrubber) if scrubber else None
            self._messages, self._tail = None, None
            self._whole = any(s in key for s in scrubber.secrets for key in _REQUEST_KEYS)
        if self._whole:
            # A "secret" that spells part of a key changes the keys' order: digest it whole.
            whole = {"messages": request.messages, "tools": request.tools,
                     "params": request.params, "stream": request.stream}
            whole_digest = stored_request(kind_of("chat.completion"), whole, scrubber)[1]
            assert whole_digest is not None
            return whole_digest
        messages = request.messages
        if messages is not self._messages or len(messages) < self._count:
            self._messages, self._count = messages, 0
            self._history = hashlib.sha256(_MESSAGES_OPEN)
        history, count = self._history, self._count
        for message in messages[count:]:
            history.update(b"," + self._canonical(message) if count else
                           self._canonical(message))
            count += 1
        self._count = count
        params, stream, tools = request.params, request.stream, request.tools
        tail = self._tail
        if tail is None or params is not self._params or tools is not self._tools or \
                stream is not self._stream:
            # A send asks with one params dict and one tools list (as the
            # messages list, not changed in place while it runs).
            self._params, self._stream, self._tools = params, stream, tools
            tail = self._tail = (
                b'],"params":' + self._canonical(params) + b',"stream":'
                + (_BOOLS[stream] if type(stream) is bool else self._canonical(stream))
                + b',"tools":' + self._canonical(tools) + b"}")
        digest = history.copy()
        digest.update(tail)
        return digest.hexdigest()

    def _canonical(self, value: Any) -> bytes:
        """canonical(scrubber.value(value)), walking the value only when needed."""
        try:
            text = canonical_text(value).encode("ascii")  # canonical(), one call fewer
        except (TypeError, ValueError, RecursionError):
            text = canonical(value)  # raises it as a JournalError
        scrub = self._scrub
        if scrub is not None and not scrub.clean(text.decode("ascii")):
            assert self._scrubber is not None
            text = canonical(self._scrubber.value(value))
        return text

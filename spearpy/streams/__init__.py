"""User streams: SPEAR's bidirectional frame streams between a running guest
and a client (docs/streams.md).

- `ssf`: the SSF v1 frame codec.
- `StreamHub`: one run's streams (pass it as `Host.run(..., streams=hub)`),
  `Session`: one client attached to it, `UserStream`: one stream id as an
  embedder sees it (`RunHandle.open_stream`).
- The guest's side is `spearpy.fds.stream` and `spearpy.hostcalls.streams`;
  the WebSocket is `spearpy.serve.streams`, the terminal `spearpy.streams.stdio`.
"""

from spearpy.streams.client import StreamClient, StreamClosed, UserStream
from spearpy.streams.hub import StreamHub, StreamsUnavailable
from spearpy.streams.limits import StreamLimits
from spearpy.streams.session import Session, SessionClosed
from spearpy.streams.ssf import Frame, MsgType, SsfError

__all__ = ["Frame", "MsgType", "Session", "SessionClosed", "SsfError", "StreamClient",
           "StreamClosed", "StreamHub", "StreamLimits", "StreamsUnavailable", "UserStream"]

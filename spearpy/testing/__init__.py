"""A scripted, OpenAI-compatible model: run guests offline against a real loopback server.

`Script` decides the answers (usable in-process through `Script.respond`),
`ScriptedServer` serves them over real HTTP on 127.0.0.1. The format is
documented in docs/scripted-model.md. Both are the built-in scripted backend's
(spearpy.backends.scripted); this package adds what tests need on top:
`spearpy.testing.instance.LiveInstance`, a guest whose exports a test drives,
and `ScriptedAsrServer`, a realtime transcription server for rtasr fds.
"""

from spearpy.backends.scripted.reply import ScriptedReply, ScriptError
from spearpy.backends.scripted.script import Script, ScriptSource
from spearpy.backends.scripted.server import RecordedRequest, ScriptedServer, serve_script_forever
from spearpy.testing.asr_server import AsrSession, ScriptedAsrServer

__all__ = [
    "AsrSession",
    "RecordedRequest",
    "Script",
    "ScriptError",
    "ScriptSource",
    "ScriptedAsrServer",
    "ScriptedReply",
    "ScriptedServer",
    "serve_script_forever",
]

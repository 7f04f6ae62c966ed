"""A scripted, OpenAI-compatible model: run guests offline against a real loopback server.

`Script` decides the answers (usable in-process through `Script.respond`),
`ScriptedServer` serves them over real HTTP on 127.0.0.1. The format is
documented in docs/scripted-model.md.
"""

from spearpy.testing.reply import ScriptedReply, ScriptError
from spearpy.testing.script import Script, ScriptSource
from spearpy.testing.server import RecordedRequest, ScriptedServer, serve_script_forever

__all__ = [
    "RecordedRequest",
    "Script",
    "ScriptError",
    "ScriptSource",
    "ScriptedReply",
    "ScriptedServer",
    "serve_script_forever",
]

"""The built-in offline model (`--backend scripted:FILE`): a script decides
each answer (script.py, reply.py), a real loopback server speaks the OpenAI
protocol (or another dialect) with it (server.py), so the whole upstream path
runs. `spearpy.testing` builds on it for tests and users."""

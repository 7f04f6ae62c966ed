"""Audio in: where a microphone fd's PCM comes from, and the per-run budget
every PCM byte is charged against.

Sources (`stub`, `wavfile` for the `file` source and `--mic-file`, `device`,
`userstream`) turn something into whole PCM16 frames of the format the guest
asked for; `pump` runs a threaded source and hands its frames to a sink (the
mic fd, spearpy.fds.mic). Nothing here knows about the guest, its memory or
its fd table: the hostcalls (spearpy.hostcalls.mic) wire the pieces.
"""

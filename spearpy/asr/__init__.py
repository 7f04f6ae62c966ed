"""Realtime speech recognition for SPEAR's rtasr_* fds: the autoflush
(segmentation) settings, the OpenAI-compatible realtime transcription
protocol, and the WebSocket connection that feeds an rtasr fd from its own
threads. docs/audio.md describes the guest-facing behaviour."""

"""The driver of one cchat_send: performs what the sans-IO ToolLoop asks
(completions through a backend, tool calls through their sources) and emits
the events around each step. Hostcalls call `send.run_send`; nothing here
reads guest memory."""

"""Constants of the `spear` guest ABI (see ../shared/spear-abi.md).

Numbers here are part of a binary contract shared with SPEAR guests: never
renumber them.
"""

from __future__ import annotations

from typing import Final

# errno values (returned negated).
EIO: Final = -5
EBADF: Final = -9
EAGAIN: Final = -11
EACCES: Final = -13
EFAULT: Final = -14
EEXIST: Final = -17
EINVAL: Final = -22
EMFILE: Final = -24
ENOSPC: Final = -28
ENOSYS: Final = -38
ETIMEDOUT: Final = -110

ERRNO_NAMES: Final = {
    EIO: "EIO",
    EBADF: "EBADF",
    EAGAIN: "EAGAIN",
    EACCES: "EACCES",
    EFAULT: "EFAULT",
    EEXIST: "EEXIST",
    EINVAL: "EINVAL",
    EMFILE: "EMFILE",
    ENOSPC: "ENOSPC",
    ENOSYS: "ENOSYS",
    ETIMEDOUT: "ETIMEDOUT",
}

IMPORT_MODULE: Final = "spear"
FIRST_FD: Final = 1000
DEFAULT_MAX_OPEN_FDS: Final = 1024
MAX_LOG_LEN: Final = 16384

# Largest guest payload each hostcall reads, checked before anything is read
# or allocated: the host's work on JSON (parsing, schema checks) and the
# Python objects it keeps grow with the input, many times its size, so the
# run's byte budget alone does not bound one call. SPEAR's own inputs are
# far smaller: tool schemas of a few KiB, params of a few bytes.
MAX_TOOL_SCHEMA_BYTES: Final = 1 << 20  # cchat_write_fn JSON
MAX_PARAM_BYTES: Final = 1 << 20  # cchat_ctl SET_PARAM JSON (response_format may hold a schema)
MAX_FD_FLAGS_BYTES: Final = 4096  # spear_fd_ctl SET_FLAGS JSON ({"set":[...],"clear":[...]})
# A `tool` message written by the guest: one tool output (at most 1 MiB, the
# cap of max_tool_output_bytes), JSON-escaped, with its tool_call_id.
MAX_TOOL_ANSWER_BYTES: Final = 2 << 20

# cchat_send flags.
SEND_ENABLE_METRICS: Final = 1 << 0
SEND_AUTO_TOOL_CALL: Final = 1 << 1

# cchat_ctl commands.
CTL_SET_PARAM: Final = 1
CTL_GET_METRICS: Final = 2

# spear_fd_ctl commands.
FD_CTL_SET_FLAGS: Final = 1
FD_CTL_GET_FLAGS: Final = 2
FD_CTL_GET_KIND: Final = 3
FD_CTL_GET_STATUS: Final = 4
FD_CTL_GET_METRICS: Final = 5

# epoll.
EPOLL_CTL_ADD: Final = 1
EPOLL_CTL_MOD: Final = 2
EPOLL_CTL_DEL: Final = 3
EPOLLIN: Final = 0x1
EPOLLOUT: Final = 0x4
EPOLLERR: Final = 0x8
EPOLLHUP: Final = 0x10

# log levels.
LOG_LEVELS: Final = {0: "trace", 1: "debug", 2: "info", 3: "warn", 4: "error"}

# Tool-message error codes (spear-abi.md section 4) and send error codes.
TOOL_UNKNOWN: Final = "unknown_tool"
TOOL_INVALID_ARGUMENTS: Final = "invalid_arguments"
TOOL_EXEC_FAILED: Final = "tool_exec_failed"
TOOL_OUTPUT_TOO_LARGE: Final = "output_too_large"
SEND_TOOL_CALL_LIMIT: Final = "tool_call_limit"
SEND_TOKEN_BUDGET: Final = "token_budget"
SEND_PENDING_TOOL_CALLS: Final = "pending_tool_calls"

# Message roles a guest may write.
ROLES: Final = frozenset({"system", "user", "assistant", "tool", "developer"})

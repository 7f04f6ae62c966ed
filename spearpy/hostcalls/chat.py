"""The cchat_* hostcalls: guest memory in, ChatSession calls out."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING

from spearpy import _json, abi
from spearpy.chat.registry import RegistryError, parse_tool_schema
from spearpy.chat.session import ChatSession
from spearpy.driver.send import run_send
from spearpy.errors import HostInterrupt
from spearpy.fds import ChatResponse, ChatResponseFd, ChatSessionFd
from spearpy.hostcalls.limits import SCHEMA_BYTES_PER_TOKEN, bounded, json_cost, json_tokens
from spearpy.memory import GuestFault
from spearpy.tools.guest import GuestTools

if TYPE_CHECKING:
    from spearpy.context import RunContext


# A tool may itself open sessions and send (an agent calling a sub-agent);
# past this depth it is a runaway recursion, refused rather than followed
# until the host's stack gives out.
MAX_SEND_DEPTH = 4
# Names the host offers MCP tools under (SPEAR's mcp__<b64>__<b64> and the
# hashed alias of long ones); a guest tool may not take them.
RESERVED_TOOL_PREFIXES = ("mcp__", "mcp_h_")
# Longer than any role: refused without reading it.
_MAX_ROLE_LEN = max(len(role) for role in abi.ROLES)
# Checking a schema this small takes ~15 ms at worst (measured: 40-item
# draft-04 enums of objects, nested properties, a 2 KiB regex), less than
# tracing it would add to every ordinary registration (~3x).
_SMALL_SCHEMA_BYTES = 2048
_SMALL_SCHEMA_TOKENS = 128


def _session(run: RunContext, fd: int) -> ChatSession | None:
    entry = run.fds.get(fd, ChatSessionFd)
    return entry.session if entry is not None else None


def _idle_session(run: RunContext, fd: int) -> ChatSession | int:
    """The session, or why it cannot be used now: EBADF, or EAGAIN while its
    own send is running a tool."""
    session = _session(run, fd)
    if session is None:
        return abi.EBADF
    return abi.EAGAIN if _busy(run, fd) else session


def _busy(run: RunContext, fd: int) -> bool:
    """True while a send on this session is running a tool: changing the
    session underneath its own loop would corrupt the conversation."""
    return run.is_sending(fd)


def cchat_create(run: RunContext) -> int:
    return run.fds.open(lambda fd: ChatSessionFd(ChatSession(fd)))


def cchat_write_msg(run: RunContext, fd: int, role_ptr: int, role_len: int, content_ptr: int,
                    content_len: int) -> int:
    # _idle_session inlined: this is the hostcall a guest makes most often.
    entry = run.fds.get(fd, ChatSessionFd)
    if entry is None:
        return abi.EBADF
    if run.is_sending(fd):
        return abi.EAGAIN
    session = entry.session
    try:
        size = role_len + content_len
        if role_len > _MAX_ROLE_LEN or content_len > abi.MAX_TOOL_ANSWER_BYTES or \
                not run.fits(size):
            # Sizes decide before anything is read, after the bounds (which
            # come first in the check order): no role is that long, a tool
            # answer is JSON the host parses, and all must fit the budget.
            run.memory.check_pair(role_ptr, role_len, content_ptr, content_len)
            if role_len > _MAX_ROLE_LEN or (content_len > abi.MAX_TOOL_ANSWER_BYTES and
                                            run.memory.read(role_ptr, role_len) == b"tool"):
                return abi.EINVAL
            run.reserve_bytes(size, "a session message")
        role, content = run.memory.read_pair(role_ptr, role_len, content_ptr, content_len)
    except GuestFault:
        return abi.EFAULT
    try:
        rc = session.write_message(role.decode("utf-8"), content.decode("utf-8"))
    except UnicodeDecodeError:
        return abi.EINVAL
    if rc == 0:
        run.charge(len(role) + len(content), "a session message")
    return rc


def cchat_write_fn(run: RunContext, fd: int, fn_offset: int, json_ptr: int, json_len: int) -> int:
    session = _idle_session(run, fd)
    if isinstance(session, int):
        return session
    try:
        run.memory.check(json_ptr, json_len)
        if json_len > abi.MAX_TOOL_SCHEMA_BYTES:
            return abi.EINVAL
        run.reserve_bytes(json_len, "a tool schema")
        raw = run.memory.read(json_ptr, json_len)
    except GuestFault:
        return abi.EFAULT
    # The host keeps the parsed schema and its validators, many times the
    # text's size: that is what the budget is charged.
    tokens = json_tokens(raw)
    cost = json_len + SCHEMA_BYTES_PER_TOKEN * tokens
    run.reserve_bytes(cost, "a tool schema")
    try:
        if json_len <= _SMALL_SCHEMA_BYTES and tokens <= _SMALL_SCHEMA_TOKENS:
            return _register(run, session, fn_offset, raw, cost)
        # Checking a schema is Python work that grows faster than its size
        # (jsonschema compares enum items pairwise): the size cap alone does
        # not bound it, the run's deadline and cancel do.
        return bounded(run, lambda: _register(run, session, fn_offset, raw, cost))
    except RegistryError as exc:
        return exc.errno


def _set_mcp_param(run: RunContext, session: ChatSession, key: str, value: object) -> int:
    """SPEAR's session layer: a guest may only narrow what the run's task allows
    (-13 past it, -22 for a wrong type); without a task MCP is off."""
    from spearpy.mcp.policy import TaskPolicy, check_session_param

    rc = check_session_param(run.options.task or TaskPolicy(), key, value)
    if rc == 0:
        session.store_param(key, value)
    return rc


def _register(run: RunContext, session: ChatSession, fn_offset: int, raw: bytes,
              cost: int) -> int:
    name, spec = parse_tool_schema(raw)
    if name.startswith(RESERVED_TOOL_PREFIXES):
        return abi.EINVAL  # MCP tools are offered under these: never shadow one
    if name in session.registry:
        return abi.EEXIST
    if run.tool_function(fn_offset) is None:
        return abi.EINVAL
    session.registry.add(name, fn_offset, spec, GuestTools(run))
    run.charge(cost, "a tool schema")
    return 0


def cchat_ctl(run: RunContext, fd: int, cmd: int, arg_ptr: int, arg_len_ptr: int) -> int:
    entry = run.fds.lookup(fd)
    if not isinstance(entry, ChatSessionFd | ChatResponseFd):
        return abi.EBADF
    try:
        if cmd == abi.CTL_SET_PARAM:
            if not isinstance(entry, ChatSessionFd):
                return abi.EBADF
            if _busy(run, fd):
                return abi.EAGAIN
            length = run.memory.read_u32(arg_len_ptr)
            run.memory.check(arg_ptr, length)
            if length > abi.MAX_PARAM_BYTES:
                return abi.EINVAL
            run.reserve_bytes(length, "a session param")
            raw = run.memory.read(arg_ptr, length)
            cost = json_cost(raw)  # the value is kept parsed
            run.reserve_bytes(cost, "a session param")
            try:
                request = _json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                return abi.EIO
            if not isinstance(request, dict) or not isinstance(request.get("key"), str) \
                    or "value" not in request:
                return abi.EINVAL
            key, value = request["key"], request["value"]
            session = entry.session
            rc = (_set_mcp_param(run, session, key, value) if key.startswith("mcp.")
                  else session.set_param(key, value))
            if rc == 0:
                run.charge(cost, "a session param")
            return rc
        if cmd == abi.CTL_GET_METRICS:
            # A response fd gives that send's metrics (EAGAIN while it runs);
            # a session fd its last send's.
            metrics = entry.metrics()
            if isinstance(metrics, int):
                return metrics
            payload = _json.compact_bytes(metrics)
            return run.memory.write_out(arg_ptr, arg_len_ptr, payload)
    except GuestFault:
        return abi.EFAULT
    return abi.EINVAL


def cchat_send(run: RunContext, fd: int, flags: int) -> int:
    session = _idle_session(run, fd)
    if isinstance(session, int):
        return session
    if run.send_depth >= MAX_SEND_DEPTH:
        return abi.EACCES
    # Refuse before going upstream: a reply nobody can read would be lost.
    # The fd stays pending until the send ends: a tool running inside it can
    # neither close it nor read a body that does not exist yet (fds/chat.py).
    slot = ChatResponseFd()
    reserved = run.fds.open(slot)
    if reserved < 0:
        return reserved
    hook = run.options.send_hook
    run.begin_send(fd)
    try:
        hooked = hook(run, session, flags) if hook is not None else None
        response: ChatResponse = hooked if hooked is not None else run_send(run, session, flags)
    except BaseException:
        run.fds.discard(reserved)
        raise
    finally:
        run.end_send(fd)
    slot.fill(response)
    # The body is kept until the guest closes the fd, which gives it back
    # (ChatResponseFd.held_bytes); past the budget the run ends just below.
    with contextlib.suppress(HostInterrupt):
        run.charge(len(response.body), "a response body")
    # A deadline or cancel that ended the send ends the run too; the body is
    # already stored, so nothing the guest could still read is lost.
    run.interrupts.raise_if_run_ends()
    return reserved


def cchat_recv(run: RunContext, response_fd: int, out_ptr: int, out_len_ptr: int) -> int:
    entry = run.fds.get(response_fd, ChatResponseFd)
    if entry is None:
        return abi.EBADF
    if entry.response is None:
        return abi.EAGAIN  # its send is still running: nothing to read yet
    try:
        return run.memory.write_out(out_ptr, out_len_ptr, entry.response.body)
    except GuestFault:
        return abi.EFAULT


def cchat_close(run: RunContext, fd: int) -> int:
    entry = run.fds.lookup(fd)
    if isinstance(entry, ChatSessionFd):
        if _busy(run, fd):
            return abi.EAGAIN
        # Out of the table before its transcript is charged: a charge past
        # the budget ends the run, whose end must not close it a second time.
        rc = run.fds.close(fd)
        run.session_closed(entry.session)
        return rc
    if entry is not None and not isinstance(entry, ChatResponseFd):
        return abi.EBADF  # not a chat fd: closed by its own family's close
    return run.fds.close(fd)

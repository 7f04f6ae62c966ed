"""Stateful fuzzing of the hostcall layer with hypothesis.

A RuleBasedStateMachine drives random sequences of `spear` hostcalls through
the WAT probe guest (tests/probe.py): random fds (live, closed, never issued,
extreme), pointers (inside, straddling the end, past it, negative) and
lengths, and payloads that are sometimes meaningful (params, schemas, roles,
tool answers) and sometimes garbage. Sends go to a scripted model over real
loopback HTTP that answers with text, tool calls (known, unknown, malformed)
or errors, so the auto tool loop runs the probe's tools with whatever arena
the fuzzer configured.

Checked on every step: no Python exception escapes the hostcall layer (a
host bug would surface as `GuestRun.note_host_bug`, which fails the test, or
as a trap out of the probe); every result is a value spear-abi.md documents
for that hostcall and, where the ABI fixes one for the arguments given (a
closed or wrong-kind fd, a span outside memory, a full fd table, an unknown
command), exactly that one; fds are never reused; ENOSPC leaves the output
untouched and reports the needed size; every open session's transcript stays
valid. The model knows every fd its rules open or close, checked against the
host's table after every step.

The CI profile makes ~1,500 calls, the same ones on every run (the suite's
hypothesis profile, tests/conftest.py); `pytest -m long` makes at least 10^5,
new ones each time.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
import wasmtime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spearpy import abi
from spearpy.fds import ChatSessionFd
from spearpy.host import Host
from spearpy.interrupts import Interrupts
from spearpy.testing import ScriptedServer
from tests.probe import Probe, wat_module
from tests.test_hostile_upstream import assert_valid_transcript

PROBE = wat_module("probe.wat")
LONG_CALLS = int(os.environ.get("SPEARPY_FUZZ_CALLS", "100000"))

E = abi
OK_OR = {
    "log": {0, E.EINVAL, E.EFAULT},
    "cchat_write_msg": {0, E.EBADF, E.EFAULT, E.EINVAL, E.EAGAIN},
    "cchat_write_fn": {0, E.EBADF, E.EFAULT, E.EINVAL, E.EEXIST, E.EAGAIN},
    "cchat_close": {0, E.EBADF, E.EAGAIN},
    "spear_epoll_ctl": {0, E.EBADF, E.EINVAL},
    "spear_epoll_close": {0, E.EBADF},
}
# Calls returning a count or fd on success (>= 0), else one of these.
COUNT_OR = {
    "cchat_ctl": {E.EBADF, E.EFAULT, E.EINVAL, E.ENOSPC, E.EIO, E.EACCES, E.EAGAIN},
    "cchat_recv": {E.EBADF, E.EFAULT, E.ENOSPC},
    "spear_fd_ctl": {E.EBADF, E.EFAULT, E.EINVAL, E.ENOSPC},
    "spear_epoll_wait": {E.EBADF, E.EFAULT, E.ENOSPC},
    "mic_read": {E.EBADF, E.EAGAIN, E.EFAULT, E.ENOSPC},
}
FD_OR = {
    "cchat_create": {E.EMFILE},
    "spear_epoll_create": {E.EMFILE},
    "rtasr_create": {E.EMFILE},
    "cchat_send": {E.EBADF, E.EMFILE, E.EAGAIN, E.EACCES},
}
# The fd kinds, named by the call that opens them.
SESSION, RESPONSE, EPOLL = "cchat_create", "cchat_send", "spear_epoll_create"
MAX_OPEN_FDS = 48  # the fuzz host's cap, low enough for long sequences to meet EMFILE
NEW_FD = "a new fd"
# What the model expects a call to return: one value, the few the ABI leaves
# open for these arguments, or None (only what the ABI documents for the call).
Want = int | frozenset[int] | str | None
ROLE_BYTES = {role.encode() for role in abi.ROLES}
FD_CTL_GETS = (abi.FD_CTL_GET_FLAGS, abi.FD_CTL_GET_KIND, abi.FD_CTL_GET_STATUS,
               abi.FD_CTL_GET_METRICS)

# The probe's tools by table index, minus 7 (spins until the tool deadline):
# echo, wrong signature, trap, liar, rc 5, big, non-UTF-8; and indexes past the table.
TOOL_INDEXES = [0, 1, 2, 3, 4, 5, 6, 8, 1000, -1]
TOOL_NAMES = ["echo", "boom", "liar", "ghost", "x" * 65, "bad name!", ""]
ROLES = ["user", "system", "assistant", "tool", "developer", "wizard", "", "USER"]
PARAM_KEYS = ["model", "temperature", "max_iterations", "max_tool_calls", "max_total_tool_calls",
              "max_tool_output_bytes", "tool_arena_ptr", "tool_arena_len", "strict_tools",
              "cache_tool_results", "validate_tool_args", "max_total_tokens", "timeout_ms",
              "backend", "messages", "stream", "n", "mcp.server", "seed", "stop", "whatever"]
# What the user says decides what the scripted model answers (see SCRIPT).
TRIGGERS = ["hello", "tools", "unknown", "malformed", "storm", "garbage", "endless", "big"]

SCRIPT = {
    "rules": [
        {"when": {"last_role": "user", "last_user_contains": "tools"},
         "reply": {"tool_calls": [{"name": "echo", "arguments": {"a": 1}},
                                  {"name": "boom"}, {"name": "liar"}]}},
        {"when": {"last_role": "user", "last_user_contains": "unknown"},
         "reply": {"tool_calls": [{"name": "nope", "id": "dup"}, {"name": "echo", "id": "dup",
                                                                  "arguments": "{bad json"}]}},
        {"when": {"last_role": "user", "last_user_contains": "malformed"},
         "reply": {"raw": {"choices": [{"message": {"role": "assistant", "tool_calls": [
             "junk", {"function": {"name": "echo", "arguments": {"o": 1}}}, {"id": 7}]}}]}}},
        {"when": {"last_user_contains": "storm"}, "reply": {"status": 503}},
        {"when": {"last_user_contains": "garbage"}, "reply": {"fault": "garbage"}},
        {"when": {"last_user_contains": "endless"},
         "reply": {"tool_calls": [{"name": "echo", "arguments": {"again": True}}]}},
        {"when": {"last_role": "user", "last_user_contains": "big"},
         "reply": {"tool_calls": [{"name": "big"}]}},
    ],
    "default": {"content": "pong {{last_tool}}"},
}


class Stats:
    calls = 0
    examples = 0


def _apart(out: int, length: int, len_ptr: int) -> bool:
    """The output span and the length word do not overlap (a guest may alias
    them; then the length the host stores lands inside the output)."""
    return out + length <= len_ptr or len_ptr + 4 <= out


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


GARBAGE = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"\xff\xfe\xfd", b"{", b"null", b"[]", b"{}", b'{"key":1}',
                     b"x" * (abi.MAX_LOG_LEN + 1),
                     # nested deeper than Python's parser recurses
                     b"[" * 3000 + b"]" * 3000, b'{"key":"x","value":' + b"[" * 3000]))
VALID_PARAMS = st.one_of(
    st.tuples(st.just("temperature"), st.floats(0, 2)),
    st.tuples(st.sampled_from(["max_iterations", "max_tool_calls", "max_total_tool_calls"]),
              st.integers(0, 12)),
    st.tuples(st.sampled_from(["strict_tools", "cache_tool_results", "validate_tool_args"]),
              st.booleans()),
    st.tuples(st.just("tool_arena_ptr"), st.integers(0, 300_000)),
    st.tuples(st.just("tool_arena_len"), st.integers(0, 70_000)),
    st.tuples(st.just("max_tool_output_bytes"), st.integers(1, 100_000)),
    st.tuples(st.just("timeout_ms"), st.integers(100, 5_000)),
    st.tuples(st.just("max_total_tokens"), st.integers(1, 500)),
).map(lambda kv: _json({"key": kv[0], "value": kv[1]}))
PARAMS = st.one_of(
    VALID_PARAMS, VALID_PARAMS,
    st.builds(lambda k, v: _json({"key": k, "value": v}), st.sampled_from(PARAM_KEYS),
              st.one_of(st.none(), st.booleans(), st.integers(-2**33, 2**33),
                        st.integers(0, 300_000), st.floats(allow_nan=True),
                        st.text(max_size=10), st.lists(st.integers(), max_size=3))),
    GARBAGE)
SCHEMAS = st.one_of(
    st.builds(lambda n: _json({"type": "function", "function": {
        "name": n, "description": "d", "parameters": {"type": "object"}}}),
              st.sampled_from(TOOL_NAMES)),
    st.builds(lambda n: _json({"name": n, "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}}, "required": ["a"]}}), st.sampled_from(TOOL_NAMES)),
    GARBAGE)
TOOL_ANSWERS = st.builds(lambda i, c: _json({"tool_call_id": i, "content": c}),
                         st.sampled_from(["dup", "call_0_0", "sp0000001", ""]),
                         st.text(max_size=8))
CONTENTS = st.one_of(st.sampled_from([t.encode() for t in TRIGGERS]),
                     st.sampled_from([t.encode() for t in TRIGGERS]),
                     st.text(max_size=20).map(str.encode), GARBAGE)
FLAGS = st.one_of(st.builds(lambda s: _json({"set": s, "clear": []}),
                            st.lists(st.sampled_from(["O_NONBLOCK", "O_WHATEVER"]), max_size=2)),
                  GARBAGE)
PAYLOADS = st.one_of(GARBAGE, PARAMS, SCHEMAS, TOOL_ANSWERS, CONTENTS, FLAGS)
CMDS = st.sampled_from([0, 1, 2, 3, 4, 5, 6, -1, 2**31 - 1])


class HostcallMachine(RuleBasedStateMachine):
    host: Host

    @initialize()
    def start(self) -> None:
        Stats.examples += 1
        self.p = Probe(self.host, PROBE)
        self.issued: list[int] = []  # every fd ever returned, in order
        self.kinds: dict[int, str] = {}  # fd -> the call that returned it
        self.closed: set[int] = set()
        self.last: tuple[int, int] = (Probe.A, 0)
        # A session with working tools and an epoll set to start from, so
        # short sequences reach sends and the tool loop too.
        fd = self.check("cchat_create", self.hc("cchat_create"))
        for index, name in ((0, "echo"), (2, "boom"), (3, "liar"), (5, "big")):
            assert self.p.write_fn(fd, index, {"name": name, "parameters": {"type": "object"}}) == 0
        assert self.p.write_msg(fd, "user", "tools") == 0
        self.check("spear_epoll_create", self.hc("spear_epoll_create"))

    def teardown(self) -> None:
        if hasattr(self, "p"):
            self.p.close()

    # ---- the model's view of the fd table ------------------------------------------

    def live(self, *kinds: str) -> list[int]:
        """Open fds (of one of `kinds`, if given), by what the model recorded."""
        return [fd for fd in self.issued
                if fd not in self.closed and (not kinds or self.kinds[fd] in kinds)]

    def is_live(self, fd: int, *kinds: str) -> bool:
        return fd in self.kinds and fd not in self.closed and \
            (not kinds or self.kinds[fd] in kinds)

    def inside(self, ptr: int, length: int) -> bool:
        """[ptr, ptr+length) lies in guest memory (pointers are unsigned, as wasm's)."""
        return length >= 0 and (ptr & 0xFFFFFFFF) + length <= self._end()

    def _closed_or_never(self, fd: int) -> int:
        """What closing a number that is not open gives: 0 for a spent one
        (close is idempotent), EBADF for one never issued."""
        return 0 if fd in self.kinds else abi.EBADF

    # ---- drawing arguments -------------------------------------------------------

    def _end(self) -> int:
        return self.p.run.memory.size()

    def fd(self, data: st.DataObject, want: str | None = None) -> int:
        """Mostly a live fd (of the kind the call wants), sometimes a closed,
        never-issued or extreme one."""
        live = self.live()
        fitting = [fd for fd in live if self.kinds[fd] == want] or live
        pick = data.draw(st.sampled_from(["fit"] * 6 + ["live", "issued", "random"]))
        if pick == "fit" and fitting:
            return int(data.draw(st.sampled_from(fitting)))
        if pick == "live" and live:
            return int(data.draw(st.sampled_from(live)))
        if pick == "issued" and self.issued:
            return int(data.draw(st.sampled_from(self.issued)))
        return int(data.draw(st.one_of(st.integers(-3, 1100),
                                       st.sampled_from([2**31 - 1, -2**31, 0]))))

    def ptr_len(self, data: st.DataObject, fresh: st.SearchStrategy[bytes] | None = None
                ) -> tuple[int, int]:
        """Where a hostcall reads its input: mostly a payload just written
        (`fresh`, or the last one the fuzzer wrote), sometimes a bad span."""
        kind = data.draw(st.sampled_from(["fresh", "fresh", "last", "edge", "random"]))
        if kind == "fresh" and fresh is not None:
            payload = data.draw(fresh)
            self.p.put(Probe.B, payload)
            return Probe.B, len(payload)
        if kind in ("fresh", "last"):
            return self.last
        end = self._end()
        if kind == "edge":
            length = data.draw(st.sampled_from([1, 4, 64, 4096]))
            return data.draw(st.sampled_from([end - length // 2, end, end + 1, -16, -1])), length
        return (data.draw(st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(0, end))),
                data.draw(st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(-2, 70_000))))

    def out_ptr(self, data: st.DataObject) -> tuple[int, int]:
        """(out_ptr, len_ptr) with a capacity written at len_ptr when it is in memory."""
        end = self._end()
        out = data.draw(st.one_of(st.just(Probe.D), st.sampled_from([end - 2, end, -16]),
                                  st.integers(0, end)))
        len_ptr = data.draw(st.one_of(st.just(Probe.C), st.sampled_from([end - 2, -4]),
                                      st.integers(0, end)))
        capacity = data.draw(st.one_of(st.sampled_from([0, 1, 7, 8, 16, 60_000, 2**32 - 1]),
                                       st.integers(0, 70_000)))
        if 0 <= len_ptr <= end - 4:
            self.p.u32(len_ptr, capacity)
        return out, len_ptr

    # ---- calling ------------------------------------------------------------------

    def hc(self, name: str, *args: int) -> Any:
        Stats.calls += 1
        return self.p.hc(name, *args)

    def check(self, name: str, rc: int, want: Want = None) -> int:
        """`rc` is a value spear-abi.md documents for `name`, and the very one
        it fixes for these arguments where the model knows it (`want`: one
        value, or the few it leaves open). A call that opens fds opens one
        unless the table is full."""
        if name in OK_OR:
            assert rc in OK_OR[name], (name, rc)
        elif name in COUNT_OR:
            assert rc >= 0 or rc in COUNT_OR[name], (name, rc)
        else:
            assert rc in FD_OR[name] or rc >= abi.FIRST_FD, (name, rc)
            if want is None:
                want = abi.EMFILE if len(self.live()) >= MAX_OPEN_FDS else NEW_FD
            if rc >= 0:
                assert not self.issued or rc > max(self.issued), "an fd number was reused"
                self.issued.append(rc)
                self.kinds[rc] = name
                rc_seen: int | str = NEW_FD
            else:
                rc_seen = rc
            assert rc_seen == want, (name, rc, want)
            return rc
        if isinstance(want, int):
            assert rc == want, (name, rc, want)
        elif want is not None:
            assert rc in want, (name, rc, sorted(want))
        return rc

    # ---- rules ------------------------------------------------------------------------

    @rule(data=st.data(), payload=PAYLOADS)
    def write_payload(self, data: st.DataObject, payload: bytes) -> None:
        ptr = data.draw(st.sampled_from([Probe.A, Probe.B, 100_000, 0]))
        self.p.put(ptr, payload)
        self.last = (ptr, len(payload))

    @rule()
    def create(self) -> None:
        self.check("cchat_create", self.hc("cchat_create"))

    @rule()
    def epoll_create(self) -> None:
        self.check("spear_epoll_create", self.hc("spear_epoll_create"))

    @rule(data=st.data(), level=st.integers(-2, 6))
    def log(self, data: st.DataObject, level: int) -> None:
        ptr, length = self.ptr_len(data)
        want = (abi.EINVAL if not 0 <= length <= abi.MAX_LOG_LEN
                else abi.EFAULT if not self.inside(ptr, length) else 0)
        self.check("log", self.hc("log", level, ptr, length), want)

    @rule(data=st.data())
    def write_msg(self, data: st.DataObject) -> None:
        fd = self.fd(data, SESSION)
        role = data.draw(st.sampled_from(ROLES[:5] * 3 + ROLES))
        self.p.put(Probe.C + 512, role)
        role_ptr, role_len = data.draw(st.sampled_from([(Probe.C + 512, len(role))] * 4
                                                       + [self.ptr_len(data)]))
        content = CONTENTS if role != "tool" else st.one_of(TOOL_ANSWERS, CONTENTS)
        ptr, length = self.ptr_len(data, content)
        want = self._write_msg_result(fd, role_ptr, role_len, ptr, length)
        rc = self.hc("cchat_write_msg", fd, role_ptr, role_len, ptr, length)
        self.check("cchat_write_msg", rc, want)

    def _write_msg_result(self, fd: int, role_ptr: int, role_len: int, ptr: int,
                          length: int) -> Want:
        if not self.is_live(fd, SESSION):
            return abi.EBADF
        if not (self.inside(role_ptr, role_len) and self.inside(ptr, length)):
            return abi.EFAULT
        role = self.p.get(role_ptr & 0xFFFFFFFF, role_len)
        if role not in ROLE_BYTES:
            return abi.EINVAL
        if role == b"tool":  # an answer to a pending call, or not
            return frozenset({0, abi.EINVAL})
        try:
            self.p.get(ptr & 0xFFFFFFFF, length).decode("utf-8")
        except UnicodeDecodeError:
            return abi.EINVAL
        return 0

    @rule(data=st.data(), index=st.sampled_from(TOOL_INDEXES))
    def write_fn(self, data: st.DataObject, index: int) -> None:
        fd = self.fd(data, SESSION)
        ptr, length = self.ptr_len(data, SCHEMAS)
        want: Want = (abi.EBADF if not self.is_live(fd, SESSION)
                      else abi.EFAULT if not self.inside(ptr, length)
                      else abi.EINVAL if length > abi.MAX_TOOL_SCHEMA_BYTES
                      else frozenset({0, abi.EINVAL, abi.EEXIST}))
        self.check("cchat_write_fn", self.hc("cchat_write_fn", fd, index, ptr, length), want)

    @rule(data=st.data(), cmd=st.one_of(st.sampled_from([1, 1, 1, 2, 2]), CMDS))
    def ctl(self, data: st.DataObject, cmd: int) -> None:
        fd = self.fd(data, SESSION if cmd == abi.CTL_SET_PARAM else RESPONSE)
        chat = self.is_live(fd, SESSION, RESPONSE)
        want: Want = (abi.EBADF if not chat
                      else abi.EINVAL if cmd not in (abi.CTL_SET_PARAM, abi.CTL_GET_METRICS)
                      else abi.EBADF if cmd == abi.CTL_SET_PARAM
                      and not self.is_live(fd, SESSION)
                      else None)
        if cmd == abi.CTL_SET_PARAM or data.draw(st.booleans()):
            ptr, length = self.ptr_len(data, PARAMS)
            if length >= 0:
                self.p.u32(Probe.C, length)
                if want is None and cmd == abi.CTL_SET_PARAM:
                    want = (abi.EFAULT if not self.inside(ptr, length)
                            else abi.EINVAL if length > abi.MAX_PARAM_BYTES else None)
            rc = self.hc("cchat_ctl", fd, cmd, ptr, Probe.C)
        else:
            rc = self.ctl_out("cchat_ctl", fd, cmd, data, want)
        self.check("cchat_ctl", rc, want)

    def ctl_out(self, name: str, fd: int, cmd: int, data: st.DataObject, want: Want) -> int:
        out, len_ptr = self.out_ptr(data)
        end = self._end()
        readable = out >= 0 and out + 16 <= end and _apart(out, 16, len_ptr)
        before = self.p.get(out, 16) if readable else b""
        capacity = self.p.u32(len_ptr) if 0 <= len_ptr <= end - 4 else None
        rc = int(self.hc(name, fd, cmd, out, len_ptr))
        if want is None and not self.inside(len_ptr, 4):
            assert rc == abi.EFAULT, (name, rc)  # the capacity cannot be read
        if rc == abi.ENOSPC:
            assert capacity is not None
            assert self.p.u32(len_ptr) > capacity  # the size it needs
            if readable:
                assert self.p.get(out, 16) == before  # nothing written
        return rc

    @rule(data=st.data(), flags=st.sampled_from([0, 1, 2, 3, 0xFF, -1]))
    def send(self, data: st.DataObject, flags: int) -> None:
        fd = self.fd(data, SESSION)
        want = None if self.is_live(fd, SESSION) else abi.EBADF
        rc = self.check("cchat_send", self.hc("cchat_send", fd, flags), want)
        if rc >= 0:
            self.p.u32(Probe.C, 1 << 20)
            n = self.hc("cchat_recv", rc, Probe.D, Probe.C)
            assert n > 0
            body = json.loads(self.p.get(Probe.D, n))
            assert "_spear" in body
            assert "error" in body or isinstance(body["choices"][0]["message"], dict)

    @rule(data=st.data())
    def recv(self, data: st.DataObject) -> None:
        fd = self.fd(data, RESPONSE)
        out, len_ptr = self.out_ptr(data)
        end = self._end()
        readable = out >= 0 and out + 16 <= end and _apart(out, 16, len_ptr)
        before = self.p.get(out, 16) if readable else b""
        capacity = self.p.u32(len_ptr) if 0 <= len_ptr <= end - 4 else None
        want = (abi.EBADF if not self.is_live(fd, RESPONSE)
                else abi.EFAULT if not self.inside(len_ptr, 4) else None)
        rc = self.check("cchat_recv", self.hc("cchat_recv", fd, out, len_ptr), want)
        if rc == abi.ENOSPC:
            assert capacity is not None and self.p.u32(len_ptr) > capacity
            if readable:
                assert self.p.get(out, 16) == before
        elif rc > 0 and _apart(out, rc, len_ptr):
            assert self.p.u32(len_ptr) == rc
            assert json.loads(self.p.get(out, rc))  # the whole body, valid JSON

    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        self.close_fd(self.fd(data))

    def close_fd(self, fd: int) -> None:
        """cchat_close: a chat fd closes, any other open fd is EBADF (its own
        family closes it), a spent number is 0 and a never-issued one EBADF."""
        want = (self._closed_or_never(fd) if not self.is_live(fd)
                else 0 if self.is_live(fd, SESSION, RESPONSE) else abi.EBADF)
        if self.check("cchat_close", self.hc("cchat_close", fd), want) == 0:
            self.closed.add(fd)

    @rule(data=st.data(), cmd=CMDS)
    def fd_ctl(self, data: st.DataObject, cmd: int) -> None:
        fd = self.fd(data)
        want: Want = (abi.EBADF if not self.is_live(fd)
                      else None if cmd in FD_CTL_GETS else abi.EINVAL)
        if cmd == abi.FD_CTL_SET_FLAGS:
            ptr, length = self.ptr_len(data, FLAGS)
            self.p.u32(Probe.C, max(length, 0))
            if self.is_live(fd):
                want = (abi.EFAULT if not self.inside(ptr, max(length, 0))
                        else abi.EINVAL if length > abi.MAX_FD_FLAGS_BYTES
                        else frozenset({0, abi.EINVAL}))
            rc = self.hc("spear_fd_ctl", fd, cmd, ptr, Probe.C)
        else:
            rc = self.ctl_out("spear_fd_ctl", fd, cmd, data, want)
        self.check("spear_fd_ctl", rc, want)

    @rule(data=st.data(), op=st.sampled_from([0, 1, 2, 3, 4, -1]),
          events=st.integers(-2**31, 2**31 - 1))
    def epoll_ctl(self, data: st.DataObject, op: int, events: int) -> None:
        epfd, fd = self.fd(data, EPOLL), self.fd(data)
        want = (abi.EBADF if not (self.is_live(epfd, EPOLL) and self.is_live(fd))
                else abi.EINVAL if self.is_live(fd, EPOLL)  # an epoll set never watches one
                else 0 if op in (abi.EPOLL_CTL_ADD, abi.EPOLL_CTL_MOD, abi.EPOLL_CTL_DEL)
                else abi.EINVAL)
        self.check("spear_epoll_ctl", self.hc("spear_epoll_ctl", epfd, op, fd, events), want)

    @rule(data=st.data(), timeout=st.sampled_from([0, 1, -1, -2**31]))
    def epoll_wait(self, data: st.DataObject, timeout: int) -> None:
        out, len_ptr = self.out_ptr(data)
        epfd = self.fd(data, EPOLL)
        want = (abi.EBADF if not self.is_live(epfd, EPOLL)
                else abi.EFAULT if not self.inside(len_ptr, 4) else None)
        rc = self.check("spear_epoll_wait",
                        self.hc("spear_epoll_wait", epfd, out, len_ptr, timeout), want)
        if rc >= 0:
            assert self.p.u32(len_ptr) == 8 * rc

    @rule(data=st.data())
    def epoll_close(self, data: st.DataObject) -> None:
        fd = self.fd(data, EPOLL)
        want = (self._closed_or_never(fd) if not self.is_live(fd)
                else 0 if self.is_live(fd, EPOLL) else abi.EBADF)
        if self.check("spear_epoll_close", self.hc("spear_epoll_close", fd), want) == 0:
            self.closed.add(fd)

    @rule(ms=st.sampled_from([-1, -2**31, 0, 1]))
    def sleep(self, ms: int) -> None:
        assert self.hc("sleep_ms", ms) is None

    @rule(name=st.sampled_from(["time_now_ms", "wall_time_s", "random_i64"]))
    def clocks(self, name: str) -> None:
        value = self.hc(name)
        assert isinstance(value, int) and -2**63 <= value < 2**63
        if name != "random_i64":
            assert value > 0

    @rule(data=st.data())
    def audio(self, data: st.DataObject) -> None:
        self.audio_fds(tuple(self.fd(data) for _ in range(3)))

    def audio_fds(self, mic_args: tuple[int, ...]) -> None:
        """An rtasr fd opened (an fd since issue 20, was ENOSYS) and closed
        by the host, as rtasr_close would; then a mic_read, refused: no mic
        fd is ever open here."""
        fd = self.check("rtasr_create", self.hc("rtasr_create"))
        if fd >= abi.FIRST_FD:
            assert self.p.run.fds.close(fd) == 0
            self.closed.add(fd)
        self.check("mic_read", self.hc("mic_read", *mic_args), abi.EBADF)

    # ---- invariants ----------------------------------------------------------------

    @invariant()
    def transcripts_stay_valid(self) -> None:
        if not hasattr(self, "p"):
            return
        for _fd, entry in self.p.run.fds.entries():
            if isinstance(entry, ChatSessionFd):
                assert_valid_transcript(list(entry.session.messages), pending_ok=True)

    @invariant()
    def the_model_holds_the_open_fds(self) -> None:
        """What the model predicts rests on knowing the open fds: checked
        here, so a rule that opens or closes one unrecorded fails where it does."""
        if hasattr(self, "p"):
            assert sorted(fd for fd, _ in self.p.run.fds.entries()) == self.live()


@pytest.fixture(scope="module")
def fuzz_host() -> Iterator[Host]:
    with ScriptedServer(SCRIPT) as server:
        host = Host(base_url=server.base_url, model="fuzz", max_retries=0, cache_dir=None,
                    tool_timeout=1.0, max_open_fds=MAX_OPEN_FDS, max_log_bytes=1 << 40,
                    max_iterations=4)
        yield host
        host.close()


def _run(host: Host, bugs: list[str], examples: int, steps: int, *, fresh: bool = False
         ) -> None:
    """Run the machine: with the suite's hypothesis profile (tests/conftest.py:
    the same sequences on every run unless asked otherwise), or `fresh` ones."""
    HostcallMachine.host = host
    profile = settings(derandomize=False) if fresh else settings()
    HostcallMachine.TestCase.settings = settings(
        profile, max_examples=examples, stateful_step_count=steps, deadline=None,
        suppress_health_check=list(HealthCheck))
    HostcallMachine.TestCase().runTest()
    assert bugs == [], bugs


def test_fuzz_hostcalls_ci_profile(fuzz_host: Host, host_bugs: list[str]) -> None:
    before = Stats.calls
    _run(fuzz_host, host_bugs, examples=40, steps=40)
    assert Stats.calls - before >= 1000


@pytest.mark.long
def test_fuzz_hostcalls_long_profile(fuzz_host: Host, host_bugs: list[str]) -> None:
    # New sequences each round (derandomized, every round would repeat the
    # first); a failure prints the blob that replays it.
    before, examples = Stats.calls, Stats.examples
    while Stats.calls - before < LONG_CALLS:
        _run(fuzz_host, host_bugs, examples=200, steps=100, fresh=True)
    print(f"\nfuzz long profile: {Stats.calls - before} hostcalls in "
          f"{Stats.examples - examples} sequences, no host bug")


def test_the_model_knows_every_fd_a_rule_opened(fuzz_host: Host, host_bugs: list[str]) -> None:
    """The model's own test. The audio rule once opened rtasr fds without
    recording them: once they were closed, a drawn number that had been one
    met an idempotent close (0) the model took for a never-issued fd (EBADF),
    and the CI profile failed at random on a correct host."""
    HostcallMachine.host = fuzz_host
    machine = HostcallMachine()
    machine.start()  # fds 1000 (a session), 1001 (an epoll set)
    try:
        machine.audio_fds((0, 0, 0))
        machine.audio_fds((abi.FIRST_FD, 0, 0))
        # Every number twice: open ones close, then all are spent or never issued.
        numbers = range(abi.FIRST_FD - 1, abi.FIRST_FD + 8)
        for fd in [*numbers, *numbers]:
            machine.close_fd(fd)
            machine.the_model_holds_the_open_fds()
        assert machine.live() == [abi.FIRST_FD + 1]  # cchat_close leaves the epoll set
    finally:
        machine.teardown()
    assert host_bugs == []


# ---- the WASI calls spearpy implements itself -------------------------------------------

WASI = wat_module("hostile_wasi.wat")
SUBSCRIPTION = st.one_of(
    st.binary(min_size=48, max_size=48),
    st.builds(lambda ud, tag, clock, ns, flags: struct.pack("<QB7xIxxxxQQH6x", ud, tag, clock,
                                                             ns, 0, flags),
              st.integers(0, 2**64 - 1), st.integers(0, 3), st.integers(0, 5),
              st.one_of(st.integers(0, 2_000_000), st.integers(0, 2**64 - 1)),
              st.integers(0, 3)))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(subs=st.lists(SUBSCRIPTION, max_size=6),
       in_ptr=st.one_of(st.sampled_from([0, 8, 4096, 4097, 65536 * 2 - 48, -64]),
                        st.integers(-2**31, 2**31 - 1)),
       out_ptr=st.one_of(st.sampled_from([8192, 8193, 65536 * 2 - 32, -64]),
                         st.integers(-2**31, 2**31 - 1)),
       count=st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)),
       nevents_ptr=st.one_of(st.sampled_from([16384, 16386, -4]), st.integers(-2**31, 2**31 - 1)),
       clock=st.integers(-2, 6), time_ptr=st.sampled_from([0, 3, 65536 * 2 - 4, -8]))
def test_fuzz_wasi_poll_and_clock(fuzz_host: Host, subs: list[bytes], in_ptr: int, out_ptr: int,
                                  count: int | None, nevents_ptr: int, clock: int,
                                  time_ptr: int) -> None:
    bugs: list[str] = []
    p = Probe(fuzz_host, WASI)
    p.run.note_host_bug = lambda where, exc: bugs.append(f"{where}: {exc!r}")  # type: ignore[method-assign]
    # Waits of any length end at this deadline (then the call traps as a timeout).
    p.run.interrupts.deadline = time.monotonic() + 0.005
    try:
        if subs and in_ptr >= 0 and in_ptr + 48 * len(subs) <= p.run.memory.size():
            p.put(in_ptr, b"".join(subs))
        n = len(subs) if count is None else count
        try:
            rc = p.hc("poll_oneoff", in_ptr, out_ptr, n, nevents_ptr)
        except wasmtime.WasmtimeError as exc:
            assert "deadline" in str(exc)
        else:
            assert rc in (0, 21, 28)
            if rc == 0:
                assert 1 <= p.u32(nevents_ptr) <= n
        # A fresh set of interrupts: no deadline, nothing noted.
        p.run.interrupts = Interrupts(timeout=None, tool_timeout=None)
        assert p.hc("clock_time_get", clock, 0, time_ptr) in (0, 21, 28)
    finally:
        p.close()
    assert bugs == []

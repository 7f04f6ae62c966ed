"""A tiny guest agent for the concurrency scenario: one session, SENDS plain
sends of "hello", each response fd closed; no WASI, no tools."""

from __future__ import annotations

import wasmtime

_AGENT = """
(module
  (import "spear" "cchat_create" (func $create (result i32)))
  (import "spear" "cchat_write_msg" (func $write (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $send (param i32 i32) (result i32)))
  (import "spear" "cchat_close" (func $close (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "user")
  (data (i32.const 32) "hello")
  (func (export "_start")
    (local $fd i32) (local $i i32) (local $r i32)
    (local.set $fd (call $create))
    (if (i32.lt_s (local.get $fd) (i32.const 0)) (then unreachable))
    (if (i32.ne (call $write (local.get $fd) (i32.const 16) (i32.const 4) (i32.const 32)
                             (i32.const 5)) (i32.const 0)) (then unreachable))
    (block $done
      (loop $again
        (br_if $done (i32.ge_u (local.get $i) (i32.const SENDS)))
        (local.set $r (call $send (local.get $fd) (i32.const 0)))
        (if (i32.lt_s (local.get $r) (i32.const 0)) (then unreachable))
        (drop (call $close (local.get $r)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $again)))
    (drop (call $close (local.get $fd))))
)
"""


def agent_wasm(sends: int) -> bytes:
    return bytes(wasmtime.wat2wasm(_AGENT.replace("SENDS", str(sends))))

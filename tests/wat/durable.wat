;; A guest whose output depends on everything a journal must answer: spear's
;; clocks and randomness, WASI's clock and random_get, a sleep, and two sends
;; to the model. It writes every value it got, raw, to stdout, so a replay or
;; a resume that answers differently prints differently.
(module
  (import "spear" "time_now_ms" (func $time_now_ms (result i64)))
  (import "spear" "wall_time_s" (func $wall_time_s (result i64)))
  (import "spear" "random_i64" (func $random_i64 (result i64)))
  (import "spear" "sleep_ms" (func $sleep_ms (param i32)))
  (import "spear" "cchat_create" (func $cchat_create (result i32)))
  (import "spear" "cchat_write_msg" (func $cchat_write_msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $cchat_send (param i32 i32) (result i32)))
  (import "spear" "cchat_recv" (func $cchat_recv (param i32 i32 i32) (result i32)))
  (import "spear" "cchat_close" (func $cchat_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0x40) "user")
  (data (i32.const 0x50) "what time is it?")
  (data (i32.const 0x70) "and now?")

  ;; stdout <- memory[ptr, ptr+len)
  (func $out (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0x200) (local.get $ptr))
    (i32.store (i32.const 0x204) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0x200) (i32.const 1) (i32.const 0x208))))

  ;; Every clock and random source, written to stdout (48 bytes).
  (func $observe
    (i64.store (i32.const 0x100) (call $time_now_ms))
    (i64.store (i32.const 0x108) (call $random_i64))
    (i64.store (i32.const 0x110) (call $wall_time_s))
    (drop (call $clock_time_get (i32.const 1) (i64.const 0) (i32.const 0x118)))
    (drop (call $random_get (i32.const 0x120) (i32.const 16)))
    (call $out (i32.const 0x100) (i32.const 48)))

  ;; One auto send of the message at ptr, its body written to stdout.
  (func $ask (param $ptr i32) (param $len i32)
    (local $session i32) (local $response i32) (local $n i32)
    (local.set $session (call $cchat_create))
    (drop (call $cchat_write_msg (local.get $session) (i32.const 0x40) (i32.const 4)
                                 (local.get $ptr) (local.get $len)))
    (local.set $response (call $cchat_send (local.get $session) (i32.const 2)))
    (if (i32.lt_s (local.get $response) (i32.const 0)) (then unreachable))
    (i32.store (i32.const 0x300) (i32.const 0x4000))
    (local.set $n (call $cchat_recv (local.get $response) (i32.const 0x1000) (i32.const 0x300)))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then unreachable))
    (call $out (i32.const 0x1000) (local.get $n))
    (drop (call $cchat_close (local.get $response)))
    (drop (call $cchat_close (local.get $session))))

  (func (export "_start")
    (call $observe)
    (call $sleep_ms (i32.const 1))
    (call $ask (i32.const 0x50) (i32.const 16))
    (call $observe)
    (call $ask (i32.const 0x70) (i32.const 8))
    (call $observe)))

;; A stream guest that reads a frame and then waits (epoll, no timeout) for
;; the next, twice: it prints each frame. While it waits, the frame it read
;; must already be in its journal (docs/durable.md: a journal is written out
;; before the guest waits for the world).
(module
  (import "spear" "user_stream_ctl_open" (func $ctl_open (result i32)))
  (import "spear" "user_stream_open" (func $open (param i32 i32) (result i32)))
  (import "spear" "user_stream_read" (func $read (param i32 i32 i32) (result i32)))
  (import "spear" "spear_epoll_create" (func $ep_create (result i32)))
  (import "spear" "spear_epoll_ctl" (func $ep_ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "spear_epoll_wait" (func $ep_wait (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)

  (func $out (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0x200) (local.get $ptr))
    (i32.store (i32.const 0x204) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0x200) (i32.const 1) (i32.const 0x208))))

  (func (export "_start")
    (local $ep i32) (local $fd i32) (local $rc i32) (local $n i32)
    (drop (call $ctl_open))
    (local.set $fd (call $open (i32.const 1) (i32.const 3)))
    (local.set $ep (call $ep_create))
    (drop (call $ep_ctl (local.get $ep) (i32.const 1) (local.get $fd) (i32.const 1)))
    (loop $frames
      (i32.store (i32.const 0x320) (i32.const 64))
      (drop (call $ep_wait (local.get $ep) (i32.const 0x340) (i32.const 0x320) (i32.const -1)))
      (i32.store (i32.const 0x310) (i32.const 4096))
      (local.set $rc (call $read (local.get $fd) (i32.const 0x1000) (i32.const 0x310)))
      (if (i32.gt_s (local.get $rc) (i32.const 0))
        (then (call $out (i32.const 0x1000) (local.get $rc))
              (local.set $n (i32.add (local.get $n) (i32.const 1)))))
      (br_if $frames (i32.lt_s (local.get $n) (i32.const 2))))))

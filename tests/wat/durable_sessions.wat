;; A stream guest that outlives its client's session: it reads a frame on
;; stream 1, waits for the session's end, reads its old stream fd again (a
;; closed stream with nothing left: EPIPE), then opens stream 1 again for the
;; next session and reads a frame there. It prints each frame's last byte and
;; the old fd's read result, so a resume that hands the old fd to the new
;; session prints differently.
(module
  (import "spear" "user_stream_ctl_open" (func $ctl_open (result i32)))
  (import "spear" "user_stream_ctl_read" (func $ctl_read (param i32 i32 i32) (result i32)))
  (import "spear" "user_stream_open" (func $open (param i32 i32) (result i32)))
  (import "spear" "user_stream_read" (func $read (param i32 i32 i32) (result i32)))
  (import "spear" "sleep_ms" (func $sleep_ms (param i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)

  ;; stdout <- memory[ptr, ptr+len)
  (func $out (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0x200) (local.get $ptr))
    (i32.store (i32.const 0x204) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0x200) (i32.const 1) (i32.const 0x208))))

  (func $out_i32 (param $v i32)
    (i32.store (i32.const 0x300) (local.get $v))
    (call $out (i32.const 0x300) (i32.const 4)))

  ;; One frame of `fd` into 0x1000 (polling), its last byte printed.
  (func $frame (param $fd i32)
    (local $rc i32)
    (loop $again
      (i32.store (i32.const 0x310) (i32.const 4096))
      (local.set $rc (call $read (local.get $fd) (i32.const 0x1000) (i32.const 0x310)))
      (if (i32.lt_s (local.get $rc) (i32.const 0))
        (then (call $sleep_ms (i32.const 5)) (br $again))))
    (call $out (i32.add (i32.const 0x0fff) (local.get $rc)) (i32.const 1)))

  (func (export "_start")
    (local $ctl i32) (local $old i32)
    (local.set $ctl (call $ctl_open))
    (local.set $old (call $open (i32.const 1) (i32.const 3)))
    (call $frame (local.get $old))
    ;; Until SESSION_CLOSED (kind 2).
    (loop $events
      (i32.store (i32.const 0x320) (i32.const 8))
      (if (i32.ne (call $ctl_read (local.get $ctl) (i32.const 0x330) (i32.const 0x320))
                  (i32.const 8))
        (then (call $sleep_ms (i32.const 5)) (br $events)))
      (br_if $events (i32.ne (i32.load (i32.const 0x334)) (i32.const 2))))
    (i32.store (i32.const 0x310) (i32.const 4096))
    (call $out_i32 (call $read (local.get $old) (i32.const 0x1000) (i32.const 0x310)))
    (call $frame (call $open (i32.const 1) (i32.const 3)))))

;; bench U's source guest: guest -> client throughput over a user stream.
;;
;; Waits for a stream, then for each request frame it reads (data: a u32 LE
;; count N first) writes that same frame back N times, waiting on epoll for
;; EPOLLOUT whenever the outbound queue is full. Ends at session closed.
;;
;; Memory: 0 ctl event (8) | 16 length word | 32 epoll records (64) |
;;         1024 the request frame (up to 192 KiB)
(module
  (import "spear" "user_stream_ctl_open" (func $ctl_open (result i32)))
  (import "spear" "user_stream_ctl_read" (func $ctl_read (param i32 i32 i32) (result i32)))
  (import "spear" "user_stream_open" (func $open (param i32 i32) (result i32)))
  (import "spear" "user_stream_read" (func $read (param i32 i32 i32) (result i32)))
  (import "spear" "user_stream_write" (func $write (param i32 i32 i32) (result i32)))
  (import "spear" "spear_epoll_create" (func $ep_create (result i32)))
  (import "spear" "spear_epoll_ctl" (func $ep_ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "spear_epoll_wait" (func $ep_wait (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 4)

  ;; Blocks in epoll_wait on `ep`; returns what it returned.
  (func $wait (param $ep i32) (result i32)
    (i32.store (i32.const 16) (i32.const 64))
    (call $ep_wait (local.get $ep) (i32.const 32) (i32.const 16) (i32.const -1)))

  ;; Reads control events: the stream id of a connected one (>= 0), -1 when
  ;; none is queued, -2 once the session has closed.
  (func $control (param $ctl i32) (result i32)
    (loop $next
      (i32.store (i32.const 16) (i32.const 8))
      (if (i32.ne (call $ctl_read (local.get $ctl) (i32.const 0) (i32.const 16)) (i32.const 8))
        (then (return (i32.const -1))))
      (if (i32.eq (i32.load (i32.const 4)) (i32.const 2)) (then (return (i32.const -2))))
      (if (i32.eq (i32.load (i32.const 4)) (i32.const 1)) (then (return (i32.load (i32.const 0)))))
      (br $next))
    (i32.const -1))

  (func (export "_start")
    (local $ep i32) (local $out i32) (local $ctl i32) (local $id i32) (local $fd i32)
    (local $len i32) (local $n i32) (local $rc i32)
    (local.set $ep (call $ep_create))
    (local.set $out (call $ep_create))
    (local.set $ctl (call $ctl_open))
    (drop (call $ep_ctl (local.get $ep) (i32.const 1) (local.get $ctl) (i32.const 1)))
    ;; wait for the first stream
    (local.set $id (i32.const -1))
    (block $connected
      (loop $waiting
        (if (i32.lt_s (call $wait (local.get $ep)) (i32.const 1)) (then (return)))
        (local.set $id (call $control (local.get $ctl)))
        (if (i32.eq (local.get $id) (i32.const -2)) (then (return)))
        (br_if $connected (i32.ge_s (local.get $id) (i32.const 0)))
        (br $waiting)))
    (local.set $fd (call $open (local.get $id) (i32.const 3)))
    (drop (call $ep_ctl (local.get $ep) (i32.const 1) (local.get $fd) (i32.const 1)))
    (drop (call $ep_ctl (local.get $out) (i32.const 1) (local.get $fd) (i32.const 4)))
    (loop $requests
      (i32.store (i32.const 16) (i32.const 196608))
      (local.set $len (call $read (local.get $fd) (i32.const 1024) (i32.const 16)))
      (if (i32.eq (local.get $len) (i32.const -11))
        (then
          (if (i32.lt_s (call $wait (local.get $ep)) (i32.const 1)) (then (return)))
          (if (i32.eq (call $control (local.get $ctl)) (i32.const -2)) (then (return)))
          (br $requests)))
      (if (i32.lt_s (local.get $len) (i32.const 36)) (then (return)))
      ;; N: the first data word (after the 32-byte header and the meta)
      (local.set $n (i32.load (i32.add (i32.const 1056) (i32.load (i32.const 1048)))))
      (block $sent
        (loop $send
          (br_if $sent (i32.eqz (local.get $n)))
          (local.set $rc (call $write (local.get $fd) (i32.const 1024) (local.get $len)))
          (if (i32.eqz (local.get $rc))
            (then (local.set $n (i32.sub (local.get $n) (i32.const 1))) (br $send)))
          (if (i32.ne (local.get $rc) (i32.const -11)) (then (return)))
          (if (i32.lt_s (call $wait (local.get $out)) (i32.const 1)) (then (return)))
          (br $send)))
      (br $requests)))
)

;; Hostile entry points for whole runs (`Host.run(..., invoke=NAME)`); each
;; returns an i32 the run reports as its exit code when it returns at all.
;; spin: loops forever. recurse: unbounded recursion (stack overflow).
;; grow_then_trap / grow_then_oob: grow memory 16 MiB at a time until refused,
;; then trap (unreachable / a store past the end). sleep_long: sleep_ms(2^31-1).
;; sleep_negative: sleep_ms(-1) and sleep_ms(INT_MIN), then returns 7.
;; log_flood: logs 16 KiB lines forever. fd_flood: creates sessions until
;; refused, returns the (positive) errno. epoll_long: epoll_wait with a huge
;; timeout on an empty set, returns its result. grow_a_lot: grows until
;; refused, returns 0 (the graceful case). table_grow: grows its table by 64 Ki
;; elements until refused, returns 1 if that happened at or below 2^20.
;; print_flood: writes 64 KiB to stdout forever.
;; wasi_sleep: WASI poll_oneoff on a 1-hour relative clock (C's sleep()).
;; wasi_abs_sleep: sleeps until clock_time_get(monotonic) + 50 ms with
;; TIMER_ABSTIME, returns 1 if the clock then reads at least that.
;; wasi_poll_edges: bad poll_oneoff arguments; returns how many of 5 checks
;; got WASI's documented answer. msg_flood: writes the same 64 KiB user
;; message to one session forever.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "spear" "log" (func $log (param i32 i32 i32) (result i32)))
  (import "spear" "sleep_ms" (func $sleep (param i32)))
  (import "spear" "cchat_create" (func $create (result i32)))
  (import "spear" "cchat_write_msg" (func $write_msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "spear_epoll_create" (func $ep_create (result i32)))
  (import "spear" "spear_epoll_wait" (func $ep_wait (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (table $t 1 funcref)

  (func (export "_start"))
  (func (export "spin") (result i32) (loop $l (br $l)) (i32.const 0))

  (func $deep (param $n i64) (result i64)
    (local $a i64) (local $b i64) (local $c i64) (local $d i64)
    (local.set $a (i64.add (local.get $n) (i64.const 1)))
    (i64.add (call $deep (local.get $a)) (local.get $a)))
  (func (export "recurse") (result i32) (i32.wrap_i64 (call $deep (i64.const 0))))

  (func $grow_until_refused
    (block $done (loop $l
      (br_if $done (i32.lt_s (memory.grow (i32.const 256)) (i32.const 0)))
      (br $l))))
  (func (export "grow_a_lot") (result i32) (call $grow_until_refused) (i32.const 0))
  (func (export "grow_then_trap") (result i32) (call $grow_until_refused) unreachable)
  (func (export "grow_then_oob") (result i32)
    (call $grow_until_refused)
    (i32.store (i32.mul (memory.size) (i32.const 65536)) (i32.const 1))
    (i32.const 0))

  (func (export "sleep_long") (result i32) (call $sleep (i32.const 2147483647)) (i32.const 0))
  (func (export "sleep_negative") (result i32)
    (call $sleep (i32.const -1))
    (call $sleep (i32.const -2147483648))
    (i32.const 7))

  (func (export "log_flood") (result i32)
    (memory.fill (i32.const 0) (i32.const 120) (i32.const 16384))
    (loop $l (drop (call $log (i32.const 2) (i32.const 0) (i32.const 16384))) (br $l))
    (i32.const 0))

  (func (export "fd_flood") (result i32)
    (local $rc i32)
    (loop $l
      (local.set $rc (call $create))
      (br_if $l (i32.ge_s (local.get $rc) (i32.const 0))))
    (i32.sub (i32.const 0) (local.get $rc)))

  (func (export "epoll_long") (result i32)
    (local $ep i32)
    (local.set $ep (call $ep_create))
    (i32.store (i32.const 64) (i32.const 64))
    (i32.sub (i32.const 0) (call $ep_wait (local.get $ep) (i32.const 128) (i32.const 64)
                                 (i32.const 2147483647))))

  (func (export "table_grow") (result i32)
    (loop $l (br_if $l (i32.ge_s (table.grow $t (ref.null func) (i32.const 65536)) (i32.const 0))))
    (i32.le_u (table.size $t) (i32.const 1048576)))

  (func (export "print_flood") (result i32)
    (memory.fill (i32.const 1024) (i32.const 120) (i32.const 65536))
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.const 65536))
    (loop $l (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 16)))
      (br $l))
    (i32.const 0))

  ;; one clock subscription at 4096: clock id, timeout ns, flags
  (func $clock_sub (param $id i32) (param $ns i64) (param $flags i32)
    (i64.store (i32.const 4096) (i64.const 77))
    (i32.store8 (i32.const 4104) (i32.const 0))
    (i32.store (i32.const 4112) (local.get $id))
    (i64.store (i32.const 4120) (local.get $ns))
    (i64.store (i32.const 4128) (i64.const 0))
    (i32.store16 (i32.const 4136) (local.get $flags)))
  (func (export "wasi_sleep") (result i32)
    (call $clock_sub (i32.const 1) (i64.const 3600000000000) (i32.const 0))
    (call $poll (i32.const 4096) (i32.const 4352) (i32.const 1) (i32.const 4608)))
  (func (export "wasi_abs_sleep") (result i32)
    (local $target i64)
    (drop (call $clock (i32.const 1) (i64.const 1) (i32.const 4640)))
    (local.set $target (i64.add (i64.load (i32.const 4640)) (i64.const 50000000)))
    (call $clock_sub (i32.const 1) (local.get $target) (i32.const 1))
    (if (call $poll (i32.const 4096) (i32.const 4352) (i32.const 1) (i32.const 4608))
      (then (return (i32.const 0))))
    (drop (call $clock (i32.const 1) (i64.const 1) (i32.const 4640)))
    (i32.and (i64.ge_u (i64.load (i32.const 4640)) (local.get $target))
             (i64.eq (i64.load (i32.const 4352)) (i64.const 77))))
  (func (export "wasi_poll_edges") (result i32)
    (local $ok i32)
    (call $clock_sub (i32.const 1) (i64.const 0) (i32.const 0))
    ;; no subscriptions: EINVAL (28)
    (local.set $ok (i32.eq (call $poll (i32.const 4096) (i32.const 4352) (i32.const 0)
                                 (i32.const 4608)) (i32.const 28)))
    ;; misaligned subscriptions: EINVAL
    (local.set $ok (i32.add (local.get $ok) (i32.eq (call $poll (i32.const 4097) (i32.const 4352)
                                 (i32.const 1) (i32.const 4608)) (i32.const 28))))
    ;; subscriptions past the end of memory: EFAULT (21)
    (local.set $ok (i32.add (local.get $ok) (i32.eq (call $poll (i32.const -64) (i32.const 4352)
                                 (i32.const 1) (i32.const 4608)) (i32.const 21))))
    ;; an unknown clock: the event carries EINVAL
    (call $clock_sub (i32.const 9) (i64.const 0) (i32.const 0))
    (drop (call $poll (i32.const 4096) (i32.const 4352) (i32.const 1) (i32.const 4608)))
    (local.set $ok (i32.add (local.get $ok) (i32.eq (i32.load16_u (i32.const 4360)) (i32.const 28))))
    ;; an fd_read subscription (stdin) is ready at once
    (i32.store8 (i32.const 4104) (i32.const 1))
    (i32.store (i32.const 4112) (i32.const 0))
    (drop (call $poll (i32.const 4096) (i32.const 4352) (i32.const 1) (i32.const 4608)))
    (local.set $ok (i32.add (local.get $ok)
      (i32.and (i32.eq (i32.load (i32.const 4608)) (i32.const 1))
               (i32.eq (i32.load8_u (i32.const 4362)) (i32.const 1)))))
    (local.get $ok))

  (func (export "msg_flood") (result i32)
    (local $fd i32)
    (local.set $fd (call $create))
    (i32.store (i32.const 8192) (i32.const 0x72657375))  ;; "user"
    (memory.fill (i32.const 16384) (i32.const 120) (i32.const 65536))
    (loop $l
      (br_if $l (i32.eqz (call $write_msg (local.get $fd) (i32.const 8192) (i32.const 4)
                                         (i32.const 16384) (i32.const 65536)))))
    (i32.const 1))
)

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
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "spear" "log" (func $log (param i32 i32 i32) (result i32)))
  (import "spear" "sleep_ms" (func $sleep (param i32)))
  (import "spear" "cchat_create" (func $create (result i32)))
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
)

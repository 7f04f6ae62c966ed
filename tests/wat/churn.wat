;; A guest that creates and closes host objects in a loop, for
;; tests/test_host_bytes_churn.py (run with `spearpy run --invoke NAME`).
;; Each entry loops `$rounds` times (forever while it is -1, its default) and
;; then returns 0; a hostcall that fails ends the entry with exit code 3 (the
;; run's result says the limit, if one ended it, before that).
;;   sessions      cchat_create + cchat_close (each leaves a transcript)
;;   epolls        spear_epoll_create + spear_epoll_close (nothing is left)
;;   streams_ctl   user_stream_ctl_open + user_stream_close (nothing is left)
;;   bad_tools     cchat_write_fn of one schema at table index 1000000 + i,
;;                 on one session: every call is refused (-22), nothing kept
;;   sig_tools     cchat_write_fn at table index i: every call is refused
;;                 (the table's functions have no tool's signature)
;;   interests     one epoll set; cchat_create, EPOLL_CTL_ADD of it, cchat_close
(module
  (import "spear" "cchat_create" (func $cchat_create (result i32)))
  (import "spear" "cchat_close" (func $cchat_close (param i32) (result i32)))
  (import "spear" "cchat_write_fn" (func $cchat_write_fn (param i32 i32 i32 i32) (result i32)))
  (import "spear" "spear_epoll_create" (func $spear_epoll_create (result i32)))
  (import "spear" "spear_epoll_close" (func $spear_epoll_close (param i32) (result i32)))
  (import "spear" "spear_epoll_ctl" (func $spear_epoll_ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "user_stream_ctl_open" (func $user_stream_ctl_open (result i32)))
  (import "spear" "user_stream_close" (func $user_stream_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  (memory (export "memory") 1)
  (data (i32.const 64) "{\"name\":\"t\",\"parameters\":{\"type\":\"object\"}}")
  (global $schema_len i32 (i32.const 43))
  (global $rounds i32 (i32.const -1)) ;; ROUNDS

  (func $nop (result i32) (i32.const 0))
  (table (export "__indirect_function_table") 4096 funcref)
  (elem (i32.const 0) $nop $nop $nop $nop)

  ;; 0 on success (the fd's number is not needed); exit 3 on a failed call.
  (func $check (param $rc i32)
    (if (i32.lt_s (local.get $rc) (i32.const 0)) (then (call $proc_exit (i32.const 3)))))
  (func $more (param $i i32) (result i32)
    (i32.or (i32.lt_s (global.get $rounds) (i32.const 0))
            (i32.lt_u (local.get $i) (global.get $rounds))))

  (func (export "sessions") (result i32)
    (local $i i32) (local $fd i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (call $more (local.get $i))))
        (local.set $fd (call $cchat_create))
        (call $check (local.get $fd))
        (call $check (call $cchat_close (local.get $fd)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  (func (export "epolls") (result i32)
    (local $i i32) (local $fd i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (call $more (local.get $i))))
        (local.set $fd (call $spear_epoll_create))
        (call $check (local.get $fd))
        (call $check (call $spear_epoll_close (local.get $fd)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  (func (export "streams_ctl") (result i32)
    (local $i i32) (local $fd i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (call $more (local.get $i))))
        (local.set $fd (call $user_stream_ctl_open))
        (call $check (local.get $fd))
        (call $check (call $user_stream_close (local.get $fd)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  (func (export "interests") (result i32)
    (local $i i32) (local $ep i32) (local $fd i32)
    (local.set $ep (call $spear_epoll_create))
    (call $check (local.get $ep))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (call $more (local.get $i))))
        (local.set $fd (call $cchat_create))
        (call $check (local.get $fd))
        (call $check (call $spear_epoll_ctl (local.get $ep) (i32.const 1) (local.get $fd)
                                            (i32.const 1)))
        (call $check (call $cchat_close (local.get $fd)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  ;; cchat_write_fn at index base + i, i = 0.. (-22 expected each time)
  (func $tools (param $base i32) (param $wrap i32) (result i32)
    (local $i i32) (local $fd i32)
    (local.set $fd (call $cchat_create))
    (call $check (local.get $fd))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (call $more (local.get $i))))
        (if (i32.ne (call $cchat_write_fn (local.get $fd)
                      (i32.add (local.get $base) (i32.rem_u (local.get $i) (local.get $wrap)))
                      (i32.const 64) (global.get $schema_len))
                    (i32.const -22))
          (then (call $proc_exit (i32.const 3))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))
  (func (export "bad_tools") (result i32) (call $tools (i32.const 1000000) (i32.const 0x7fffffff)))
  (func (export "sig_tools") (result i32) (call $tools (i32.const 0) (i32.const 4096)))
)

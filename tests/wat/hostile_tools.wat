;; A guest whose tools and allocator misbehave, for the hostile-guest suite.
;; Re-exports the hostcalls the tests drive (`p_<name>`, as tests/probe.py
;; expects). Tools in the funcref table:
;;   0 echo (well-behaved)       1 scribble: writes 4 KiB past its buffer
;;   2 oob: stores past the end of memory (trap)
;;   3 recurse: unbounded recursion (stack overflow)
;;   4 sleeper: sleep_ms(2^31-1)  5 quitter: proc_exit(3)
;;   6 reenter: cchat_send on the session it runs in, outputs the rc
;;   7 closer: cchat_close on that session, outputs the rc
;;   8 mover: grows memory by 64 MiB (moving it), then echoes
;;   9 len_max: claims 0xFFFFFFFF output bytes
;;  10 ask_max: answers -28 asking for 0xFFFFFFFF bytes
;;  11 spin: loops forever     12 negative_len: claims -1 bytes (0xFFFFFFFF as u32)
;;  13 len_ptr_clobber: overwrites the length word with capacity, then writes
;;     past its buffer over the host's args area before answering
;; `set_mode(m)` picks how spear_alloc behaves: 0 bump, 1 NULL, 2 a pointer
;; outside memory, 3 trap, 4 spin, 5 a block straddling the end of memory,
;; 6 the same small block every time. `set_free_traps(1)` makes spear_free trap.
;; `set_session(fd)` tells tools 6 and 7 which session they run in.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (import "spear" "sleep_ms" (func $sleep (param i32)))
  (import "spear" "cchat_create" (func $cchat_create (result i32)))
  (import "spear" "cchat_write_msg" (func $cchat_write_msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_write_fn" (func $cchat_write_fn (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_ctl" (func $cchat_ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $cchat_send (param i32 i32) (result i32)))
  (import "spear" "cchat_recv" (func $cchat_recv (param i32 i32 i32) (result i32)))
  (import "spear" "cchat_close" (func $cchat_close (param i32) (result i32)))

  (memory (export "memory") 4)
  (global $heap (mut i32) (i32.const 131072))
  (global $mode (mut i32) (i32.const 0))
  (global $free_traps (mut i32) (i32.const 0))
  (global $session (mut i32) (i32.const -1))

  (func (export "p_cchat_create") (result i32) (call $cchat_create))
  (func (export "p_cchat_write_msg") (param i32 i32 i32 i32 i32) (result i32)
    (call $cchat_write_msg (local.get 0) (local.get 1) (local.get 2) (local.get 3) (local.get 4)))
  (func (export "p_cchat_write_fn") (param i32 i32 i32 i32) (result i32)
    (call $cchat_write_fn (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "p_cchat_ctl") (param i32 i32 i32 i32) (result i32)
    (call $cchat_ctl (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "p_cchat_send") (param i32 i32) (result i32) (call $cchat_send (local.get 0) (local.get 1)))
  (func (export "p_cchat_recv") (param i32 i32 i32) (result i32)
    (call $cchat_recv (local.get 0) (local.get 1) (local.get 2)))
  (func (export "p_cchat_close") (param i32) (result i32) (call $cchat_close (local.get 0)))

  (func (export "set_mode") (param i32) (global.set $mode (local.get 0)))
  (func (export "set_free_traps") (param i32) (global.set $free_traps (local.get 0)))
  (func (export "set_session") (param i32) (global.set $session (local.get 0)))

  ;; write `value`'s decimal-free form: 4 raw bytes would not be UTF-8-safe,
  ;; so tools report an rc as one ASCII char: 'A' + (-rc) (rc in -25..0).
  (func $put_rc (param $rc i32) (param $o i32) (param $lp i32) (result i32)
    (i32.store8 (local.get $o) (i32.sub (i32.const 65) (local.get $rc)))
    (i32.store (local.get $lp) (i32.const 1))
    (i32.const 0))

  (func $echo (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.load (local.get $lp)))
      (then (i32.store (local.get $lp) (local.get $n)) (return (i32.const -28))))
    (memory.copy (local.get $o) (local.get $a) (local.get $n))
    (i32.store (local.get $lp) (local.get $n))
    (i32.const 0))
  (func $scribble (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (memory.fill (local.get $o) (i32.const 120)
                 (i32.add (i32.load (local.get $lp)) (i32.const 4096)))
    (i32.const 0))
  (func $oob (param i32 i32 i32 i32) (result i32)
    (i32.store (i32.mul (memory.size) (i32.const 65536)) (i32.const 1))
    (i32.const 0))
  (func $deep (param $n i32) (result i32)
    (i32.add (call $deep (i32.add (local.get $n) (i32.const 1))) (i32.const 1)))
  (func $recurse (param i32 i32 i32 i32) (result i32) (call $deep (i32.const 0)))
  (func $sleeper (param i32 i32 i32 i32) (result i32) (call $sleep (i32.const 2147483647)) (i32.const 0))
  (func $quitter (param i32 i32 i32 i32) (result i32) (call $exit (i32.const 3)) (i32.const 0))
  (func $reenter (param i32 i32) (param $o i32) (param $lp i32) (result i32)
    (call $put_rc (call $cchat_send (global.get $session) (i32.const 2)) (local.get $o) (local.get $lp)))
  (func $closer (param i32 i32) (param $o i32) (param $lp i32) (result i32)
    (call $put_rc (call $cchat_close (global.get $session)) (local.get $o) (local.get $lp)))
  (func $mover (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (drop (memory.grow (i32.const 1024)))
    (call $echo (local.get $a) (local.get $n) (local.get $o) (local.get $lp)))
  (func $len_max (param i32 i32 i32) (param $lp i32) (result i32)
    (i32.store (local.get $lp) (i32.const -1)) (i32.const 0))
  (func $ask_max (param i32 i32 i32) (param $lp i32) (result i32)
    (i32.store (local.get $lp) (i32.const -1)) (i32.const -28))
  (func $spin (param i32 i32 i32 i32) (result i32) (loop $l (br $l)) (i32.const 0))
  (func $negative_len (param i32 i32 i32) (param $lp i32) (result i32)
    (i32.store (local.get $lp) (i32.const -1)) (i32.const 0))
  (func $clobber (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (memory.fill (local.get $a) (i32.const 0) (local.get $n))
    (i32.store (local.get $lp) (i32.const 2))
    (i32.store16 (local.get $o) (i32.const 0x6b6f))
    (i32.const 0))
  (table (export "__indirect_function_table") 14 funcref)
  (elem (i32.const 0) $echo $scribble $oob $recurse $sleeper $quitter $reenter $closer $mover
        $len_max $ask_max $spin $negative_len $clobber)

  (func (export "spear_alloc") (param $size i32) (result i32)
    (local $p i32)
    (if (i32.eq (global.get $mode) (i32.const 1)) (then (return (i32.const 0))))
    (if (i32.eq (global.get $mode) (i32.const 2)) (then (return (i32.const -16))))
    (if (i32.eq (global.get $mode) (i32.const 3)) (then unreachable))
    (if (i32.eq (global.get $mode) (i32.const 4)) (then (loop $l (br $l))))
    (if (i32.eq (global.get $mode) (i32.const 5))
      (then (return (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 8)))))
    (if (i32.eq (global.get $mode) (i32.const 6)) (then (return (i32.const 4096))))
    (local.set $p (global.get $heap))
    (global.set $heap (i32.and (i32.add (i32.add (global.get $heap) (local.get $size)) (i32.const 7)) (i32.const -8)))
    (block $ok
      (loop $grow
        (br_if $ok (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
        (if (i32.lt_s (memory.grow (i32.const 1)) (i32.const 0)) (then (return (i32.const 0))))
        (br $grow)))
    (local.get $p))
  (func (export "spear_free") (param i32 i32)
    (if (global.get $free_traps) (then unreachable)))
  (func (export "_start"))
)

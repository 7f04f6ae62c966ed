;; The benchmark guest: re-exports the chat hostcalls as p_<name> so Python can
;; drive a session as the guest would, loops a hostcall from inside wasm (so
;; only the hostcall is timed, not the Python -> wasm entry), and holds two
;; tools in its funcref table: 0 echo (output = arguments), 1 sum (adds every
;; integer in the arguments, answers {"sum":N}).
(module
  (import "spear" "cchat_create" (func $cchat_create (result i32)))
  (import "spear" "cchat_write_msg" (func $cchat_write_msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_write_fn" (func $cchat_write_fn (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_ctl" (func $cchat_ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $cchat_send (param i32 i32) (result i32)))
  (import "spear" "cchat_recv" (func $cchat_recv (param i32 i32 i32) (result i32)))
  (import "spear" "cchat_close" (func $cchat_close (param i32) (result i32)))

  (memory (export "memory") 8)

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

  ;; cchat_write_msg n times; returns the last rc (0 when every call worked).
  (func (export "loop_write_msg") (param $n i32) (param $fd i32) (param $rp i32) (param $rl i32)
        (param $cp i32) (param $cl i32) (result i32)
    (local $rc i32)
    (block $done
      (loop $again
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $rc (call $cchat_write_msg (local.get $fd) (local.get $rp) (local.get $rl)
                                              (local.get $cp) (local.get $cl)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $again)))
    (local.get $rc))

  ;; table[0] echo
  (func $echo (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.load (local.get $lp)))
      (then (i32.store (local.get $lp) (local.get $n)) (return (i32.const -28))))
    (memory.copy (local.get $o) (local.get $a) (local.get $n))
    (i32.store (local.get $lp) (local.get $n))
    (i32.const 0))

  ;; table[1] sum: every run of decimal digits is a number; output {"sum":N}
  (func $sum (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (local $i i32) (local $c i32) (local $acc i64) (local $total i64) (local $in i32)
    (local $p i32) (local $len i32)
    (block $scanned
      (loop $scan
        (br_if $scanned (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $c (i32.load8_u (i32.add (local.get $a) (local.get $i))))
        (if (i32.and (i32.ge_u (local.get $c) (i32.const 48)) (i32.le_u (local.get $c) (i32.const 57)))
          (then
            (local.set $acc (i64.add (i64.mul (local.get $acc) (i64.const 10))
                                     (i64.extend_i32_u (i32.sub (local.get $c) (i32.const 48)))))
            (local.set $in (i32.const 1)))
          (else
            (if (local.get $in)
              (then (local.set $total (i64.add (local.get $total) (local.get $acc)))
                    (local.set $acc (i64.const 0)) (local.set $in (i32.const 0))))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (local.set $total (i64.add (local.get $total) (local.get $acc)))
    ;; digits backwards into scratch at 60000..60032, then the output
    (local.set $p (i32.const 60032))
    (loop $digit
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48)
                                         (i32.wrap_i64 (i64.rem_u (local.get $total) (i64.const 10)))))
      (local.set $total (i64.div_u (local.get $total) (i64.const 10)))
      (br_if $digit (i64.ne (local.get $total) (i64.const 0))))
    (local.set $len (i32.add (i32.const 8) (i32.sub (i32.const 60032) (local.get $p))))
    (if (i32.gt_u (local.get $len) (i32.load (local.get $lp)))
      (then (i32.store (local.get $lp) (local.get $len)) (return (i32.const -28))))
    ;; {"sum":
    (i64.store (local.get $o) (i64.const 0x003a226d7573227b))
    (memory.copy (i32.add (local.get $o) (i32.const 7)) (local.get $p)
                 (i32.sub (i32.const 60032) (local.get $p)))
    (i32.store8 (i32.add (local.get $o) (i32.sub (local.get $len) (i32.const 1))) (i32.const 125))
    (i32.store (local.get $lp) (local.get $len))
    (i32.const 0))

  (table (export "__indirect_function_table") 2 funcref)
  (elem (i32.const 0) $echo $sum)
)

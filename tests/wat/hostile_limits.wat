;; A guest that hands hostcalls payloads far past their limits, for
;; tests/test_hostile_limits.py. The payloads are built in guest memory by the
;; guest itself (`grow`, `fill`), so the host never holds a copy of them
;; unless a hostcall makes one. Hostcalls are re-exported as `p_<name>` for
;; tests/probe.py; table[0] is an echo tool.
(module
  (import "spear" "log" (func $log (param i32 i32 i32) (result i32)))
  (import "spear" "cchat_create" (func $cchat_create (result i32)))
  (import "spear" "cchat_write_msg" (func $cchat_write_msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_write_fn" (func $cchat_write_fn (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_ctl" (func $cchat_ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_close" (func $cchat_close (param i32) (result i32)))
  (import "spear" "spear_fd_ctl" (func $spear_fd_ctl (param i32 i32 i32 i32) (result i32)))

  (memory (export "memory") 4)

  (func (export "p_log") (param i32 i32 i32) (result i32) (call $log (local.get 0) (local.get 1) (local.get 2)))
  (func (export "p_cchat_create") (result i32) (call $cchat_create))
  (func (export "p_cchat_write_msg") (param i32 i32 i32 i32 i32) (result i32)
    (call $cchat_write_msg (local.get 0) (local.get 1) (local.get 2) (local.get 3) (local.get 4)))
  (func (export "p_cchat_write_fn") (param i32 i32 i32 i32) (result i32)
    (call $cchat_write_fn (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "p_cchat_ctl") (param i32 i32 i32 i32) (result i32)
    (call $cchat_ctl (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "p_cchat_close") (param i32) (result i32) (call $cchat_close (local.get 0)))
  (func (export "p_spear_fd_ctl") (param i32 i32 i32 i32) (result i32)
    (call $spear_fd_ctl (local.get 0) (local.get 1) (local.get 2) (local.get 3)))

  ;; memory.grow by `pages`: the old size in pages, or -1
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  ;; `len` copies of `byte` at `ptr`
  (func (export "fill") (param i32 i32 i32) (memory.fill (local.get 0) (local.get 1) (local.get 2)))

  (func $echo (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.load (local.get $lp)))
      (then (i32.store (local.get $lp) (local.get $n)) (return (i32.const -28))))
    (memory.copy (local.get $o) (local.get $a) (local.get $n))
    (i32.store (local.get $lp) (local.get $n))
    (i32.const 0))
  (table (export "__indirect_function_table") 1 funcref)
  (elem (i32.const 0) $echo)
  (func (export "_start"))
)

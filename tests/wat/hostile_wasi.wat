;; Re-exports the WASI calls spearpy implements itself (poll_oneoff,
;; clock_time_get) as `p_<name>`, so tests can hand them any arguments.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "p_poll_oneoff") (param i32 i32 i32 i32) (result i32)
    (call $poll (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "p_clock_time_get") (param i32 i64 i32) (result i32)
    (call $clock (local.get 0) (local.get 1) (local.get 2)))
  (func (export "_start"))
)

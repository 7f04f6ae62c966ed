;; A guest that hands mic_ctl an fd that is not a mic (its epoll fd: EBADF),
;; keeps that fd open, and then asks the world for something (a random
;; number). Prints mic_ctl's result and the number.
(module
  (import "spear" "spear_epoll_create" (func $epoll_create (result i32)))
  (import "spear" "mic_ctl" (func $mic_ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "random_i64" (func $random_i64 (result i64)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "_start")
    (i32.store (i32.const 0x200) (i32.const 64))
    (i32.store (i32.const 0x100) (call $mic_ctl (call $epoll_create) (i32.const 2)
                                       (i32.const 0x300) (i32.const 0x200)))
    (i64.store (i32.const 0x104) (call $random_i64))
    (i32.store (i32.const 0x10) (i32.const 0x100))
    (i32.store (i32.const 0x14) (i32.const 12))
    (drop (call $fd_write (i32.const 1) (i32.const 0x10) (i32.const 1) (i32.const 0x18)))))

;; A guest whose request depends on a mounted file: it reads `note.txt` from
;; its first preopened directory (fd 3, WASI path_open + fd_read), sends the
;; text as the user message with an auto send and prints the answer's body.
;; File reads are not journaled (the file is the run's input, not an answer
;; of the world), so a changed file shows as a different completion request
;; when the run is resumed or replayed.
(module
  (import "spear" "cchat_create" (func $cchat_create (result i32)))
  (import "spear" "cchat_write_msg" (func $cchat_write_msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $cchat_send (param i32 i32) (result i32)))
  (import "spear" "cchat_recv" (func $cchat_recv (param i32 i32 i32) (result i32)))
  (import "spear" "cchat_close" (func $cchat_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 2)
  (data (i32.const 0x40) "user")
  (data (i32.const 0x60) "note.txt")

  ;; stdout <- memory[ptr, ptr+len)
  (func $out (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0x200) (local.get $ptr))
    (i32.store (i32.const 0x204) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0x200) (i32.const 1) (i32.const 0x208))))

  (func (export "_start")
    (local $fd i32) (local $text i32) (local $session i32) (local $response i32) (local $n i32)
    ;; note.txt in the first preopened dir, read-only (rights: FD_READ)
    (if (call $path_open (i32.const 3) (i32.const 0) (i32.const 0x60) (i32.const 8)
                         (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 0x80))
      (then (call $proc_exit (i32.const 3))))
    (local.set $fd (i32.load (i32.const 0x80)))
    ;; one read of at most 512 bytes into 0x400
    (i32.store (i32.const 0x90) (i32.const 0x400))
    (i32.store (i32.const 0x94) (i32.const 0x200))
    (if (call $fd_read (local.get $fd) (i32.const 0x90) (i32.const 1) (i32.const 0x98))
      (then (call $proc_exit (i32.const 4))))
    (local.set $text (i32.load (i32.const 0x98)))
    (local.set $session (call $cchat_create))
    (drop (call $cchat_write_msg (local.get $session) (i32.const 0x40) (i32.const 4)
                                 (i32.const 0x400) (local.get $text)))
    (local.set $response (call $cchat_send (local.get $session) (i32.const 2)))
    (if (i32.lt_s (local.get $response) (i32.const 0)) (then (call $proc_exit (i32.const 5))))
    (i32.store (i32.const 0x300) (i32.const 0x4000))
    (local.set $n (call $cchat_recv (local.get $response) (i32.const 0x1000) (i32.const 0x300)))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then (call $proc_exit (i32.const 6))))
    (call $out (i32.const 0x1000) (local.get $n))
    (drop (call $cchat_close (local.get $response)))
    (drop (call $cchat_close (local.get $session)))))

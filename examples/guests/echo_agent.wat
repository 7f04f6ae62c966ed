;; echo_agent: a small agent used by the embedding docs, the worker example and
;; the batch tests. It builds one prompt from its inputs, asks the model with
;; automatic tool calls on, and prints the content of the final answer.
;;
;; prompt = $PROMPT_PREFIX + argv[1..] joined by " " + everything on stdin
;;
;; It registers one tool, `echo` (table slot 0), which returns its JSON
;; arguments unchanged, so a scripted model can round-trip the prompt through
;; a real tool call. Exit codes: 0 printed the answer content; 2 the answer had
;; no content (the whole body is printed instead); 3 the body did not fit;
;; 4 an input did not fit its buffer.
(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $environ_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "spear" "cchat_create" (func $cchat_create (result i32)))
  (import "spear" "cchat_write_msg" (func $cchat_write_msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_write_fn" (func $cchat_write_fn (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $cchat_send (param i32 i32) (result i32)))
  (import "spear" "cchat_recv" (func $cchat_recv (param i32 i32 i32) (result i32)))
  (import "spear" "cchat_close" (func $cchat_close (param i32) (result i32)))

  ;; 16 pages: fixed regions below, the tool allocator's heap from 0xC9000 up.
  (memory (export "memory") 16)
  (table (export "__indirect_function_table") 1 funcref)
  (elem (i32.const 0) $echo)

  ;; 0x0000 scratch words     0x1000 argv pointers    0x5000 argv strings
  ;; 0x15000 env pointers     0x19000 env strings     0x29000 prompt (128 KiB)
  ;; 0x49000 answer body      0x89000 answer content  0xC9000 heap
  (global $S i32 (i32.const 0))
  (global $ARGV i32 (i32.const 0x1000))
  (global $ARGB i32 (i32.const 0x5000))
  (global $ENVP i32 (i32.const 0x15000))
  (global $ENVB i32 (i32.const 0x19000))
  (global $MSG i32 (i32.const 0x29000))
  (global $MSG_CAP i32 (i32.const 0x20000))
  (global $BODY i32 (i32.const 0x49000))
  (global $BODY_CAP i32 (i32.const 0x40000))
  (global $OUT i32 (i32.const 0x89000))
  (global $heap (mut i32) (i32.const 0xC9000))
  (global $msg_len (mut i32) (i32.const 0))

  (data (i32.const 0x400) "user")
  (data (i32.const 0x410) "PROMPT_PREFIX=")
  (data (i32.const 0x420) "\22content\22:\22")
  (data (i32.const 0x440) "{\22type\22:\22function\22,\22function\22:{\22name\22:\22echo\22,\22description\22:\22returns its arguments\22,\22parameters\22:{\22type\22:\22object\22,\22properties\22:{\22text\22:{\22type\22:\22string\22}},\22required\22:[\22text\22]}}}")
  (global $SCHEMA_LEN i32 (i32.const 175))

  (func $strlen (param $p i32) (result i32) (local $n i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br $l)))
    (local.get $n))

  ;; Append n bytes at p to the prompt; exit 4 if it would overflow.
  (func $append (param $p i32) (param $n i32)
    (if (i32.gt_u (i32.add (global.get $msg_len) (local.get $n)) (global.get $MSG_CAP))
      (then (call $proc_exit (i32.const 4))))
    (memory.copy (i32.add (global.get $MSG) (global.get $msg_len)) (local.get $p) (local.get $n))
    (global.set $msg_len (i32.add (global.get $msg_len) (local.get $n))))

  ;; 1 if the n bytes at a equal those at b.
  (func $eq (param $a i32) (param $b i32) (param $n i32) (result i32) (local $i i32)
    (block $no (loop $l
      (if (i32.ge_u (local.get $i) (local.get $n)) (then (return (i32.const 1))))
      (br_if $no (i32.ne (i32.load8_u (i32.add (local.get $a) (local.get $i)))
                         (i32.load8_u (i32.add (local.get $b) (local.get $i)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (i32.const 0))

  (func $write (param $fd i32) (param $p i32) (param $n i32)
    (i32.store (i32.const 16) (local.get $p))
    (i32.store (i32.const 20) (local.get $n))
    (drop (call $fd_write (local.get $fd) (i32.const 16) (i32.const 1) (i32.const 24))))

  (func $read_env (local $count i32) (local $i i32) (local $p i32)
    (drop (call $environ_sizes_get (i32.const 0) (i32.const 4)))
    (local.set $count (i32.load (i32.const 0)))
    (if (i32.or (i32.gt_u (local.get $count) (i32.const 4096))
                (i32.gt_u (i32.load (i32.const 4)) (i32.const 0x10000)))
      (then (call $proc_exit (i32.const 4))))
    (drop (call $environ_get (global.get $ENVP) (global.get $ENVB)))
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
      (local.set $p (i32.load (i32.add (global.get $ENVP) (i32.shl (local.get $i) (i32.const 2)))))
      (if (call $eq (local.get $p) (i32.const 0x410) (i32.const 14))
        (then (local.set $p (i32.add (local.get $p) (i32.const 14)))
              (call $append (local.get $p) (call $strlen (local.get $p)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l))))

  (func $read_args (local $argc i32) (local $i i32) (local $p i32)
    (drop (call $args_sizes_get (i32.const 0) (i32.const 4)))
    (local.set $argc (i32.load (i32.const 0)))
    (if (i32.or (i32.gt_u (local.get $argc) (i32.const 4096))
                (i32.gt_u (i32.load (i32.const 4)) (i32.const 0x10000)))
      (then (call $proc_exit (i32.const 4))))
    (drop (call $args_get (global.get $ARGV) (global.get $ARGB)))
    (local.set $i (i32.const 1))
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $argc)))
      (if (i32.gt_u (local.get $i) (i32.const 1))
        (then (i32.store8 (i32.const 8) (i32.const 32)) (call $append (i32.const 8) (i32.const 1))))
      (local.set $p (i32.load (i32.add (global.get $ARGV) (i32.shl (local.get $i) (i32.const 2)))))
      (call $append (local.get $p) (call $strlen (local.get $p)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l))))

  (func $read_stdin (local $n i32)
    (block $done (loop $l
      (br_if $done (i32.ge_u (global.get $msg_len) (global.get $MSG_CAP)))
      (i32.store (i32.const 16) (i32.add (global.get $MSG) (global.get $msg_len)))
      (i32.store (i32.const 20) (i32.sub (global.get $MSG_CAP) (global.get $msg_len)))
      (br_if $done (call $fd_read (i32.const 0) (i32.const 16) (i32.const 1) (i32.const 24)))
      (local.set $n (i32.load (i32.const 24)))
      (br_if $done (i32.eqz (local.get $n)))
      (global.set $msg_len (i32.add (global.get $msg_len) (local.get $n)))
      (br $l))))

  ;; Print the JSON string value after "content":" in the body (escapes kept
  ;; as they are); returns 0 if the body has no such value.
  (func $print_content (param $len i32) (result i32) (local $i i32) (local $j i32) (local $c i32)
    (block $found (loop $find
      (if (i32.gt_u (i32.add (local.get $i) (i32.const 11)) (local.get $len)) (then (return (i32.const 0))))
      (br_if $found (call $eq (i32.add (global.get $BODY) (local.get $i)) (i32.const 0x420) (i32.const 11)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $find)))
    (local.set $i (i32.add (local.get $i) (i32.const 11)))
    (block $end (loop $copy
      (br_if $end (i32.ge_u (local.get $i) (local.get $len)))
      (local.set $c (i32.load8_u (i32.add (global.get $BODY) (local.get $i))))
      (br_if $end (i32.eq (local.get $c) (i32.const 34)))
      (i32.store8 (i32.add (global.get $OUT) (local.get $j)) (local.get $c))
      (local.set $j (i32.add (local.get $j) (i32.const 1)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (if (i32.and (i32.eq (local.get $c) (i32.const 92)) (i32.lt_u (local.get $i) (local.get $len)))
        (then
          (i32.store8 (i32.add (global.get $OUT) (local.get $j))
                      (i32.load8_u (i32.add (global.get $BODY) (local.get $i))))
          (local.set $j (i32.add (local.get $j) (i32.const 1)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))))
      (br $copy)))
    (i32.store8 (i32.add (global.get $OUT) (local.get $j)) (i32.const 10))
    (call $write (i32.const 1) (global.get $OUT) (i32.add (local.get $j) (i32.const 1)))
    (i32.const 1))

  (func (export "_start") (local $fd i32) (local $rfd i32) (local $n i32)
    (call $read_env)
    (call $read_args)
    (call $read_stdin)
    (local.set $fd (call $cchat_create))
    (drop (call $cchat_write_fn (local.get $fd) (i32.const 0) (i32.const 0x440) (global.get $SCHEMA_LEN)))
    (drop (call $cchat_write_msg (local.get $fd) (i32.const 0x400) (i32.const 4)
                                 (global.get $MSG) (global.get $msg_len)))
    (local.set $rfd (call $cchat_send (local.get $fd) (i32.const 3)))
    (i32.store (i32.const 32) (global.get $BODY_CAP))
    (local.set $n (call $cchat_recv (local.get $rfd) (global.get $BODY) (i32.const 32)))
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then (call $proc_exit (i32.const 3))))
    (drop (call $cchat_close (local.get $fd)))
    (if (i32.eqz (call $print_content (local.get $n)))
      (then (call $write (i32.const 1) (global.get $BODY) (local.get $n))
            (call $proc_exit (i32.const 2)))))

  ;; table[0] echo: output = the arguments (asks for room with -28).
  (func $echo (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.load (local.get $lp)))
      (then (i32.store (local.get $lp) (local.get $n)) (return (i32.const -28))))
    (memory.copy (local.get $o) (local.get $a) (local.get $n))
    (i32.store (local.get $lp) (local.get $n))
    (i32.const 0))

  ;; Bump allocator for the host's tool buffers; every run is a fresh instance.
  (func (export "spear_alloc") (param $size i32) (result i32) (local $p i32) (local $need i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (local.set $need (i32.add (local.get $p) (local.get $size)))
    (if (i32.gt_u (local.get $need) (i32.mul (memory.size) (i32.const 65536)))
      (then (if (i32.eq (memory.grow (i32.add (i32.shr_u (i32.sub (local.get $need)
                          (i32.mul (memory.size) (i32.const 65536))) (i32.const 16)) (i32.const 1)))
                        (i32.const -1))
              (then (return (i32.const 0))))))
    (global.set $heap (local.get $need))
    (local.get $p))
  (func (export "spear_free") (param i32 i32))
)

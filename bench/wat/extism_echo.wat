;; The Extism counterpart of the guest's echo tool, written against the
;; Extism kernel ABI the way a PDK plugin works: load the input into linear
;; memory, then copy it into an Extism output block.
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 2)
  (func (export "echo") (result i32)
    (local $n i64) (local $i i64) (local $off i64)
    (local.set $n (call $input_length))
    ;; input -> linear memory at 1024
    (block $in_done
      (loop $in
        (br_if $in_done (i64.gt_u (i64.add (local.get $i) (i64.const 8)) (local.get $n)))
        (i64.store (i32.wrap_i64 (i64.add (i64.const 1024) (local.get $i)))
                   (call $input_load_u64 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 8)))
        (br $in)))
    (block $tail_done
      (loop $tail
        (br_if $tail_done (i64.ge_u (local.get $i) (local.get $n)))
        (i32.store8 (i32.wrap_i64 (i64.add (i64.const 1024) (local.get $i)))
                    (call $input_load_u8 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $tail)))
    ;; linear memory -> an Extism block, set as the output
    (local.set $off (call $alloc (local.get $n)))
    (local.set $i (i64.const 0))
    (block $out_done
      (loop $out
        (br_if $out_done (i64.gt_u (i64.add (local.get $i) (i64.const 8)) (local.get $n)))
        (call $store_u64 (i64.add (local.get $off) (local.get $i))
                         (i64.load (i32.wrap_i64 (i64.add (i64.const 1024) (local.get $i)))))
        (local.set $i (i64.add (local.get $i) (i64.const 8)))
        (br $out)))
    (block $out_tail_done
      (loop $out_tail
        (br_if $out_tail_done (i64.ge_u (local.get $i) (local.get $n)))
        (call $store_u8 (i64.add (local.get $off) (local.get $i))
                        (i32.load8_u (i32.wrap_i64 (i64.add (i64.const 1024) (local.get $i)))))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $out_tail)))
    (call $output_set (local.get $off) (local.get $n))
    (i32.const 0))
)

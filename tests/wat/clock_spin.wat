;; Reads the clock, computes for a while (no hostcall), reads it again, then
;; computes until the run is stopped: a guest that keeps going without
;; asking the world anything or waiting. Its first reading must still reach
;; its journal file (docs/durable.md: at least every ANSWERS_WAIT_S).
(module
  (import "spear" "time_now_ms" (func $now (result i64)))
  (memory (export "memory") 1)

  (func $spin (param $n i64)
    (loop $again
      (local.set $n (i64.sub (local.get $n) (i64.const 1)))
      (br_if $again (i64.gt_s (local.get $n) (i64.const 0)))))

  (func (export "_start")
    (drop (call $now))
    (call $spin (i64.const 500000000))
    (drop (call $now))
    (loop $forever
      (call $spin (i64.const 1000000))
      (br $forever))))

;; Reads the clock once, then computes until the run is stopped: no call
;; comes after the reading, so only the journal's own bound (docs/durable.md:
;; at least every ANSWERS_WAIT_S) can write it out while the guest goes on.
(module
  (import "spear" "time_now_ms" (func $now (result i64)))
  (memory (export "memory") 1)

  (func (export "_start")
    (local $n i64)
    (drop (call $now))
    (loop $forever
      (local.set $n (i64.add (local.get $n) (i64.const 1)))
      (br $forever))))

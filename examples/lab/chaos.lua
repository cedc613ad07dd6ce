-- Renewal and exactly-once while the infrastructure misbehaves: from 15 s
-- the dev broker answers 30 % of renewals with an error and every renewal
-- 0.8 s late; from 30 s to 40 s Redis is down (the policy fails closed: it
-- does not run a message it cannot lock, and gives it back); at 45 s the
-- broker is healthy again.
return {
  description = "renewal errors and latency on the broker, Redis down for 10 s, under renewal + exactly-once",
  time_scale = 0.1,
  workload = {
    rate = 10, duration = 60, body_bytes = 1024,
    handler = { mean = 1, p99 = 6, p999 = 40, max = 60 },
    failure_rate = 0.01, poison_rate = 0.005,
    drain = 120,
  },
  fleet = {
    workers = 2, concurrency = 64,
    consumer = { invisible = 10 },
    policy = { exactly_once = { lock_ttl = 10, defer_delay = 5, fail_delay = 5 } },
    run = { max_attempts = 4, nack_delay = 2 },
  },
  faults = {
    { at = 15, broker = { fail_change = 0.3, delay_change_ms = 800 } },
    { at = 30, redis = "down" },
    { at = 40, redis = "up" },
    { at = 45, broker = { fail_change = 0, delay_change_ms = 0 } },
  },
}

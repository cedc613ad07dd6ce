-- Incident 1: a consumer without renewal. Every message is hidden for a fixed
-- 10 s window; the handler times have a heavy tail (1 % past 6 s, the slowest
-- thousandth near a minute), so a long task's window runs out while it still
-- works and the broker hands it to another worker, which runs it again. In
-- production this was 138 duplicate runs in a month; here, at ten times the
-- speed, a minute of traffic shows the same mechanism.
-- Compare with renewed.lua: the same workload with mqlease's renewal.
return {
  description = "fixed 10 s window, no renewal, heavy-tailed handler times (the first incident)",
  time_scale = 0.1,
  workload = {
    rate = 10, duration = 60, body_bytes = 2458,
    handler = { mean = 1, p99 = 6, p999 = 60, max = 90 },
    drain = 120,
  },
  fleet = {
    workers = 2, concurrency = 64,
    consumer = { invisible = 10, renew = false },
  },
}

-- The workload of no_renewal.lua under mqlease: a 10 s lease renewed every
-- ~3.3 s by the C core while the handler runs, so no window runs out under a
-- long task and nothing runs twice.
return {
  description = "10 s lease renewed while the handler runs, same workload as no_renewal",
  time_scale = 0.1,
  workload = {
    rate = 10, duration = 60, body_bytes = 2458,
    handler = { mean = 1, p99 = 6, p999 = 60, max = 90 },
    drain = 120,
  },
  fleet = {
    workers = 2, concurrency = 64,
    consumer = { invisible = 10 },
  },
}

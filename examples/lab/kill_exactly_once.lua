-- A worker SIGKILLed mid-traffic under mqlease's renewal and exactly-once
-- policy (a Redis lock per message, a fencing token, a done marker). Its
-- leases are no longer renewed, so its messages come back when their 10 s
-- lease runs out, and the lock (10 s too) no longer stands in the way; a
-- message whose effect happened just before the kill but whose done marker
-- was not yet written is the one kind of duplicate left. The killed worker
-- starts again 5 s later.
return {
  description = "SIGKILL of the busiest worker under renewal + exactly-once; recovery time of its messages",
  time_scale = 0.1,
  workload = {
    rate = 10, duration = 60, body_bytes = 2458,
    handler = { mean = 1, p99 = 6, p999 = 60, max = 90 },
    drain = 120,
  },
  fleet = {
    workers = 3, concurrency = 64,
    consumer = { invisible = 10 },
    policy = { exactly_once = { lock_ttl = 10, defer_delay = 5 } },
  },
  faults = {
    { at = 30, kill = "busiest", restart = 5 },
  },
}

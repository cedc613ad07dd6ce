-- renewed.lua's workload with the proxy frozen (SIGSTOP) for 15 scenario
-- seconds, longer than the 10 s lease: renewals go unanswered, so leases held
-- through the freeze expire and those messages may run again (the renewal is
-- at-least-once); nothing is lost, and the workers recover once it thaws.
-- Compare with renewed.lua side by side.
return {
  description = "10 s lease renewed; the proxy frozen from 20 s to 35 s",
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
  faults = {
    { at = 20, proxy = "freeze" },
    { at = 35, proxy = "thaw" },
  },
}

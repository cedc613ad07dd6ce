-- Incident 2: the RocketMQ 4.x PushConsumer, restarted. A consumer shut down
-- while handlers ran sent every running message back as a retry *and* left
-- it unacknowledged (the offset uncommitted), so each one came back twice;
-- the retries that were themselves running at the next restart were doubled
-- again. Modelled here as workers restarted by SIGTERM whose shutdown is
-- "push4x": a retry copy of each running message, then death without ack.
-- A rolling restart every 10 s, as a deployment does it.
-- Compare with drained_restarts.lua: the same restarts with mqlease's drain.
return {
  description = "rolling SIGTERM restarts of a 4.x-style consumer: retry copy + no ack (the second incident)",
  time_scale = 0.1,
  workload = {
    rate = 10, duration = 60, body_bytes = 1024,
    handler = { mean = 3, p99 = 15, p999 = 40, max = 50 },
    drain = 150,
  },
  fleet = {
    workers = 2, concurrency = 64,
    consumer = { invisible = 20 },
    shutdown = "push4x",
  },
  faults = {
    { at = 10, term = 1, restart = 2 },
    { at = 20, term = 2, restart = 2 },
    { at = 30, term = 1, restart = 2 },
    { at = 40, term = 2, restart = 2 },
    { at = 50, term = 1, restart = 2 },
  },
}

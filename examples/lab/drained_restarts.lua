-- The rolling restarts of push4x_restarts.lua under mqlease.run's graceful
-- drain: on SIGTERM the worker stops receiving, gives back what has not
-- started, lets running handlers finish for up to grace (15 s) and gives back
-- (nack) the ones still running, each exactly once. Nothing is copied, so a
-- restart never multiplies a message.
return {
  description = "the same rolling SIGTERM restarts with mqlease's graceful drain (grace 15 s)",
  time_scale = 0.1,
  workload = {
    rate = 10, duration = 60, body_bytes = 1024,
    handler = { mean = 3, p99 = 15, p999 = 40, max = 50 },
    drain = 150,
  },
  fleet = {
    workers = 2, concurrency = 64,
    consumer = { invisible = 20 },
    run = { grace = 15, mode = "wait" },
    shutdown = "drain",
  },
  faults = {
    { at = 10, term = 1, restart = 2 },
    { at = 20, term = 2, restart = 2 },
    { at = 30, term = 1, restart = 2 },
    { at = 40, term = 2, restart = 2 },
    { at = 50, term = 1, restart = 2 },
  },
}

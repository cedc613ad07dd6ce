-- mqlease: RocketMQ 5 messages as distributed leases.
--
--   local mqlease = require "mqlease"
--   local c = assert(mqlease.consumer{ endpoints = "127.0.0.1:8081", group = "g", topic = "t" })
--   for _, m in ipairs(assert(c:receive())) do work(m.body); m:ack() end
--
-- See docs/api.md for every option, docs/metrics.md for the metrics and
-- docs/guarantees.md for the guarantees.

local core = require "mqlease.core"
local consumer = require "mqlease.consumer"
local producer = require "mqlease.producer"
local loop = require "mqlease.loop"
local metrics = require "mqlease.metrics"
local policy = require "mqlease.policy"
local run = require "mqlease.run"
local redis = require "mqlease.redis"
local trace = require "mqlease.trace"
local signals = require "mqlease.signals"

local _M = {
  _VERSION = core._VERSION,
  consumer = consumer.new,
  producer = producer.new,
  sleep = loop.sleep,
  now = core.now,
  metrics = metrics,
  policy = policy,
  run = run,
  redis = redis.new,
  signals = signals.new,
  trace = trace,
  null = core.null,
}

return _M

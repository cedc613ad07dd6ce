-- spec/support/fake_consumer.lua: a stand-in for mqlease.consumer that
-- mqlease.run can drive with no server. It hands out messages (opts.every
-- seconds apart, as many as opts.total, forever when nil; each stored
-- opts.stored_ago seconds before its receipt), records acks and nacks, answers
-- receive with nil, "the consumer is closed", "CLOSED" once closed, and
-- returns what metrics() holds. Only what mqlease.run and mqlease.metrics
-- touch is here: the options run reads, the session's client it cancels
-- receives on, topic, group and id.
local wait = require "mqlease.loop"
local core = require "mqlease.core"

local _M = {}

function _M.new(opts)
  opts = opts or {}
  local every = opts.every or 0.01
  local c = {
    topic = opts.topic or "t", group = opts.group or "g",
    options = { release_delay = 1, batch = 32, request_timeout = 3 },
    _router = { client = { cancel_receives = function() end } },
    acked = {}, nacked = {}, given = 0, receives = 0, closed = false,
    raw = opts.metrics or {},
  }
  local function message(i)
    local stored = core.wall() - (opts.stored_ago or 0)
    local m = { id = "m" .. i, body = opts.body or "x", topic = c.topic, delivery_attempt = 1,
      born_at = stored, store_at = stored, lease = { alive = function() return true end } }
    function m.nack() c.nacked[#c.nacked + 1] = m.id; return true end
    function m.let_expire() return true end
    return m
  end
  function c.receive(_, want)
    c.receives = c.receives + 1
    if c.closed then return nil, "the consumer is closed", "CLOSED" end
    wait.sleep(every)
    if c.closed then return nil, "the consumer is closed", "CLOSED" end
    local msgs = {}
    local last = c.given + math.min(want, opts.per_receive or 1)
    if opts.total then last = math.min(last, opts.total) end
    for i = c.given + 1, last do msgs[#msgs + 1] = message(i) end
    c.given = last
    return msgs
  end
  function c.ack(_, msgs)
    if c.closed then return nil, "the consumer is closed", "CLOSED" end
    for _, m in ipairs(msgs) do c.acked[#c.acked + 1] = m.id end
    return true
  end
  function c.close()
    c.closed = true
    return true
  end
  function c.metrics()
    return c.raw
  end
  function c.id()
    return opts.id or "fake@0#0"
  end
  return c
end

return _M

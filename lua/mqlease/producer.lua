-- mqlease.producer: sends messages to a RocketMQ 5 proxy (SendMessage), one
-- message per call, waiting for the proxy's answer in the caller's loop.

local core = require "mqlease.core"
local config = require "mqlease.config"
local router_mod = require "mqlease.router"
local metrics = require "mqlease.metrics"

local setmetatable, rawget, type = setmetatable, rawget, type
local floor = math.floor

local _M = {}
local methods = {}
local mt = { __name = "mqlease.producer", __index = methods }

function _M.new(opts)
  local o = config.producer_options(opts)
  local args = config.client_core("mqlease.producer", o)
  args.topics = o.topics
  local client, start_op = core.producer(args)
  local router, err, code = router_mod.start(client, start_op, o.start_timeout, "mqlease.producer")
  if not router then return nil, err, code end
  return setmetatable({ options = config.kept(o), _router = router, _closed = false, _routes = {} }, mt)
end

-- Sends one message. opts: tag, keys (string or array), properties (string -> string),
-- and at most one of message_group (a FIFO message: the topic's message.type must be
-- FIFO), delay (seconds from now) or deliver_at (epoch seconds) (a DELAY message: the
-- topic's message.type must be DELAY); trace_context, a W3C traceparent (see
-- mqlease.trace). Returns the message id and the queue offset,
-- or nil, message, code.
function methods:send(topic, body, opts)
  opts = config.check_send(topic, body, opts)
  if rawget(self, "_closed") then return nil, "the producer is closed", "CLOSED" end
  local keys = opts.keys
  if type(keys) == "string" then keys = { keys } end
  local router = self._router
  if not self._routes[topic] then
    -- as the official clients do: learn the route once, so that an unknown
    -- topic fails as TOPIC_NOT_FOUND (the proxy's send would blame the message type)
    local ok, err, code = router:call(router.client:route(topic))
    if not ok then return nil, err, code end
    self._routes[topic] = true
  end
  local deliver_at = opts.deliver_at and floor(opts.deliver_at * 1000 + 0.5) or nil
  local delay = opts.delay and floor(opts.delay * 1000 + 0.5) or nil
  local started = core.now()
  local ev = router:result(router.client:send(topic, body, opts.tag, keys, opts.properties,
    opts.message_group, deliver_at, delay, opts.trace_context))
  -- the official clients' rocketmq_send_cost_time (milliseconds)
  metrics.sent(self, topic, (core.now() - started) * 1000, ev.ok)
  if not ev.ok then return nil, ev.err, ev.code end
  return ev.message_id, ev.offset
end

-- The client id the proxy knows this producer by (as consumer:id()).
function methods:id()
  return self._router.client:id()
end

function methods:metrics()
  if rawget(self, "_closed") then return {} end
  return self._router.client:metrics()
end

function methods:close()
  if rawget(self, "_closed") then return true end
  self._closed = true
  local router = self._router
  router:result(router.client:terminate())
  router:close()
  return true
end

mt.__close = function(self) self:close() end

return _M

-- mqlease.redis: a Redis client whose calls never block other handlers.
--
--   local r = mqlease.redis("127.0.0.1:6379")      -- or "unix:/run/redis.sock",
--   r:call("INCR", "k")                             -- or { address=, username=, password=, db=, timeout= }
--   mqlease.redis { sentinels = {"h:26379", ...}, master = "mymaster", password=, db=,
--                   sentinel_password= }  -- the sentinels' own requirepass, if any
--   mqlease.redis { cluster = {"h:7000", ...}, username=, password= }
--
-- Commands run on a C thread (hiredis); a call waits for its reply through
-- mqlease.loop: it yields inside mqlease.run, cqueues or nginx, else blocks. Replies: strings, integers,
-- arrays (tables), mqlease.null for a nil reply, "OK" for a status. A Redis
-- error reply returns nil, message, "REDIS_ERROR"; no connection returns
-- nil, message, "UNAVAILABLE" (or "TIMEOUT"); bad arguments raise.

local core = require "mqlease.core"
local session_mod = require "mqlease.router"

local type, tostring, error, setmetatable = type, tostring, error, setmetatable
local floor = math.floor
local unpack = table.unpack or unpack

local _M = { null = core.null }
local methods = {}
local mt = { __index = methods, __name = "mqlease.redis" }

local function node_list(k, v)
  if type(v) ~= "table" or #v == 0 then
    error(("mqlease.redis: option '%s' must be a list of \"host:port\" strings"):format(k), 4)
  end
  local out = {}
  for i, a in ipairs(v) do
    if type(a) ~= "string" or not a:match("^.+:%d+$") then
      error(("mqlease.redis: option '%s' must be a list of \"host:port\" strings (entry %d: %s)"):format(
        k, i, tostring(a)), 4)
    end
    out[i] = a
  end
  return out
end

local function set_address(cfg, v)
  if type(v) ~= "string" then error("mqlease.redis: option 'address' must be a string", 4) end
  local path = v:match("^unix:(.+)$")
  if path then
    cfg.unix = path
  else
    local host, port = v:match("^([^:]+):(%d+)$")
    if not host then error(("mqlease.redis: option 'address' must be host:port or unix:/path (got %q)"):format(v), 4) end
    cfg.host, cfg.port = host, tonumber(port)
  end
end

local KNOWN = "address, sentinels, master, sentinel_username, sentinel_password, cluster, username, password, db, timeout"

local function parse(opts)
  if type(opts) == "string" then opts = { address = opts } end
  if type(opts) ~= "table" then
    error("mqlease.redis: an address (\"host:port\" or \"unix:/path\") or an options table expected", 3)
  end
  local cfg = { timeout_ms = 1000 }
  for k, v in pairs(opts) do
    if k == "address" then
      set_address(cfg, v)
    elseif k == "sentinels" then
      cfg.nodes = node_list(k, v)
    elseif k == "cluster" then
      cfg.nodes, cfg.cluster = node_list(k, v), true
    elseif k == "master" or k == "username" or k == "password" or k == "sentinel_username"
        or k == "sentinel_password" then
      if type(v) ~= "string" or v == "" then error(("mqlease.redis: option '%s' must be a string"):format(k), 3) end
      cfg[k] = v
    elseif k == "db" then
      if type(v) ~= "number" or v < 0 or v ~= floor(v) then error("mqlease.redis: option 'db' must be an integer >= 0", 3) end
      cfg.db = v
    elseif k == "timeout" then
      if type(v) ~= "number" or v <= 0 or v > 60 then error("mqlease.redis: option 'timeout' must be seconds in (0, 60]", 3) end
      cfg.timeout_ms = floor(v * 1000)
    else
      error(("mqlease.redis: unknown option '%s' (known: %s)"):format(tostring(k), KNOWN), 3)
    end
  end
  local modes = (opts.address and 1 or 0) + (opts.sentinels and 1 or 0) + (opts.cluster and 1 or 0)
  if modes ~= 1 then error("mqlease.redis: give exactly one of the options 'address', 'sentinels', 'cluster'", 3) end
  if opts.sentinels and not opts.master then error("mqlease.redis: option 'master' is required with 'sentinels'", 3) end
  if opts.master and not opts.sentinels then error("mqlease.redis: option 'master' needs 'sentinels'", 3) end
  for _, k in ipairs { "sentinel_username", "sentinel_password" } do
    if opts[k] and not opts.sentinels then error(("mqlease.redis: option '%s' needs 'sentinels'"):format(k), 3) end
  end
  if opts.sentinel_username and not opts.sentinel_password then
    error("mqlease.redis: option 'sentinel_username' needs 'sentinel_password'", 3)
  end
  if opts.cluster and (opts.db or 0) ~= 0 then error("mqlease.redis: option 'db' must be 0 with 'cluster'", 3) end
  return cfg
end

-- Checks Redis options without connecting (raises naming the bad one), for
-- those who connect later (the exactly-once policy connects at its first use).
function _M.check(opts)
  parse(opts)
end

function _M.new(opts)
  local client = core.redis(parse(opts))
  local self = setmetatable({ _session = session_mod.new(client), _lost = {}, _on_lost = {} }, mt)
  local lost, on_lost = self._lost, self._on_lost
  self._session.on_lock_lost = function(id)
    lost[id] = true
    local cb = on_lost[id]
    if cb then cb(id) end
  end
  return self
end

local function finish(ev)
  if not ev.ok then return nil, ev.err, ev.code end
  if ev.reply_error then return nil, ev.reply_error, "REDIS_ERROR" end
  return ev.reply
end

-- r:call(command, args...) -> reply, or nil, message, code
function methods:call(...)
  if self._session.client:closed() then return nil, "the redis client is closed", "CLOSED" end
  local n = select("#", ...)
  if n == 0 then error("bad argument #1 to 'call' (a command expected)", 2) end
  local args = { ... }
  for i = 1, n do
    local v = args[i]
    if type(v) == "number" then args[i] = tostring(v)
    elseif type(v) ~= "string" then
      error(("bad argument #%d to 'call' (string or number expected, got %s)"):format(i, type(v)), 2)
    end
  end
  local s = self._session
  return finish(s:result(s.client:command(unpack(args, 1, n))))
end

-- r:eval(script, {keys...}, {args...}) -> reply (EVALSHA, EVAL when the server lacks it)
function methods:eval(script, keys, args)
  if self._session.client:closed() then return nil, "the redis client is closed", "CLOSED" end
  local flat = {}
  for _, k in ipairs(keys or {}) do flat[#flat + 1] = tostring(k) end
  for _, a in ipairs(args or {}) do flat[#flat + 1] = tostring(a) end
  local s = self._session
  return finish(s:result(s.client:eval(script, #(keys or {}), unpack(flat))))
end

-- Keeps key alive (compare owner, then PEXPIRE ttl) every `every` seconds from
-- the C thread, for at most max seconds. on_lost(id) runs (from the next
-- call's event pump) if a renewal finds the key gone or owned by someone else.
-- since: mqlease.now() taken before the command that set the key's TTL was
-- sent (default: now). The TTL runs from there, so renewals and the lapse are
-- counted from it, not from this later call.
function methods:keepalive(key, owner, ttl, every, max, on_lost, since)
  if since ~= nil and type(since) ~= "number" then
    error(("bad argument #7 to 'keepalive' (number expected, got %s)"):format(type(since)), 2)
  end
  local id = self._session.client:keepalive(key, owner, floor(ttl * 1000), floor(every * 1000),
    max and floor(max * 1000) or 0, since and floor(since * 1000) or 0)
  if on_lost then self._on_lost[id] = on_lost end
  return id
end

-- Stops a keepalive; returns true if it had been lost meanwhile (a renewal
-- found the key gone or taken, or the TTL ran out since the last renewal).
function methods:keepalive_stop(id)
  local lapsed = false
  if not self._session.client:closed() then
    lapsed = self._session.client:keepalive_stop(id)
    self._session:pump()
  end
  local lost = lapsed or self._lost[id] == true
  self._lost[id], self._on_lost[id] = nil, nil
  return lost
end

function methods:close()
  self._session:close()
  return true
end

mt.__close = function(self) self:close() end

return _M

-- mqlease.redis: a Redis client whose calls never block other handlers.
--
--   local r = mqlease.redis("127.0.0.1:6379")      -- or "unix:/run/redis.sock",
--   r:call("INCR", "k")                             -- or { address=, username=, password=, db=, timeout= }
--   mqlease.redis { sentinels = {"h:26379", ...}, master = "mymaster", password=, db=,
--                   sentinel_password= }  -- the sentinels' own requirepass, if any
--   mqlease.redis { cluster = {"h:7000", ...}, username=, password= }
--
-- Commands run on a C thread (hiredis); a call waits for its reply through
-- mqlease.loop: it yields inside mqlease.run, cqueues or nginx, else blocks.
-- Inside mqlease's own scheduler (mqlease.run) the calls of one scheduler turn
-- are queued together and sent in one round trip (a pipeline), each still
-- getting its own reply; elsewhere each call goes on its own. Replies: strings, integers,
-- arrays (tables), mqlease.null for a nil reply, "OK" for a status. A Redis
-- error reply returns nil, message, "REDIS_ERROR"; no connection returns
-- nil, message, "UNAVAILABLE" (or "TIMEOUT"); bad arguments raise.

local core = require "mqlease.core"
local config = require "mqlease.config"
local session_mod = require "mqlease.router"
local sched_adapter = require "mqlease.loop.scheduler"

local type, tostring, error, setmetatable, pcall, pairs, tonumber = type, tostring, error, setmetatable, pcall, pairs,
  tonumber
local coroutine_running = coroutine.running
local floor, huge = math.floor, math.huge
local MAX_ARGS = 64   -- what the core takes per command
local MAX_DB = 2147483647   -- the core holds the db in a C int

-- The port of "host:port" (a decimal 1..65535), or nil: the core casts it to
-- a C int and the resolver keeps 16 bits of it, so 70000 would dial 4464 and
-- 4294967297 port 1.
local function port_of(a)
  local port = tonumber(a:match(":(%d+)$"))
  if port and port >= 1 and port <= 65535 then return port end
end

local _M = { null = core.null }
local methods = {}
local mt = { __index = methods, __name = "mqlease.redis" }

local function node_list(k, v)
  if type(v) ~= "table" or #v == 0 then
    error(("mqlease.redis: option '%s' must be a list of \"host:port\" strings"):format(k), 4)
  end
  local out = {}
  for i, a in ipairs(v) do
    if type(a) ~= "string" or not a:match("^.+:%d+$") or not port_of(a) then
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
    local host = v:match("^([^:]+):%d+$")
    local port = host and port_of(v)
    if not port then error(("mqlease.redis: option 'address' must be host:port or unix:/path (got %q)"):format(v), 4) end
    cfg.host, cfg.port = host, port
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
      if type(v) ~= "number" or not (v >= 0 and v <= MAX_DB) or v ~= floor(v) then
        error(("mqlease.redis: option 'db' must be an integer from 0 to %d"):format(MAX_DB), 3)
      end
      cfg.db = v
    elseif k == "timeout" then
      -- a NaN fails the test too (the core would cast it to an integer)
      -- (under a millisecond it reached the core as 0, which takes that as
      -- none given: a second)
      if type(v) ~= "number" or not (v >= 0.001 and v <= 60) then
        error("mqlease.redis: option 'timeout' must be seconds from 0.001 to 60", 3)
      end
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
  local cfg = parse(opts)
  local client = core.redis(cfg)
  local self = setmetatable({ _session = session_mod.new(client), _lost = {}, _on_lost = {},
    _cluster = cfg.cluster == true }, mt)
  local lost, on_lost = self._lost, self._on_lost
  -- Only a keepalive with a callback is looked up here. Every other one is
  -- answered by the core's own record (keepalive_lost, keepalive_stop), which
  -- knows the loss before this event is read; recording the event for those
  -- would leave an entry behind for each lock lost after its stop.
  self._session.on_lock_lost = function(id)
    local cb = on_lost[id]
    if cb then
      lost[id] = true
      -- the caller's code, run from the event pump: one that raised cost
      -- every event behind it in the batch (a reply its caller then waited
      -- for forever)
      local ok, err = pcall(cb, id)
      if not ok then
        io.stderr:write(("mqlease.redis: on_lost of keepalive %s raised: %s\n"):format(tostring(id), tostring(err)))
      end
    end
  end
  return self
end

local function finish(ev)
  if not ev.ok then return nil, ev.err, ev.code end
  if ev.reply_error then return nil, ev.reply_error, "REDIS_ERROR" end
  return ev.reply
end

-- The turn's batch goes to the core in one step (so to Redis in one round
-- trip); each waiter learns its op id (batch.first + its index - 1), or why
-- there is none (batch.err). The batch's list part is the commands themselves,
-- so a command costs no table of its own beyond the one it is. A waiter is
-- left asleep until its reply comes (the router wakes it then), not woken
-- to learn its op id and then put to sleep again for the reply.
local function flush(self, batch, sched)
  if self._batch == batch then self._batch = nil end
  local session = self._session
  local client = session.client
  local ok, first
  if client:closed() then ok, first = false, "the redis client is closed"
  else ok, first = pcall(client.pipeline, client, batch) end
  local waiters = batch.waiters
  if not ok then
    batch.err = tostring(first)
    for i = 1, #waiters do sched:wake(waiters[i]) end
    return
  end
  batch.first = first
  if not session:expect_all(first, waiters, sched) then
    for i = 1, #waiters do sched:wake(waiters[i]) end
  end
end

-- Sends cmd ({"command", ...} or {"eval", script, numkeys, ...}) and returns
-- its reply. Inside mqlease's scheduler it joins the turn's batch, flushed by
-- a task of its own once every task of this turn has run.
local function submit(self, cmd)
  local s = self._session
  local sched = sched_adapter.current()
  local op
  if not sched then
    op = s.client:pipeline({ cmd })
  else
    local batch = self._batch
    -- a batch belongs to the scheduler that will flush it: one left behind by
    -- a scheduler that stopped before its flush ran must not swallow this call
    if not batch or batch.sched ~= sched then
      batch = { sched = sched, waiters = {} }
      self._batch = batch
      sched:spawn(flush, self, batch, sched)
    end
    local i = #batch + 1
    batch[i] = cmd
    batch.waiters[i] = coroutine_running()
    -- woken by the reply (or the flush's failure, or the router's close); the
    -- deadline only keeps a wake-up that never came from hanging the wait:
    -- result() below waits again, as for any op
    repeat sched:park(core.now() + 1) until batch.first ~= nil or batch.err ~= nil
    if batch.err then return nil, batch.err, "CLOSED" end
    op = batch.first + i - 1
  end
  return finish(s:result(op))
end

-- A command argument as the text Redis reads, the same under Lua 5.4 and
-- LuaJIT; nil for what is neither a string nor a number (NaN among them).
-- tostring would write a float, and every LuaJIT number, with 14 significant
-- digits: LuaJIT sent 123456789012345 as "1.2345678901235e+14" (another
-- number) and Lua 5.4 sent 30.0 as "30.0" (refused where an integer is
-- wanted, as EXPIRE's) where LuaJIT sent "30". An integral value goes as its
-- digits, any other as the fewest digits that read back as the same number.
local function arg_text(v)
  if type(v) == "string" then return v end
  if type(v) ~= "number" or v ~= v then return nil end
  if v == huge then return "inf" elseif v == -huge then return "-inf" end
  if v == floor(v) and v >= -2 ^ 63 and v < 2 ^ 63 then return ("%d"):format(v) end
  for digits = 14, 16 do
    local text = ("%." .. digits .. "g"):format(v)
    if tonumber(text) == v then return text end
  end
  return ("%.17g"):format(v)
end

local function describe(v)
  if v ~= v then return "NaN" end   -- (Lua 5.4 writes "-nan" or "nan", by the C library)
  if type(v) == "number" then return tostring(v) end
  return type(v)
end

-- r:call(command, args...) -> reply, or nil, message, code
function methods:call(...)
  if self._session.client:closed() then return nil, "the redis client is closed", "CLOSED" end
  local n = select("#", ...)
  if n == 0 then error("bad argument #1 to 'call' (a command expected)", 2) end
  if n > MAX_ARGS then error(("bad argument #%d to 'call' (at most %d arguments)"):format(MAX_ARGS + 1, MAX_ARGS), 2) end
  local cmd = { "command", ... }
  for i = 2, n + 1 do
    local text = arg_text(cmd[i])
    if not text then
      error(("bad argument #%d to 'call' (string or number expected, got %s)"):format(i - 1, describe(cmd[i])), 2)
    end
    cmd[i] = text
  end
  return submit(self, cmd)
end

-- The length of eval's keys or args (argument argn, named what), which must
-- be nil or an array of strings and numbers. Its entries are counted, not
-- only its border: a string given for the keys had its length taken (each
-- "key" then went as "nil"), and {"a", nil, "c"} went as three keys under
-- Lua 5.4 ("nil" the second) and as one under LuaJIT, whose # is 1 there.
local function array_length(list, argn, what)
  if list == nil then return 0 end
  if type(list) ~= "table" then
    error(("bad argument #%d to 'eval' (%s: an array of strings or numbers expected, got %s)")
      :format(argn, what, type(list)), 3)
  end
  if not config.is_array(list) then
    error(("bad argument #%d to 'eval' (%s: an array without holes or named fields expected)"):format(argn, what), 3)
  end
  local n = #list
  for i = 1, n do
    if not arg_text(list[i]) then
      error(("bad argument #%d to 'eval' (%s[%d]: string or number expected, got %s)")
        :format(argn, what, i, describe(list[i])), 3)
    end
  end
  return n
end

-- r:eval(script, {keys...}, {args...}) -> reply (EVALSHA, EVAL when the server lacks it)
function methods:eval(script, keys, args)
  if self._session.client:closed() then return nil, "the redis client is closed", "CLOSED" end
  if type(script) ~= "string" then
    error(("bad argument #1 to 'eval' (string expected, got %s)"):format(type(script)), 2)
  end
  local nk, na = array_length(keys, 2, "keys"), array_length(args, 3, "args")
  -- checked here, not in the batch: a bad call must not fail its neighbours
  if nk + na > MAX_ARGS then error(("bad argument #3 to 'eval' (at most %d keys and arguments)"):format(MAX_ARGS), 2) end
  -- nine slots from the start (the nils size the table; Lua 5.4 has no
  -- table.new): the policy's scripts take six keys and arguments at most, and
  -- a table grown one entry at a time is reallocated three times on the way
  local cmd = { "eval", script, nk, nil, nil, nil, nil, nil, nil }
  for i = 1, nk do cmd[3 + i] = arg_text(keys[i]) end
  for i = 1, na do cmd[3 + nk + i] = arg_text(args[i]) end
  return submit(self, cmd)
end

-- r:_eval_cmd(cmd) -> reply: cmd is a whole { "eval", script, numkeys,
-- keys..., args... } of strings, sent as eval sends it. For mqlease.policy,
-- whose few commands are built in one table each, not from two more a call.
function methods:_eval_cmd(cmd)
  if self._session.client:closed() then return nil, "the redis client is closed", "CLOSED" end
  return submit(self, cmd)
end

-- true unless the client is of a Redis Cluster: then keys of different
-- hash tags may live on different nodes, and one script may not touch them.
-- For mqlease.policy, which sends the scripts of many messages as one.
function methods:_one_server()
  return not self._cluster
end

-- r:stats() -> { round_trips =, commands = }: the command connection's so far
-- (keepalives have a connection of their own and are not counted)
function methods:stats()
  if self._session.client:closed() then return { round_trips = 0, commands = 0 } end
  local trips, commands = self._session.client:stats()
  return { round_trips = trips, commands = commands }
end

-- Keeps key alive (compare owner, then PEXPIRE ttl) every `every` seconds from
-- the C thread, for at most max seconds. on_lost(id) runs (from the next
-- call's event pump) if a renewal finds the key gone or owned by someone else.
-- since: mqlease.now() taken before the command that set the key's TTL was
-- sent (default: now). The TTL runs from there, so renewals and the lapse are
-- counted from it, not from this later call.
-- The longest ttl, every or max a keepalive takes, in seconds (about 31,700
-- years). The core adds them to its clock in milliseconds, in 64 bits, and
-- math.maxinteger // 1000 overflowed there (the lock was then lost at its
-- first renewal).
local KEEPALIVE_MAX_S = 1e12

-- Raises, naming argument argn of 'keepalive' (name), unless v is a number
-- of seconds from least to KEEPALIVE_MAX_S (NaN and inf are not).
local function keepalive_seconds(v, argn, name, least, what)
  if type(v) ~= "number" or v ~= v or v < least or v > KEEPALIVE_MAX_S then
    error(("bad argument #%d to 'keepalive' (%s: %s, got %s)"):format(argn, name, what, describe(v)), 3)
  end
end

function methods:keepalive(key, owner, ttl, every, max, on_lost, since)
  if type(key) ~= "string" then error(("bad argument #1 to 'keepalive' (key: string expected, got %s)"):format(type(key)), 2) end
  if type(owner) ~= "string" then
    error(("bad argument #2 to 'keepalive' (owner: string expected, got %s)"):format(type(owner)), 2)
  end
  -- a ttl under a millisecond went as PEXPIRE 0, which deletes the lock
  keepalive_seconds(ttl, 3, "ttl", 0.001, "seconds from 0.001 to 1e12")
  -- renewed no more often than the ttl, the lock lapses between renewals
  if type(every) == "number" and every >= ttl then
    error(("bad argument #4 to 'keepalive' (every: seconds under ttl (%s), got %s)"):format(describe(ttl),
      describe(every)), 2)
  end
  keepalive_seconds(every, 4, "every", 0.001, "seconds from 0.001, under ttl")
  if max ~= nil then keepalive_seconds(max, 5, "max", 0.001, "seconds from 0.001 to 1e12, or nil for none") end
  if on_lost ~= nil and type(on_lost) ~= "function" then
    error(("bad argument #6 to 'keepalive' (on_lost: function or nil expected, got %s)"):format(type(on_lost)), 2)
  end
  if since ~= nil and (type(since) ~= "number" or since ~= since or since < 0 or since == huge) then
    error(("bad argument #7 to 'keepalive' (since: a time of mqlease.now() expected, got %s)"):format(describe(since)), 2)
  end
  local id = self._session.client:keepalive(key, owner, floor(ttl * 1000), floor(every * 1000),
    max and floor(max * 1000) or 0, since and floor(since * 1000) or 0)
  if on_lost then self._on_lost[id] = on_lost end
  return id
end

-- keepalive() for mqlease.policy, for the lock of id with the policy's layout
-- (prefix{id}:lock), which the core writes: the policy keeps no key string a
-- message. The times already in whole milliseconds (since_ms: when the
-- acquire was sent), and no callback: the policy's lease asks keepalive_lost
-- (lease.lock_kept), so nothing is recorded for it here.
function methods:_keep_lock_of(prefix, id, owner, ttl_ms, every_ms, max_ms, since_ms)
  return self._session.client:keepalive_of(prefix, id, "lock", owner, ttl_ms, every_ms, max_ms, since_ms)
end

-- true once keepalive id is known lost (a renewal found the key gone or taken,
-- its TTL ran out unrenewed, or its max was spent), as keepalive_stop would
-- say, without stopping it: the core's own record, asked at once, so it
-- answers in any event loop, between Redis calls too. A closed client renews
-- nothing: its keepalives are all lost (the lock lapses at its TTL).
function methods:keepalive_lost(id)
  if self._lost[id] then return true end
  local client = self._session.client
  if client:closed() then return true end
  return client:keepalive_lost(id)
end

-- Stops a keepalive; returns true if it had been lost meanwhile (a renewal
-- found the key gone or taken, or the TTL ran out since the last renewal).
-- The core's record answers that, whether or not its lost event was read
-- yet: no pump here (one read of the event descriptor and one table for every
-- lock, on the exactly-once policy's path, for an answer already known).
-- A closed client's keepalives stopped with it, unasked: lost.
function methods:keepalive_stop(id)
  local lapsed = true
  if not self._session.client:closed() then
    lapsed = self._session.client:keepalive_stop(id)
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

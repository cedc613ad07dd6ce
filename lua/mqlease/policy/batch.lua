-- mqlease.policy.batch: one script call for the messages of one scheduler
-- turn, where the exactly-once policy made one call per message.
--
-- Inside mqlease.run, the messages that reach their acquire (or their done
-- marker) in the same scheduler turn are sent as one script over all their
-- keys. A Redis command costs the client about 4 µs whatever it carries
-- (its Lua table, the core's copy, the reply's event, its routing, the
-- wake-up of its waiter), and two of them a message were most of what
-- exactly-once cost over plain; the script's own work per message is a
-- fraction of that, on the client and on Redis.
--
-- Nothing about one message changes. The script runs each message's part in
-- a pcall, so one message's error (a key of the wrong type) fails that
-- message alone, as its own script did; the whole script runs as one atomic
-- step, as each message's part did. A call that fails as a whole (no reply,
-- no connection) fails every message in it, each of which then takes the
-- policy's own path for an unreachable Redis (fail closed: defer), as it
-- would have alone. A reply that does not hold one well-formed answer per
-- message (no honest server sends one) fails every message of the call,
-- with the code BAD_REPLY: unlike an error reply (REDIS_ERROR), it does not
-- prove that the script did not run.
--
-- The reply is one flat list, `width` elements a message (a table of its
-- own per message was one more allocation a message on the client, made
-- and collected for two numbers). A message's first element is an integer;
-- a string there is that message's error.
--
-- Keys or ids. A batch made with `ids` takes each message's id where it took
-- its keys, and the keys are written from it by the core (the pipeline's
-- eval_ids entry, in the policy's layout: mqlease.policy.key_base), not as
-- per_key strings a message in Lua; for a client of the user's own, which
-- takes eval(script, keys, argv), ids.key_of(id, suffix) writes them here.
--
-- Only for a client whose keys all live on one server: under Redis Cluster
-- the keys of different messages fall in different slots, and one script may
-- not touch them (CROSSSLOT). The policy asks the client (_one_server).

local setmetatable, type, tostring, pcall = setmetatable, type, tostring, pcall
local concat = table.concat
local coroutine_running = coroutine.running
local table_move = table.move

local _M = {}
local methods = {}
local mt = { __index = methods, __name = "mqlease.policy.batch" }

-- The most messages one call carries: 32 acquires are 96 keys and 34
-- arguments, well under the 1,024 the core takes per command, and as many
-- as a turn of mqlease.run usually brings together.
local MAX_ITEMS = 32

-- rc: the Redis client; script: the batch script, which takes per_key keys
-- (2 or 3) for each message in KEYS, and in ARGV `shared` (a list of
-- arguments for all of them) then one argument per message. Its reply is a
-- flat list of width (1 or 2) elements per message, in the messages' order:
-- the answer, whose first element is an integer, or for a message whose
-- part failed its error message (a string) in place of that integer.
-- ids (optional): { prefix =, suffixes = { "lock", ... } (per_key of them),
-- key_of = function(id, suffix) }: call takes a message's id for its keys.
function _M.new(rc, script, per_key, shared, width, max_items, ids)
  local self = setmetatable({ rc = rc, script = script, per_key = per_key,
    shared = shared, width = width, max = max_items or MAX_ITEMS, open = nil, ids = ids }, mt)
  if ids then self.suffix_list = concat(ids.suffixes, " ") end
  return self
end

-- The keys of a batch of ids, for a client that takes eval(script, keys, argv).
local function keys_of_ids(self, ids)
  local keys, suffixes, key_of = {}, self.ids.suffixes, self.ids.key_of
  for i = 1, #ids do
    for j = 1, #suffixes do keys[#keys + 1] = key_of(ids[i], suffixes[j]) end
  end
  return keys
end

-- The one call of a batch: { "eval", script, numkeys, keys..., shared...,
-- args... } for a client of mqlease.redis, else eval(script, keys, argv).
local function send(self, batch)
  local rc, shared, keys, args = self.rc, self.shared, batch.keys, batch.args
  local nk, ns, na = #keys, #shared, #args
  if self.ids then
    if rc._eval_cmd then
      -- { "eval_ids", script, prefix, suffixes, n, ids..., shared..., args... }
      local cmd = { "eval_ids", self.script, self.ids.prefix, self.suffix_list, nk }
      table_move(keys, 1, nk, 6, cmd)
      table_move(shared, 1, ns, 6 + nk, cmd)
      table_move(args, 1, na, 6 + nk + ns, cmd)
      return rc:_eval_cmd(cmd)
    end
    keys = keys_of_ids(self, keys)
  end
  if rc._eval_cmd then
    local cmd = { "eval", self.script, nk }
    table_move(keys, 1, nk, 4, cmd)
    table_move(shared, 1, ns, 4 + nk, cmd)
    table_move(args, 1, na, 4 + nk + ns, cmd)
    return rc:_eval_cmd(cmd)
  end
  local argv = {}
  table_move(shared, 1, ns, 1, argv)
  table_move(args, 1, na, ns + 1, argv)
  return rc:eval(self.script, keys, argv)
end

-- Sends batch: its reply, if it holds width elements a message, else nil,
-- message, code (a raise in the send is its message, code INTERNAL).
local function sent(self, batch)
  local called, reply, err, code = pcall(send, self, batch)
  if not called then return nil, tostring(reply), "INTERNAL" end
  if reply ~= nil and (type(reply) ~= "table" or #reply ~= batch.n * self.width) then
    return nil, ("redis answered %s for a batch of %d"):format(
      type(reply) == "table" and #reply .. " elements" or type(reply), batch.n), "BAD_REPLY"
  end
  return reply, err, code
end

-- Runs once every task of the turn has added its message: sends the batch
-- and wakes each of its waiters with the reply.
local function flush(self, batch, sched)
  if self.open == batch then self.open = nil end
  batch.reply, batch.err, batch.code = sent(self, batch)
  batch.done = true
  local waiters = batch.waiters
  for i = 1, #waiters do sched:wake(waiters[i]) end
end

-- One call for the given messages now, outside the turn's batch (the lock
-- prefetch of a received batch: mqlease.policy): items[i] is the i-th
-- message's id (a batch of ids) and args[i] its argument. -> the flat reply
-- (width elements a message, as call reads them), or nil, message, code. At
-- most max messages (a receive brings at most 32).
function methods:call_all(items, args)
  local n = #items
  if n > self.max then
    error(("mqlease.policy.batch: %d messages in one call (at most %d)"):format(n, self.max), 2)
  end
  return sent(self, { n = n, keys = items, args = args })
end

-- Adds one message (its argument, then its per_key keys, or its id for a
-- batch of ids) to the turn's batch of sched and waits for the batch's
-- reply: that message's answer (its width elements), or nil, message, code.
function methods:call(sched, arg, k1, k2, k3)
  if self.ids and type(k1) ~= "string" then
    -- the core refuses a whole call whose ids are not all strings: a number is
    -- written as key_base would write it, anything else fails this message
    -- alone, here, before it joins the others
    if type(k1) ~= "number" then
      error(("mqlease.policy.batch: a message id must be a string (got %s)"):format(type(k1)), 2)
    end
    k1 = tostring(k1)
  end
  local batch = self.open
  if not batch or batch.sched ~= sched or batch.n >= self.max then
    -- a batch belongs to the scheduler that flushes it (one left behind by a
    -- scheduler that stopped before its flush ran must not swallow this call)
    batch = { sched = sched, n = 0, keys = {}, args = {}, waiters = {} }
    self.open = batch
    sched:spawn(flush, self, batch, sched)
  end
  local n = batch.n + 1
  batch.n = n
  local keys = batch.keys
  if self.ids then keys[n] = k1
  else
    local kb = (n - 1) * self.per_key
    keys[kb + 1], keys[kb + 2] = k1, k2
    if self.per_key == 3 then keys[kb + 3] = k3 end
  end
  batch.args[n] = arg
  batch.waiters[n] = coroutine_running()
  -- woken by the flush, which the same scheduler runs in this turn and
  -- which wakes every waiter whatever the call did (its send is in a pcall):
  -- no deadline is needed, and a parked task with none costs the scheduler
  -- no entry in its deadlines
  repeat sched:park() until batch.done
  local reply = batch.reply
  if reply == nil then return nil, batch.err, batch.code end
  local width = self.width
  local at = (n - 1) * width + 1
  local first = reply[at]
  if type(first) ~= "number" then
    if type(first) == "string" then return nil, first, "REDIS_ERROR" end
    return nil, ("redis answered %s for one message of a batch"):format(type(first)), "BAD_REPLY"
  end
  if width == 1 then return first end
  return first, reply[at + 1]
end

return _M

-- spec/support/env.lua: what every spec needs to reach the servers that
-- spec/support/run-specs.sh started, plus small waiting helpers.
local mqlease = require "mqlease"
local launch = require "mqlease.launch"

local _M = {}

_M.endpoints = os.getenv("MQLEASE_ENDPOINTS") or "127.0.0.1:18081"
_M.redis_port = tonumber(os.getenv("MQLEASE_REDIS_PORT") or "16379")
_M.run_id = os.getenv("MQLEASE_RUN_ID") or ("r" .. os.time())

local created = {}

-- Names unique to this run, so nothing of an earlier run is ever delivered.
function _M.name(base)
  return ("%s_%s"):format(base, _M.run_id)
end

-- Creates the topics (one JVM for all of them) and returns their run names.
function _M.topics(...)
  local names, todo = {}, {}
  for i, base in ipairs({ ... }) do
    names[i] = _M.name(base)
    if not created[names[i]] then todo[#todo + 1] = names[i] end
  end
  if #todo > 0 then
    local cmd = "bash mk/rocketmq.sh topics " .. table.concat(todo, " ") .. " 2>&1"
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    local ok = p:close()
    assert(ok, "creating topics failed:\n" .. out)
    for _, n in ipairs(todo) do created[n] = true end
  end
  return (table.unpack or unpack)(names)
end

_M.topic = _M.topics

-- Whether the broker wants a consumer's group created before the consumer starts:
-- RocketMQ 5.5's proxy refuses a group it does not have ("group not found" on
-- Telemetry), where older ones create it on first use (rocketmq.sh, groups_policy).
local groups_must_exist = os.getenv("MQLEASE_ROCKETMQ_GROUPS") == "create"
if os.getenv("MQLEASE_ROCKETMQ_GROUPS") == nil then
  local p = io.popen("bash mk/rocketmq.sh env 2>/dev/null")
  if p then
    groups_must_exist = p:read("a"):match("MQLEASE_ROCKETMQ_GROUPS=(%a+)") == "create"
    p:close()
  end
end
local groups = {}

-- Makes sure the consumer group exists on the broker, as a user of RocketMQ 5.5 must
-- (a group that exists, e.g. an orderly one, is left as it is); returns the name.
-- Does nothing where the broker creates groups itself.
function _M.group(name)
  if groups_must_exist and not groups[name] then
    _M.sh("bash mk/rocketmq.sh groups --if-absent " .. name)
    groups[name] = true
  end
  return name
end

-- A FIFO topic and an orderly consumer group for it, fresh for this run.
function _M.fifo_topic(base)
  local topic, group = _M.name(base), _M.name("g_" .. base)
  _M.sh(("bash mk/rocketmq.sh topics %s:FIFO --orderly-group %s"):format(topic, group))
  return topic, group
end

function _M.consumer(opts)
  opts.endpoints = opts.endpoints or _M.endpoints
  if opts.group and opts.endpoints == _M.endpoints then _M.group(opts.group) end
  return assert(mqlease.consumer(opts))
end

function _M.producer(opts)
  opts = opts or {}
  opts.endpoints = opts.endpoints or _M.endpoints
  return assert(mqlease.producer(opts))
end

-- Receives until pred(all) is true or timeout seconds pass; returns all messages.
-- on_message(m) is called for each (e.g. to ack it). Each receive long-polls at
-- most `slice` seconds (default 5). A message the broker gives back (nack, an
-- expired lease) reaches the queue through its retry topic 1-3 s later, and a
-- long poll may notice it only when the poll ends: specs that time a message's
-- return pass a short slice, so the poll's length does not weigh on the time.
function _M.collect(consumer, timeout, on_message, pred, slice)
  local all = {}
  local deadline = mqlease.now() + timeout
  slice = slice or 5
  while mqlease.now() < deadline do
    local msgs = assert(consumer:receive(32, { await = math.min(slice, math.max(0, deadline - mqlease.now())) }))
    for _, m in ipairs(msgs) do
      all[#all + 1] = m
      if on_message then on_message(m) end
    end
    if pred and pred(all) then break end
  end
  return all
end

-- os.execute as a boolean on every VM (Lua 5.1 and LuaJIT return the status number).
function _M.execute(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

-- The whole text of a file ("" when it does not exist yet).
function _M.read(path)
  local f = io.open(path)
  local text = f and f:read("a") or ""
  if f then f:close() end
  return text
end

-- Polls pred every 0.1 s until it is true; fails the spec after timeout seconds.
function _M.wait_for(pred, timeout, what)
  local deadline = mqlease.now() + timeout
  while mqlease.now() < deadline do
    if pred() then return true end
    mqlease.sleep(0.1)
  end
  error("timed out waiting for " .. what, 2)
end

-- How many times pattern occurs in text.
function _M.count(text, pattern)
  local n = 0
  for _ in text:gmatch(pattern) do n = n + 1 end
  return n
end

-- The JSON objects among a peer's output lines (a string, or a list of lines);
-- other lines (a JVM's warnings) are skipped.
function _M.json_lines(output)
  local cjson = require "cjson"
  local out = {}
  local function take(line)
    if line:sub(1, 1) == "{" then out[#out + 1] = cjson.decode(line) end
  end
  if type(output) == "string" then
    for line in output:gmatch("[^\n]+") do take(line) end
  else
    for _, line in ipairs(output) do take(line) end
  end
  return out
end

-- A sorted copy of list t (nil: an empty list), for comparing keys as sets.
-- A Redis client of the user's own that stands in front of real (an
-- mqlease.redis): the methods in overrides, and every other method forwarded
-- to real, except mqlease.redis's _-prefixed fast paths, which a user's client
-- lacks; so the exactly-once policy sends every script through its eval.
function _M.own_redis_client(real, overrides)
  return setmetatable(overrides, { __index = function(_, name)
    if type(name) == "string" and name:sub(1, 1) == "_" then return nil end
    return function(_, ...) return real[name](real, ...) end
  end })
end

function _M.sorted(t)
  local c = {}
  for i, v in ipairs(t or {}) do c[i] = v end
  table.sort(c)
  return c
end

-- The line of a failed command's stderr that says why: the first that names an error, else
-- its last line.
local function reason(err)
  local last
  for line in err:gmatch("[^\n]+") do
    if line:find("error", 1, true) or line:find("FAILED", 1, true) then return line end
    last = line
  end
  return last or "(no output on stderr)"
end

-- Runs a shell command; returns its stdout, failing the spec if it fails. The message's first
-- line (all a CI log's closing list of failures keeps) says why, then the command and its whole
-- output follow. Each call has a stderr file of its own: the suite's two lanes run beside each
-- other and one lane's command must not overwrite what the other's said.
function _M.sh(cmd)
  local errfile = os.tmpname()
  -- braces: the whole command list's stderr, not only its last command's
  local p = assert(io.popen("{ " .. cmd .. "\n} 2>" .. errfile))
  local out = p:read("a")
  local ok = p:close()
  local f = io.open(errfile)
  local err = f and f:read("a") or ""
  if f then f:close() end
  os.remove(errfile)
  if not ok then
    error(("command failed: %s\ncommand: %s\n%s%s"):format(reason(err), cmd, out, err), 2)
  end
  return out
end

-- The RocketMQ version the specs run against (as mk/rocketmq.sh: ROCKETMQ_VERSION, else 5.2.0),
-- and whether it is at least "a.b.c".
_M.rocketmq_version = os.getenv("ROCKETMQ_VERSION") or "5.2.0"
function _M.rocketmq_at_least(v)
  local function parts(s) return { s:match("^(%d+)%.(%d+)%.(%d+)") } end
  local have, want = parts(_M.rocketmq_version), parts(v)
  for i = 1, 3 do
    local h, w = tonumber(have[i]), tonumber(want[i])
    if h ~= w then return h > w end
  end
  return true
end

-- Starts a RocketMQ of a spec's own (rmq(args) runs mk/rocketmq.sh with the spec's ports and
-- run dir). The suite starts these once its background lane runs beside, four or five JVMs
-- booting on two cores under a load of 20 and more, where a start can miss a deadline that
-- an idle box meets a hundred times over. So a failed start is told on stderr, stopped and
-- tried once more; a second failure fails the spec with its own reason.
function _M.start_rocketmq(rmq)
  local ok, err = pcall(rmq, "start")
  if ok then return err end
  io.stderr:write("\nspec: a RocketMQ of this spec's own did not start; stopping it and starting it once more. ",
    "The first try said: ", tostring(err), "\n")
  pcall(rmq, "stop")
  return rmq("start")
end

-- Whether process pid runs (a zombie does not); SIGTERM, up to `patience`
-- seconds (default 5) for the exit, then SIGKILL: mqlease.launch's.
_M.alive, _M.stop_pid = launch.alive, launch.stop_pid

return _M

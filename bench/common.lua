-- bench/common.lua: what the bench scripts measure and print the same way.
-- Scripts run from the repository's root and load it as require "bench.common".
local _M = {}

-- A "Vm..." field of /proc/PID/status (default: this process) in kB.
function _M.status_kb(field, pid)
  for line in io.lines("/proc/" .. (pid or "self") .. "/status") do
    local v = line:match("^" .. field .. ":%s+(%d+)")
    if v then return tonumber(v) end
  end
end

-- This process's id (the main thread's task id too).
function _M.self_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("l"):match("^(%d+)")
  f:close()
  return pid
end

-- utime + stime in seconds (fields 14 and 15 of /proc/PID/stat) of a process
-- (then each apart),
-- or of one thread as "self/task/<tid>" or "<pid>/task/<tid>"; this process's
-- by default.
local TICKS = tonumber(io.popen("getconf CLK_TCK"):read("l")) or 100
function _M.cpu_s(pid)
  local f = assert(io.open("/proc/" .. (pid or "self") .. "/stat"))
  local line = f:read("l")
  f:close()
  local fields = {}
  -- after the command name (which may hold spaces) comes field 3, the state
  for w in line:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = w end
  local user, system = tonumber(fields[12]) / TICKS, tonumber(fields[13]) / TICKS
  return user + system, user, system
end

-- A percentile from a core histogram, interpolated inside its bucket (seconds -> ms).
function _M.percentile(h, p)
  if h.count == 0 then return 0 end
  local rank, seen, lower = p * h.count, 0, 0
  for i, c in ipairs(h.counts) do
    local upper = h.bounds[i] or h.bounds[#h.bounds]
    if seen + c >= rank and c > 0 then
      return (lower + (upper - lower) * (rank - seen) / c) * 1000
    end
    seen = seen + c
    lower = upper
  end
  return lower * 1000
end

-- What histogram h1 (a later copy of h0) counted since h0: the window's own distribution.
function _M.hist_since(h1, h0)
  local counts = {}
  for i, c in ipairs(h1.counts) do counts[i] = c - (h0.counts[i] or 0) end
  return { count = h1.count - h0.count, counts = counts, bounds = h1.bounds }
end

-- One JSON line of t's fields in the given order (default t._order): strings
-- quoted, integers as they are, other numbers with 3 decimals.
function _M.json(t, order)
  local parts = {}
  for _, k in ipairs(order or t._order) do
    local v = t[k]
    parts[#parts + 1] = ('"%s":%s'):format(k, type(v) == "string" and ('"' .. v .. '"') or
      (math.type(v) == "integer" and tostring(v) or ("%.3f"):format(v)))
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

-- Exits with the usage line (status 2) unless ok: a bench script's missing argument.
function _M.need(ok, usage)
  if ok then return end
  io.stderr:write("usage: ", usage, "\n")
  os.exit(2)
end

-- The median of a list of numbers (nil when empty); sorts the list.
function _M.median(v)
  if #v == 0 then return nil end
  table.sort(v)
  return #v % 2 == 1 and v[(#v + 1) // 2] or (v[#v // 2] + v[#v // 2 + 1]) / 2
end

-- The median of key over the runs, and min-max when there are several ("-" when
-- no run has the figure; a negative value means "not measured").
function _M.stat(runs, key, fmt)
  local v = {}
  for _, r in ipairs(runs or {}) do
    if r[key] and r[key] >= 0 then v[#v + 1] = r[key] end
  end
  if #v == 0 then return "-" end
  fmt = fmt or "%.0f"
  local s = fmt:format(_M.median(v))
  if #v > 1 then s = s .. (" (" .. fmt .. "–" .. fmt .. ")"):format(v[1], v[#v]) end
  return s
end

-- Acks the held messages in batches of `batch`; how many the broker acked.
function _M.ack_all(c, held, batch)
  local acked = 0
  for first = 1, #held, batch do
    local b = {}
    for i = first, math.min(first + batch - 1, #held) do b[#b + 1] = held[i] end
    local ok, _, _, results = c:ack(b)
    if ok then acked = acked + #b else
      for _, r in ipairs(results) do if r == true then acked = acked + 1 end end
    end
  end
  return acked
end

-- The two calls of a batch of ids in the exactly-once policy's key layout,
-- as the policy sends them: { "eval_ids", ... } tables for redis:_eval_cmd,
-- whose keys (lock, fence and done a message, as mqlease.policy.key_base
-- builds them) the core writes from the ids: acquire (the lock's TTL and the
-- fence's in ms, then the owners) and finish (the marker's TTL in seconds,
-- then the owners). owners[i] is ids[i]'s.
-- The two calls of a probe of a one-key-a-message layout (bench/eo_onekey.lua,
-- bench/eo_onevalue.lua): a message's key is prefix{<id>}. The acquire takes
-- the keys in lead before the messages' (a shared counter), then
-- acquire_args, then each message's owner; the finish takes the messages'
-- keys, then finish_args, then each owner.
function _M.one_key_calls(acquire_script, finish_script, prefix, ids, owners, lead, acquire_args, finish_args)
  local n, nl = #ids, #lead
  local acquire, finish = { "eval", acquire_script, nl + n }, { "eval", finish_script, n }
  table.move(lead, 1, nl, 4, acquire)
  for i = 1, n do
    local key = prefix .. "{" .. ids[i] .. "}"
    acquire[3 + nl + i] = key
    finish[3 + i] = key
  end
  table.move(acquire_args, 1, #acquire_args, #acquire + 1, acquire)
  table.move(finish_args, 1, #finish_args, #finish + 1, finish)
  table.move(owners, 1, n, #acquire + 1, acquire)
  table.move(owners, 1, n, #finish + 1, finish)
  return acquire, finish
end

function _M.eo_calls(acquire_script, finish_script, prefix, ids, owners, lock_ttl_ms, fence_ttl_ms, done_ttl)
  local n = #ids
  local acquire = { "eval_ids", acquire_script, prefix, "lock fence done", n }
  local finish = { "eval_ids", finish_script, prefix, "lock done", n }
  table.move(ids, 1, n, 6, acquire)
  table.move(ids, 1, n, 6, finish)
  acquire[#acquire + 1], acquire[#acquire + 2] = lock_ttl_ms, fence_ttl_ms
  finish[#finish + 1] = done_ttl
  table.move(owners, 1, n, #acquire + 1, acquire)
  table.move(owners, 1, n, #finish + 1, finish)
  return acquire, finish
end

return _M

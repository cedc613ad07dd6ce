-- bench/vmprof.lua: where a Lua process's VM instructions and allocations go,
-- over every coroutine (a count hook is per coroutine in Lua 5.4, so
-- coroutine.create and coroutine.wrap are wrapped to set it in each new one).
-- Loaded before the script by LUA_INIT; the report is written at the
-- script's first print (bench/bench.lua prints once, at its end):
--
--   LUA_INIT=@bench/vmprof.lua VMPROF_N=20000 VMPROF_OUT=/tmp/eo.txt \
--     lua5.4 bench/bench.lua run ENDPOINT GROUP TOPIC 20000 REDIS REDIS_PID
--
-- VMPROF_N: the messages the run handles (the report divides by it).
-- VMPROF_ALLOC=1 stops the collector, so collectgarbage("count") only grows:
-- its growth is the bytes allocated, attributed to the function running at
-- the next sample (allocations inside C calls included). Samples come every
-- 40 - 154 instructions, drawn at random so that they do not fall in step
-- with a loop of fixed length; the counts are sample estimates.
local N = tonumber(os.getenv("VMPROF_N")) or 1
local out_path = os.getenv("VMPROF_OUT") or "vmprof.txt"
if os.getenv("VMPROF_ALLOC") then collectgarbage("stop") end

local getinfo, sethook, random, gccount = debug.getinfo, debug.sethook, math.random, collectgarbage
local by_fn, by_line, alloc_fn = {}, {}, {}
local instructions, last_kb = 0, gccount("count")

local function hook()
  local every = random(40, 154)
  sethook(hook, "", every)
  local i = getinfo(2, "Sl")
  if not i then return end
  instructions = instructions + every
  local f = i.short_src .. ":" .. i.linedefined
  local kb = gccount("count")
  by_fn[f] = (by_fn[f] or 0) + every
  alloc_fn[f] = (alloc_fn[f] or 0) + (kb - last_kb)
  local l = i.short_src .. ":" .. (i.currentline or 0)
  by_line[l] = (by_line[l] or 0) + every
  last_kb = gccount("count")
end

local create = coroutine.create
coroutine.create = function(f)
  local co = create(f)
  sethook(co, hook, "", 97)
  return co
end
coroutine.wrap = function(f)
  local co = coroutine.create(f)
  return function(...)
    local r = table.pack(coroutine.resume(co, ...))
    if not r[1] then error(r[2], 0) end
    return table.unpack(r, 2, r.n)
  end
end
sethook(hook, "", 97)

local function top(out, t, n, scale, fmt)
  local rows = {}
  for k, v in pairs(t) do rows[#rows + 1] = { k, v * scale } end
  table.sort(rows, function(a, b) return a[2] > b[2] end)
  for i = 1, math.min(n, #rows) do out:write((fmt):format(rows[i][2], rows[i][1])) end
end

local reported = false
local function report()
  if reported then return end
  reported = true
  sethook()
  local out = assert(io.open(out_path, "w"))
  out:write(("VM instructions per message %.0f, KB allocated %.0f (%s), bytes per message %.0f\n"):format(
    instructions / N, gccount("count"), os.getenv("VMPROF_ALLOC") and "collector stopped" or "collector on: not a total",
    gccount("count") * 1024 / N))
  out:write("-- instructions per message, by function\n")
  top(out, by_fn, 60, 1 / N, "%8.0f  %s\n")
  out:write("-- instructions per message, by line\n")
  top(out, by_line, 200, 1 / N, "%8.0f  %s\n")
  out:write("-- bytes allocated per message, by function (VMPROF_ALLOC=1)\n")
  top(out, alloc_fn, 40, 1024 / N, "%8.0f  %s\n")
  out:close()
end
local print0 = print
print = function(...)
  report()
  return print0(...)
end

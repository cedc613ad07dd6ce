-- Issue 20, item 1: the /metrics listener of `mqlease run` could end or stall
-- the worker. Every accepted connection waited on its own descriptor in the
-- scheduler's poll, so about 253 idle clients made the poll raise "at most 256
-- descriptors", which ended the run and nacked everything in flight; and the
-- answer was sent blocking (2 s timeout), so each client that stopped reading
-- froze the whole loop -- every handler with it -- for 2 s.
-- Before the fix the first spec ended in that error and the second saw the
-- worker exit; now connections are capped (oldest dropped), writes never block
-- and every connection has a deadline.
local mqlease = require "mqlease"
local run = require "mqlease.run"
local loop = require "mqlease.loop"
local core = require "mqlease.core"
local http = require "mqlease.cli.http"
local fake_consumer = require "support.fake_consumer"
local env = require "support.env"
local read, wait_for = env.read, env.wait_for
local command = require "support.command"
local write_file = command.write_file

-- A client process outside the worker: opens `idle` connections that never
-- send a byte, `slow` connections that ask for /metrics and never read the
-- answer, then, with all of them held, scrapes /metrics as Prometheus would;
-- holds everything `hold` seconds more and says "done". It connects 16 at a
-- time, 20 ms apart, so that the listen backlog never overflows (a dropped
-- SYN would wait a second for its retry, and pace the attack for us).
local ATTACKER = [=[
local socket = require "socket"
local port, idle_n, slow_n, hold, out = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5]
local function say(s) local f = assert(io.open(out, "a")); f:write(s, "\n"); f:close() end
local held, idle, slow, n = {}, 0, 0, 0
local function connect()
  n = n + 1
  if n % 16 == 0 then socket.sleep(0.02) end
  local c = socket.tcp()
  c:settimeout(5)
  if c:connect("127.0.0.1", port) then return c end
  c:close()
end
for _ = 1, idle_n do
  local c = connect()
  if c then idle = idle + 1; held[#held + 1] = c end
end
for _ = 1, slow_n do
  local c = connect()
  if c and c:send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") then
    slow = slow + 1
    held[#held + 1] = c
  elseif c then
    c:close()
  end
end
say(("opened %d %d"):format(idle, slow))
local c = socket.tcp()
c:settimeout(20)
local data = ""
if c:connect("127.0.0.1", port) and c:send("GET /metrics HTTP/1.0\r\n\r\n") then
  local all, _, partial = c:receive("*a")
  data = all or partial or ""
end
c:close()
local f = assert(io.open(out .. ".page", "w"))
f:write(data)
f:close()
say(("scrape %s %d"):format(data:match("^HTTP/1%.1 (%d+)") or "none", #data))
socket.sleep(hold)
say("done")
]=]


local function start_attacker(script, port, idle, slow, hold, out)
  os.execute(("env -u LD_PRELOAD lua5.4 %s %d %d %d %g %s >/dev/null 2>&1 &"):format(script, port, idle, slow, hold, out))
end

local function sorted(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s
end

local function median(xs)
  local s = sorted(xs)
  return s[math.ceil(#s / 2)]
end

local function max(xs)
  local s = sorted(xs)
  return s[#s]
end

describe("the /metrics server beside mqlease.run", function()
  it("neither ends nor stalls the run under 500 idle connections and 50 clients that never read", function()
    -- A page bigger than what the kernel buffers for a client that does not
    -- read (about 4 MB on loopback): many labelled series make such pages.
    local lines = {}
    for i = 1, 110000 do lines[i] = ('app_series_total{shard="%06d",kind="example"} %d'):format(i, i) end
    local page = "# TYPE app_series_total counter\n" .. table.concat(lines, "\n") .. "\nmqlease_page_end 1\n"
    assert.is_true(#page > 5e6)

    local server = assert(http.listen("127.0.0.1", 0, function() return page end))
    local script, out = write_file(ATTACKER), os.tmpname()
    finally(function() server:close(); os.remove(script); os.remove(out); os.remove(out .. ".page") end)

    local c = fake_consumer.new { every = 0.01 }
    local baseline, attacked = {}, {}
    local phase = "baseline"
    local started = core.now()
    local attack_at = started + 1.5
    local serving, attacking, finished, checked = false, false, false, 0
    local summary = run(c, function()
      local t0 = core.now()
      loop.sleep(0.02)
      local took = core.now() - t0
      if phase == "baseline" then baseline[#baseline + 1] = took
      elseif phase == "attack" then attacked[#attacked + 1] = took end
      return true
    end, {
      signals = false, run_for = 60,
      stop = function()
        local now = core.now()
        if not serving then
          serving = true
          local s = loop.set_scheduler(nil)
          loop.set_scheduler(s)
          server:serve(s)
        end
        if not attacking and now >= attack_at then
          attacking, phase = true, "attack"
          start_attacker(script, server.port, 500, 50, 3, out)
        end
        if attacking and now - checked > 0.1 then
          checked = now
          if read(out):find("done", 1, true) then
            phase, finished = "after", true
          end
        end
        return finished
      end,
    })

    assert.equal("stop", summary.reason)
    local report = read(out)
    local idle, slow = report:match("opened (%d+) (%d+)")
    assert.equal("500", idle, report)
    assert.equal("50", slow, report)
    -- a normal scrape, made while all of them were held, got the whole page
    local status, size = report:match("scrape (%S+) (%d+)")
    assert.equal("200", status, report)
    assert.is_true(tonumber(size) > #page, report)
    assert.matches("\r\n\r\n# TYPE app_series_total counter\n", read(out .. ".page"), 1, true)
    assert.matches("\nmqlease_page_end 1\n$", read(out .. ".page"))
    -- the handlers ran on through the attack, with their latency: a loop
    -- stalled by one blocking send would show 2 s here
    assert.is_true(#baseline >= 10, #baseline .. " handlers in the baseline")
    assert.is_true(#attacked >= 20, #attacked .. " handlers during the attack")
    local msg = ("latency baseline median %.3f max %.3f, under attack median %.3f max %.3f (%d handlers)")
      :format(median(baseline), max(baseline), median(attacked), max(attacked), #attacked)
    assert.is_true(max(attacked) < max(baseline) + 1.0, msg)
    assert.is_true(median(attacked) < 3 * median(baseline) + 0.1, msg)
    print(msg)
  end)

  it("keeps `mqlease run --metrics` consuming while 500 idle connections are held, and still answers a scrape", function()
    local topic = env.topic("issue20_metrics")
    local group = env.name("g_issue20_metrics")
    local sub = env.consumer { group = group, topic = topic }
    assert(sub:receive(1, { await = 0 }))
    sub:close()
    local producer = env.producer()
    local log = os.tmpname()
    local handler = write_file(([[
local log = assert(io.open(%q, "a"))
log:setvbuf("line")
return function(m) log:write("done ", m.body, "\n"); return true end
]]):format(log))
    local h = command.start { "run", handler, "--topic", topic, "--group", group, "--metrics", "127.0.0.1:0" }
    local script, out = write_file(ATTACKER), os.tmpname()
    finally(function()
      h.cleanup()
      for _, f in ipairs({ handler, log, script, out, out .. ".page" }) do os.remove(f) end
      producer:close()
    end)
    local port = h.metrics_port()
    assert(producer:send(topic, "before"))
    wait_for(function() return read(log):find("done before", 1, true) end, 30, "the first message handled")

    start_attacker(script, port, 500, 0, 8, out)
    wait_for(function() return read(out):find("scrape", 1, true) or h.rc() ~= nil end, 30, "the attacker's scrape")
    assert.is_nil(h.rc(), "mqlease run exited:\n" .. h.stderr())
    local report = read(out)
    assert.equal("500", report:match("opened (%d+)"), report)
    assert.equal("200", report:match("scrape (%S+)"), report)
    assert.matches("\nmqlease_inflight_leases 0\n", read(out .. ".page"), 1, true)
    -- it still consumes while the connections are held
    assert(producer:send(topic, "during"))
    wait_for(function() return read(log):find("done during", 1, true) or h.rc() ~= nil end, 30, "the second message handled")
    assert.is_nil(h.rc(), "mqlease run exited:\n" .. h.stderr())
    assert.matches("done during", read(log), 1, true)
    assert.is_nil(h.stderr():find("descriptors", 1, true), h.stderr())
    h.term()
    assert.equal(0, h.wait(30), h.stderr())
  end)
end)

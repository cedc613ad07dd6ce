-- mqlease lab results: the figures computed from worker logs (made up here,
-- in the format mqlease.lab.worker writes), the text table, and the HTML
-- file (well-formed, one <svg> per plot and scenario, faults marked, nothing
-- loaded from elsewhere).
local scenario = require "mqlease.lab.scenario"
local logs = require "mqlease.lab.logs"
local analyze = require "mqlease.lab.analyze"
local report = require "mqlease.lab.report"

-- Events from log lines (times in ms; t0 is 1000 s, so "1000500" is 0.5 s in).
local function events(text)
  local out = {}
  for line in text:gmatch("[^\n]+") do out[#out + 1] = assert(logs.parse(line), line) end
  return out
end

-- Two workers at time scale 0.5; worker 1 is SIGKILLed at 1000.6 s while it
-- runs message 3, which worker 2 starts again at 1001.0 s. Message 2 runs
-- twice (a duplicate), message 4 never succeeds, message 5 is dead-lettered.
local function made_up()
  local s = scenario.check({ name = "made_up", time_scale = 0.5, workload = { rate = 10, duration = 1 } })
  local w1 = { slot = 1, died = 1000.6, signalled = "kill", events = events([[
ready
metrics 1000100 2 0 0 0 0 0 0
start 1 a 1000100 1
start 3 c 1000200 1
end 1 a 1000300 ok 1 -
metrics 1000400 1 3 0 5 0 0 0
start 2 b 1000450 1
end 2 b 1000500 ok 1 -
]]) }
  local w2 = { slot = 2, died = 1002.5, events = events([[
ready
start 2 b 1000550 2
start 5 e 1000560 1
end 5 e 1000570 fail 3 poison
dlq 5 e 1000580 4 fail
start 3 c 1001000 2
end 3 c 1001200 ok 2 -
end 2 b 1001300 ok 2 -
start 4 d 1001400 1
end 4 d 1001500 fail 1 failure
metrics 1001900 0 7 0 9 1 0 2
]]) }
  local sent = {}
  for seq = 1, 5 do sent[seq] = { t = 1000 + seq / 100, poison = seq == 5 } end
  local kill = { action = "kill", t = 1000.6, label = "SIGKILL worker 1", worker = w1, open = { 3 } }
  return { scenario = s, t0 = 1000, t_sent = 1001, t_end = 1002, sent = sent, send_failed = 0,
    incarnations = { w1, w2 }, faults = { kill } }
end

describe("lab figures", function()
  local r = analyze.report(made_up())

  it("count business runs, duplicates, lost and dead-lettered messages", function()
    assert.equal(5, r.sent)
    assert.equal(4, r.runs)               -- 1, 2 twice, 3
    assert.equal(1, r.duplicates)         -- message 2
    assert.equal(1, r.lost)               -- message 4: failed, not retried by the end
    assert.equal(1, r.dead_lettered)      -- message 5
    assert.equal(1, r.poison)
    assert.equal(2, r.failed_runs)
  end)

  it("measure the recovery of the killed worker's message in scenario seconds", function()
    assert.equal(1, r.orphans)
    assert.near((1001.0 - 1000.6) / 0.5, r.recovery_p50, 1e-6)
    assert.near(0.8, r.recovery_max, 1e-6)
  end)

  it("add up the last metrics line of each worker", function()
    assert.equal(3 + 7, r.renewals)
    assert.equal(5 + 9, r.redis_calls)
    assert.equal(1, r.caught)
    assert.equal(2, r.expired_while_alive)
    assert.equal(0, r.held_at_end)        -- worker 2 held none at its last reading
  end)

  it("measure latency from send to the first successful run", function()
    -- message 1: sent at 1000.01, done at 1000.3 -> 0.58 scenario s; message 3: 1000.03 -> 1001.2
    assert.near(0.58, analyze.quantile({ 0.58 }, 0.5), 1e-9)
    assert.is_true(r.latency_p50 > 0.5 and r.latency_p99 >= r.latency_p50)
    assert.near((1001.2 - 1000.03) / 0.5, r.latency_p99, 1e-6)
  end)
end)

describe("lab series", function()
  local raw = made_up()
  local s = analyze.series(raw, 10)

  it("cover the run until its last event in equal buckets", function()
    assert.equal(10, #s.t)
    assert.near(2 / 0.5, s.span, 1e-6)        -- t_end 1002, nothing later
    assert.near(0.2, s.t[1], 1e-6)            -- the middle of the first 0.2 s bucket, in scenario s
  end)

  it("hold the leases of live workers only, and count duplicates as they happen", function()
    assert.equal(2, s.leases[2])              -- worker 1's reading at 0.1 s
    assert.equal(0, s.leases[8])              -- worker 1 is dead, worker 2 has no reading yet
    assert.equal(0, s.duplicates[6])          -- the second run of message 2 ends at 1.3 s (bucket 7)
    assert.equal(1, s.duplicates[7])
    assert.equal(1, s.duplicates[10])
    local total = 0
    for _, v in ipairs(s.completions) do total = total + v * s.width end
    assert.near(4, total, 1e-6)               -- every business run once
    assert.equal(1, #s.faults)
    assert.near(1.2, s.faults[1].t, 1e-6)
  end)
end)

-- Checks that every tag opened is closed in order (void elements aside).
local VOID = { meta = true, br = true }
local function well_formed(html)
  local stack = {}
  for close, name, self_close in html:gmatch("<(/?)([%a][%w]*)[^>]-(/?)>") do
    name = name:lower()
    if close == "/" then
      local top = table.remove(stack)
      if top ~= name then return false, ("</%s> closes <%s>"):format(name, tostring(top)) end
    elseif self_close ~= "/" and not VOID[name] then
      stack[#stack + 1] = name
    end
  end
  if #stack > 0 then return false, "unclosed <" .. stack[#stack] .. ">" end
  return true
end

describe("lab report", function()
  local raw = made_up()
  local one = { scenario = raw.scenario, report = analyze.report(raw), series = analyze.series(raw, 20) }
  local raw2 = made_up()
  raw2.scenario = scenario.check({ name = "other", workload = { rate = 1, duration = 1 }, description = "a <b> & c" })
  local two = { scenario = raw2.scenario, report = analyze.report(raw2), series = analyze.series(raw2, 20) }

  it("prints one column per scenario", function()
    local text = report.text({ one, two })
    local header = text:match("^[^\n]+")
    assert.matches("made_up", header, 1, true)
    assert.matches("other", header, 1, true)
    assert.matches("\nduplicate business runs%s+1%s+1\n", text)
    assert.matches("\nlost %b()%s+1%s+1\n", text)
  end)

  it("writes well-formed HTML with the table and an <svg> per plot and scenario", function()
    local html = report.html({ one, two })
    assert.truthy(html:match("^<!DOCTYPE html>"))
    assert.is_true(well_formed(html))
    local _, svgs = html:gsub("<svg ", "")
    assert.equal(#report.PLOTS * 2, svgs)
    for _, p in ipairs(report.PLOTS) do
      assert.truthy(html:find('id="plot-' .. p[1] .. '"', 1, true), p[1])
    end
    local _, rows = html:gsub('<tr><th scope="row">', "")
    assert.equal(#analyze.FIELDS + 3, rows)
    local _, faults = html:gsub('class="fault"', "")
    assert.equal(#report.PLOTS * 2, faults)   -- the kill, in every panel of both
    assert.truthy(html:find("SIGKILL worker 1", 1, true))
  end)

  it("escapes what the scenario writes and loads nothing from elsewhere", function()
    local html = report.html({ two })
    assert.truthy(html:find("a &lt;b&gt; &amp; c", 1, true))
    assert.falsy(html:find("a <b> & c", 1, true))
    assert.falsy(html:find("<script", 1, true))
    assert.falsy(html:find("src=", 1, true))
    assert.falsy(html:find("href=", 1, true))
    assert.falsy(html:find("http://", 1, true) and not html:find("http://www.w3.org/2000/svg", 1, true))
  end)

  it("rounds axis maxima up to 1, 2 or 5 times a power of ten", function()
    assert.equal(1, report.nice(0))
    assert.equal(50, report.nice(26))
    assert.equal(0.2, report.nice(0.15))
    assert.equal(1000, report.nice(1000))
  end)
end)

describe("lab log follower", function()
  it("reads only complete lines, and keeps track of what runs where", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("ready\nstart 7 x 100 1\nstart 8 y 110 1\nend 7 x 2")   -- the last line is half written
    f:flush()
    local w = {}
    local follow = logs.follower()
    follow:read(path, w)
    assert.equal(2, follow:open_count(w))
    assert.same({ 7, 8 }, follow:open_seqs(w))
    assert.is_nil(follow:effects(7))
    f:write("00 ok 1 -\ndlq 8 y 300 4 fail\nmetrics 400 1 2 0 0 0 0 0\n")
    f:close()
    follow:read(path, w)
    os.remove(path)
    assert.equal(1, follow:open_count(w))
    assert.equal(1, follow:effects(7))
    assert.is_true(follow:dead_lettered(8))
    assert.equal(2, follow:last_metric(w, "renewals"))
    local kinds = {}
    for i, e in ipairs(follow:events(w)) do kinds[i] = e.kind end
    assert.same({ "ready", "start", "start", "end", "dlq", "metrics" }, kinds)
    assert.equal(200, follow:events(w)[4].t)
  end)
end)

describe("lab logs with lines that are not the worker's format", function()
  it("are skipped, not taken as events with fields missing", function()
    for _, line in ipairs({ "start", "start 7", "start x a 100 1", "end 7 a 100", "end 7 a oops ok 1 -",
      "end 7 a 100 maybe 1 -", "dlq 7", "metrics", "metrics soon 1 2", "push4x 100" }) do
      assert.is_nil(logs.parse(line), line)
    end
    assert.same({ kind = "end", seq = 7, id = "a", t = 100, ok = true, attempt = 1, why = nil },
      logs.parse("end 7 a 100 ok"))
  end)

  it("do not stop the follower, which keeps counting the good ones", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("ready\nstart\nstart 7 x 100 1\nend zz x 150 ok 1 -\nstart 8 y 110\xff 1\nend 7 x 200 ok 1 -\n")
    f:close()
    local w = {}
    local follow = logs.follower()
    local ok, err = pcall(follow.read, follow, path, w)
    os.remove(path)
    assert.is_true(ok, err)
    assert.equal(0, follow:open_count(w))
    assert.equal(1, follow:effects(7))
    assert.equal(3, #follow:events(w))
  end)
end)

describe("lab duplicates", function()
  -- message 2's send timed out (the proxy was frozen) but reached the broker:
  -- it ran twice. Message 1 ran once. A foreign message (seq -1: not a lab
  -- body, e.g. another producer's on an existing --topic) ran under two ids.
  local function raw_with_unconfirmed_send()
    local s = scenario.check({ name = "unconfirmed", workload = { rate = 10, duration = 1 } })
    local w1 = { slot = 1, died = 1002, events = events([[
ready
start 1 a 1000100 1
end 1 a 1000200 ok 1 -
start 2 b 1000300 1
end 2 b 1000400 ok 1 -
start -1 f 1000500 1
end -1 f 1000510 ok 1 -
]]) }
    local w2 = { slot = 2, died = 1002, events = events([[
ready
start 2 b 1000700 2
end 2 b 1000800 ok 2 -
start -1 g 1000900 1
end -1 g 1000910 ok 1 -
]]) }
    return { scenario = s, t0 = 1000, t_sent = 1000.5, t_end = 1001, sent = { [1] = { t = 1000.01 } }, nsent = 2,
      send_failed = 1, incarnations = { w1, w2 }, faults = {} }
  end

  it("count a message whose send failed but that ran twice, in the table as in the plot", function()
    local raw = raw_with_unconfirmed_send()
    local r = analyze.report(raw)
    assert.equal(1, r.duplicates)          -- message 2's second run
    assert.equal(0, r.lost)
    local s = analyze.series(raw, 10)
    assert.equal(r.duplicates, s.duplicates[10])   -- the foreign message is no duplicate
  end)
end)

-- mqlease.run keeps message groups in order without a server: a stand-in
-- consumer hands out messages of a few message groups (as an orderly group's
-- queue would, in order) and records what run does with each -- ack, nack,
-- dead letter -- so the scheduling rules can be checked exactly.
local run = require "mqlease.run"
local wait = require "mqlease.loop"

-- Hands out, per receive, up to `want` of the messages bodies[1..n] ("g:i");
-- each message has its group and attempt 1.
local function fake_consumer(bodies, settings)
  local c = {
    options = { release_delay = 1, batch = 8, request_timeout = 3 },
    _router = { client = { cancel_receives = function() end } },
    acked = {}, nacked = {}, dead = {}, given = 0, counts = {},
  }
  function c.metrics() return settings or {} end
  function c.count(_, name) c.counts[name] = (c.counts[name] or 0) + 1 end
  local function message(i)
    local body = bodies[i]
    local m = { id = "m" .. i, body = body, delivery_attempt = 1, message_group = body:match("^(.-):") }
    local alive = true
    m.lease = { alive = function() return alive end }
    function m.nack() alive = false; c.nacked[#c.nacked + 1] = body; return true end
    function m.dead_letter() alive = false; c.dead[#c.dead + 1] = body; return true end
    return m
  end
  function c.receive(_, want)
    if c.given >= #bodies then
      wait.sleep(0.01)
      return {}
    end
    local msgs = {}
    for i = c.given + 1, math.min(#bodies, c.given + want) do msgs[#msgs + 1] = message(i) end
    c.given = c.given + #msgs
    return msgs
  end
  function c.ack(_, msgs)
    wait.sleep(0.001)
    for _, m in ipairs(msgs) do c.acked[#c.acked + 1] = m.body end
    return true
  end
  function c.close() end
  return c
end

local function interleaved(groups, n)
  local bodies = {}
  for i = 1, n do
    for _, g in ipairs(groups) do bodies[#bodies + 1] = g .. ":" .. i end
  end
  return bodies
end

local function per_group(list)
  local out = {}
  for _, body in ipairs(list) do
    local g, i = body:match("^(.-):(%d+)$")
    out[g] = out[g] or {}
    out[g][#out[g] + 1] = tonumber(i)
  end
  return out
end

local function range(n, skip)
  local out = {}
  for i = 1, n do if i ~= skip then out[#out + 1] = i end end
  return out
end

describe("mqlease.run with message groups", function()
  it("runs one group's messages one at a time in order, groups side by side", function()
    local c = fake_consumer(interleaved({ "a", "b", "c" }, 20), { fifo = true })
    local running, most, overlap = {}, 0, false
    local summary = run(c, function(m)
      local g = m.message_group
      if running[g] then overlap = true end
      running[g] = true
      local n = 0
      for _ in pairs(running) do n = n + 1 end
      if n > most then most = n end
      wait.sleep(math.random() * 0.01)
      running[g] = nil
      return true
    end, { concurrency = 16, signals = false, run_for = 10, stop = function() return #c.acked >= 60 end })
    assert.is_false(overlap)
    assert.equal(3, most)
    local acked = per_group(c.acked)
    for _, g in ipairs { "a", "b", "c" } do assert.same(range(20), acked[g]) end
    assert.is_true(summary.fifo)
  end)

  it("retries a failure in place after the retry policy's delay, then dead-letters it before the next of its group", function()
    local c = fake_consumer(interleaved({ "a", "b" }, 6), { retry_policy = { max_attempts = 3, steps = { 0.05, 0.1 } } })
    local attempts, order = {}, {}
    local summary = run(c, function(m)
      attempts[m.body] = (attempts[m.body] or 0) + 1
      order[#order + 1] = m.body
      if m.body == "a:2" and m.delivery_attempt == 1 then return false, "once" end
      if m.body == "b:3" then return false, "always" end
      return true
    end, { concurrency = 4, signals = false, run_for = 10, on_error = function() end,
      stop = function() return #c.acked + #c.dead >= 12 end })
    assert.same({}, c.nacked, "nothing was nacked")
    assert.same({ "b:3" }, c.dead)
    assert.equal(2, attempts["a:2"])
    assert.equal(3, attempts["b:3"], "the server's 3 attempts")
    assert.equal(3, summary.retried)
    assert.equal(3, c.counts.fifo_retries)
    -- nothing of a group ran between a message's attempts, nor before it was done
    local per = per_group(order)
    assert.same({ 1, 2, 2, 3, 4, 5, 6 }, per.a)
    assert.same({ 1, 2, 3, 3, 3, 4, 5, 6 }, per.b)
  end)

  it("on a stop gives back what waits behind an unfinished message, and starts nothing more of its group", function()
    local c = fake_consumer(interleaved({ "a", "b" }, 10))
    local ran, stop_now = {}, false
    local summary = run(c, function(m)
      ran[#ran + 1] = m.body
      if m.body == "a:3" then
        stop_now = true
        wait.sleep(0.2)   -- still running when the stop comes; finishes within grace
      end
      return true
    end, { concurrency = 8, signals = false, grace = 5, run_for = 10, stop = function() return stop_now end })
    assert.equal("stop", summary.reason)
    local per = per_group(ran)
    assert.same({ 1, 2, 3 }, per.a, "nothing of a after a:3")
    -- every message ended exactly once: acked, or given back
    local seen = {}
    for _, body in ipairs(c.acked) do assert.is_nil(seen[body], body); seen[body] = true end
    for _, body in ipairs(c.nacked) do assert.is_nil(seen[body], body); seen[body] = true end
    local given = 0
    for _ in pairs(seen) do given = given + 1 end
    assert.equal(c.given, given)
    -- and what was given back of a group is exactly what never ran, in one piece after what ran
    -- (the nacks go out at once, so they may settle in any order: the broker's ordered queue,
    -- not the order of our nacks, decides the order they come back in)
    local back = per_group(c.nacked)
    for g, list in pairs(back) do
      table.sort(list)
      local last = per[g] and per[g][#per[g]] or 0
      for k, i in ipairs(list) do assert.equal(last + k, i, "group " .. g) end
    end
  end)

  -- Java's FifoConsumeService schedules a failed ordered message's retry
  -- without holding a consume thread; a waiting message held its slot here,
  -- and with concurrency = 1 a poison head of group a held group b back for
  -- its whole retry schedule.
  it("lets other groups run while a group's head waits for its retry", function()
    local c = fake_consumer({ "a:1", "b:1", "b:2", "b:3" },
      { retry_policy = { max_attempts = 3, steps = { 0.6, 0.6 } } })
    local ran, b_done_at, t0 = {}, nil, wait.now()
    local summary = run(c, function(m)
      ran[#ran + 1] = m.body
      if m.body == "b:3" then b_done_at = wait.now() - t0 end
      if m.body == "a:1" and m.delivery_attempt == 1 then return false, "once" end
      return true
    end, { concurrency = 1, signals = false, run_for = 10, on_error = function() end,
      stop = function() return #c.acked >= 4 end })
    assert.same({ "a:1", "b:1", "b:2", "b:3", "a:1" }, ran)
    assert.is_true(b_done_at < 0.5, ("group b ran after %.2f s, behind a's retry"):format(b_done_at))
    assert.same({}, c.nacked)
    assert.equal(1, summary.retried)
  end)

  it("keeps concurrency while waiting messages come back: never more handlers than slots", function()
    local bodies = {}
    for i = 1, 6 do bodies[#bodies + 1] = "g" .. i .. ":1" end
    for i = 1, 6 do bodies[#bodies + 1] = "g" .. i .. ":2" end
    local c = fake_consumer(bodies, { retry_policy = { max_attempts = 3, steps = { 0.05, 0.05 } } })
    local running, most = 0, 0
    local summary = run(c, function(m)
      running = running + 1
      if running > most then most = running end
      wait.sleep(0.02 + math.random() * 0.03)
      running = running - 1
      if m.delivery_attempt == 1 and m.body:sub(-2) == ":1" then return false, "once" end
      return true
    end, { concurrency = 2, signals = false, run_for = 10, on_error = function() end,
      stop = function() return #c.acked >= 12 end })
    assert.equal(2, most)
    assert.equal(12, #c.acked)
    assert.equal(6, summary.retried)
    local per = per_group(c.acked)
    for i = 1, 6 do assert.same({ 1, 2 }, per["g" .. i], "group g" .. i) end
  end)

  it("gives back, unrun, a message that waited for a slot when the stop comes as one frees", function()
    local c = fake_consumer({ "a:1", "b:1" }, { retry_policy = { max_attempts = 5, steps = { 0.1 } } })
    local runs = {}
    local summary = run(c, function(m)
      runs[m.body] = (runs[m.body] or 0) + 1
      if m.body == "a:1" then return false, "once" end
      wait.sleep(0.3)   -- a:1 waits for this slot from 0.1 s on
      return true
    end, { concurrency = 1, signals = false, run_for = 10, grace = 5, on_error = function() end,
      stop = function() return #c.acked >= 1 end })
    assert.equal("stop", summary.reason)
    assert.same({ "b:1" }, c.acked)
    assert.equal(1, runs["a:1"], "a:1 ran again after the stop")
    assert.same({ "a:1" }, c.nacked)
    assert.equal(1, summary.drained)
  end)

  it("settles a message whose lease ends while it waits for a slot, and gives back its group", function()
    local c = fake_consumer({ "a:1", "b:1", "a:2" }, { retry_policy = { max_attempts = 5, steps = { 0.1 } } })
    local a1
    local t0, a1_settled_at = wait.now(), nil
    local summary = run(c, function(m)
      if m.body == "a:1" then
        a1 = m
        return false, "once"
      end
      if m.body == "b:1" then
        -- a:1 waits for this slot; its lease ends meanwhile (the broker's, or a lost renewal)
        wait.sleep(0.3)
        a1.nack = nil
        local lease = a1.lease
        lease.alive = function() return false end
        lease.state = "lost"
        wait.sleep(3)
      end
      return true
    end, { concurrency = 1, max_inflight = 8, signals = false, run_for = 10, grace = 5, on_error = function() end,
      stop = function()
        if not a1_settled_at and #c.nacked > 0 then a1_settled_at = wait.now() - t0 end
        return #c.acked >= 1
      end })
    assert.equal("stop", summary.reason)
    -- a:2, behind it in its group, went back within about a second, not after b:1's 3.3 s
    assert.same({ "a:2" }, c.nacked)
    assert.is_truthy(a1_settled_at, "a:1's group was given back only by the stop's drain")
    assert.is_true(a1_settled_at < 2.5, ("a:1's group was given back after %.1f s"):format(a1_settled_at))
  end)
end)

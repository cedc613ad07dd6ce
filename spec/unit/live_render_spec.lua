-- mqlease.live without a broker: stand-in consumers whose core answers
-- client:lease(id) from a table show what /leases and the live page list (the
-- oldest leases, at most the cap, how many more), and that whatever a
-- message's id or topic carries comes out inert in the JSON and the HTML.
local live = require "mqlease.live"
local cjson = require "cjson"

-- A core client stand-in: leases[id] = { state, remaining, renewals, age, uncertain }.
local function fake_client(leases)
  local client = { leases = leases, asked = 0, is_closed = false }
  function client:closed() return self.is_closed end
  function client:lease(id)
    self.asked = self.asked + 1
    local l = self.leases[id]
    if not l then return nil end
    return l[1], l[2], l[3], l[4], l[5]
  end
  return client
end

-- A consumer with n leases (ids 1..n, age n - id + 1 s), as mqlease.lease
-- objects are shaped: their router (and its client) in the shared metatable;
-- stand-in messages carry them by name.
local function fake_consumer(n, opts)
  opts = opts or {}
  local core_leases = {}
  local router = { leases = setmetatable({}, { __mode = "v" }) }
  router.client = fake_client(core_leases)
  local lease_mt = { router = router }
  local c = { group = opts.group or "g", topic = opts.topic or "t", _router = router,
    metrics = function() return opts.metrics or { inflight = n } end }
  local msgs = {}
  for id = 1, n do
    core_leases[id] = { "renewing", 10 + id / 1000, id % 3, n - id + 1, id == 2 }
    local lease = setmetatable({ id = id }, lease_mt)
    msgs[id] = { id = (opts.ids and opts.ids[id]) or ("MSG" .. id), topic = opts.msg_topic, lease = lease,
      delivery_attempt = 1 }
    router.leases[id] = msgs[id]   -- the router maps a lease id to its message
  end
  c.msgs, c.core_leases = msgs, core_leases
  return c
end

-- Tracks c as mqlease.run does: running = the first nrun messages (in a hash), the rest queued.
local function run_like(c, nrun)
  local running, queue = {}, {}
  for i, m in ipairs(c.msgs) do
    if i <= nrun then running[m] = true else queue[#queue + 1] = m end
  end
  live.track(c, function(cap)
    return live.select(running, queue, 1, #queue, cap), #c.msgs, running
  end)
  return running, queue
end

describe("mqlease.live", function()
  after_each(function() live._set_encoder(nil) end)

  it("lists the held leases oldest first with every field, and the gauges, as JSON", function()
    local c = fake_consumer(3, { metrics = { inflight = 3, renew_success = 7, renew_fail = 1, renew_uncertain = 2,
      expire_while_alive = 4 } })
    c.msgs[1].lease.fence, c.msgs[1].lease.lock_owner = 12, "client-a/00ff"
    run_like(c, 2)
    local text = assert(live.json(live.view(c)))
    local v = cjson.decode(text)
    assert.same({ 3, 3, 0 }, { v.total, v.listed, v.more })
    assert.equal(500, v.cap)
    assert.same({ leases_held = 3, renewals_ok = 7, renewals_failed = 1, renewals_uncertain = 2,
      expired_while_alive = 4 }, v.gauges)
    assert.same({ "MSG1", "MSG2", "MSG3" }, { v.leases[1].id, v.leases[2].id, v.leases[3].id })
    assert.same({
      id = "MSG1", topic = "t", group = "g", lease = 1, state = "renewing", handler = "running",
      age = 3, remaining = 10.001, renewals = 1, uncertain = false, delivery_attempt = 1,
      fence = 12, lock_owner = "client-a/00ff",
    }, v.leases[1])
    assert.is_true(v.leases[2].uncertain)
    assert.is_nil(v.leases[1].lock_lost)
    c.msgs[1].lease._lock_is_lost = true
    local again = live.view(c)
    assert.is_true(cjson.decode(live.json(again)).leases[1].lock_lost)
    assert.matches(">lost: client-a/00ff</td>", live.html(again), 1, true)
    assert.equal("queued", v.leases[3].handler)
    assert.is_nil(v.leases[2].fence)
    -- fixed key order: the summary first, the leases last
    assert.matches('^{"cap":500,"total":3,"listed":3,"more":0,"gauges":{', text)
  end)

  it("writes an empty list as [] (not {}) and says why there is nothing", function()
    local text = assert(live.json(live.view({})))
    local v = cjson.decode(text)
    assert.same({}, v.leases)
    assert.equal("no consumer is running", v.note)
    assert.matches('"leases":%[%]}$', text)
  end)

  it("lists at most the cap, the oldest by lease id, says how many more, and asks the core only about those", function()
    local c = fake_consumer(700)
    -- 600 running (in a hash: no order), 100 queued
    run_like(c, 600)
    local v = live.view(c)
    assert.same({ 700, 500, 200 }, { v.total, v.listed, v.more })
    for i, e in ipairs(v.leases) do assert.equal(i, e.lease) end
    assert.equal(500, c._router.client.asked)
    assert.matches("and 200 more not listed", live.html(v), 1, true)
    -- a cap of 10 from 5 running + 695 queued: the 5 running, then the queue's head
    local d = fake_consumer(700)
    run_like(d, 5)
    v = live.view(d, { cap = 10 })
    local ids = {}
    for i, e in ipairs(v.leases) do ids[i] = e.lease end
    assert.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, ids)
    assert.same({ "running", "queued" }, { v.leases[5].handler, v.leases[6].handler })
    assert.has_error(function() live.view(d, { cap = -1 }) end, "mqlease.live.view: option 'cap' must be an integer from 0")
  end)

  it("leaves out a lease the core let go of between the pick and the question", function()
    local c = fake_consumer(3)
    run_like(c, 3)
    c.core_leases[2] = nil
    local v = live.view(c)
    assert.same({ 1, 3 }, { v.leases[1].lease, v.leases[2].lease })
  end)

  it("escapes a hostile message id and topic: inert in the JSON, text in the page, no script allowed", function()
    local hostile = [[</script><script>alert("x")</script><img src=x onerror=alert(1)>&amp;']]
    local c = fake_consumer(1, { ids = { hostile }, group = "<b>g</b>" })
    c.msgs[1].topic = "<script>t</script>"
    c.msgs[1].lease.lock_owner = "<i>owner</i>"
    run_like(c, 1)
    local view = live.view(c)
    local text = assert(live.json(view))
    assert.is_nil(text:find("<", 1, true))
    assert.is_nil(text:find(">", 1, true))
    assert.is_nil(text:find("&", 1, true))
    local e = cjson.decode(text).leases[1]
    assert.equal(hostile, e.id)            -- the same text once decoded
    assert.equal("<script>t</script>", e.topic)
    assert.equal("<b>g</b>", e.group)

    local html = live.html(view)
    assert.is_nil(html:lower():find("<script", 1, true))
    assert.is_nil(html:find("<img", 1, true))
    assert.is_nil(html:find("<b>g", 1, true))
    assert.is_nil(html:find("<i>owner", 1, true))
    assert.matches("&lt;/script&gt;&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&amp;amp;&#39;",
      html, 1, true)
    assert.matches("&lt;script&gt;t&lt;/script&gt;", html, 1, true)
    assert.matches([[content="default-src 'none'; style-src 'unsafe-inline'"]], html, 1, true)
  end)

  it("renders a page that refreshes itself: the gauges, one row per lease, no external asset", function()
    local h = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0 }
    local bounds = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600 }
    local c = fake_consumer(4, { metrics = { inflight = 4, renew_success = 5, renew_fail = 6, expire_while_alive = 8,
      handler = { bounds = bounds, counts = h, count = 10, sum = 8 } } })
    run_like(c, 4)
    local html = live.html(live.view(c))
    assert.matches('^<!DOCTYPE html>', html)
    assert.matches('<meta http-equiv="refresh" content="2">', html, 1, true)
    assert.equal(4, select(2, html:gsub('<tr class="lease', "")))
    for _, label in ipairs { "leases held", "renewals ok", "renewals failed", "expired while alive", "handler p50", "handler p99" } do
      assert.matches('<b>[^<]+</b><span>' .. label .. '</span>', html)
    end
    assert.matches("<b>750 ms</b><span>handler p50</span>", html, 1, true)
    assert.matches("<b>995 ms</b><span>handler p99</span>", html, 1, true)
    assert.is_nil(html:find("https?://"))
    assert.is_nil(html:find("<script", 1, true))
    assert.is_nil(html:find("<link", 1, true))
    assert.matches("no lease is held right now", live.html(live.view({})), 1, true)
  end)

  it("reads quantiles from the handler histogram as histogram_quantile does", function()
    local h = { bounds = { 1, 2, 4 }, counts = { 2, 2, 0, 0 }, count = 4 }
    assert.equal(1, live.quantile(h, 0.5))
    assert.equal(1.5, live.quantile(h, 0.75))
    assert.equal(4, live.quantile({ bounds = { 1, 2, 4 }, counts = { 0, 0, 0, 3 }, count = 3 }, 0.5))
    assert.is_nil(live.quantile({ bounds = { 1 }, counts = { 0, 0 }, count = 0 }, 0.5))
  end)

  it("lists a bare consumer's leases without their messages, and nothing of a closed one", function()
    local c = fake_consumer(3)
    local v = live.view(c)
    assert.equal(3, v.total)
    assert.same({ 1, 2, 3 }, { v.leases[1].lease, v.leases[2].lease, v.leases[3].lease })
    assert.is_nil(v.leases[1].id)
    assert.equal("not under mqlease.run: leases are listed without their messages", v.note)
    assert.matches("lease 1", live.html(v), 1, true)
    c._closed = true
    v = live.view(c)
    assert.same({ 0, 0 }, { v.total, #v.leases })
  end)

  it("picks the smallest lease ids from a hash in O(n log cap)", function()
    local set = {}
    for id = 1000, 1, -1 do set[{ id = id }] = true end
    local out = live.smallest(set, 4)
    assert.same({ 1, 2, 3, 4 }, { out[1].id, out[2].id, out[3].id, out[4].id })
    assert.same({}, live.smallest(set, 0))
  end)

  it("names lua-cjson when it is missing (the page needs no JSON)", function()
    live._set_encoder(false)
    local text, err = live.json(live.view({}))
    assert.is_nil(text)
    assert.matches("lua-cjson", err, 1, true)
    assert.matches("<table", live.html(live.view({})), 1, true)
  end)
end)

-- The live view of `mqlease run --metrics` against the real broker and Redis:
-- while handlers sleep, /leases lists the held leases with sane fields (alive,
-- time left, age growing between two fetches, the exactly-once fence and lock
-- owner on the running ones), and the page at / renders them in headless
-- chromium (its DOM, and a screenshot).
local socket_http = require "socket.http"
local cjson = require "cjson"
local env = require "support.env"
local read, wait_for = env.read, env.wait_for

local command = require "support.command"
local start, write_file = command.start, command.write_file
local CHROMIUM = os.getenv("MQLEASE_CHROMIUM") or "chromium"
-- where the screenshot of the page is kept (docs/live.png is made from it)
local SCREENSHOT = os.getenv("MQLEASE_LIVE_SCREENSHOT") or os.tmpname() .. ".png"

local q = require("mqlease.launch").shell_quote

local function fetch(port, path)
  local body, status, headers = socket_http.request(("http://127.0.0.1:%d%s"):format(port, path))
  return body, status, headers
end

local function has_chromium()
  return os.execute(("command -v %s >/dev/null 2>&1"):format(CHROMIUM)) == true
end

-- chromium, headless, without the preloaded sanitizer; its output
local function chromium(args)
  return env.sh(("env -u LD_PRELOAD %s --headless --no-sandbox --disable-gpu --hide-scrollbars %s 2>/dev/null")
    :format(CHROMIUM, args))
end

describe("the live view of mqlease run --metrics", function()
  it("lists the held leases in /leases with sane fields and renders them at / in chromium", function()
    local topic = env.topic("live")
    local group = env.name("g_live")
    local c = env.consumer { group = group, topic = topic }
    assert(c:receive(1, { await = 0 }))   -- subscribes the group
    c:close()
    local release = os.tmpname()
    os.remove(release)
    -- each handler holds its message until the release file exists
    local handler = write_file(([[
local mqlease = require "mqlease"
return function(m)
  -- the token, as a fenced write takes it (issued at this first read)
  assert(m.lease.fence)
  local deadline = mqlease.now() + 60
  while mqlease.now() < deadline do
    local f = io.open(%q)
    if f then f:close() break end
    mqlease.sleep(0.1)
  end
  return true
end
]]):format(release))
    local h = start({ "run", handler, "--topic", topic, "--group", group, "--metrics", "127.0.0.1:0",
      "--concurrency", "2", "--invisible", "10", "--grace", "10",
      "--policy", "exactly_once", "--redis", "127.0.0.1:" .. env.redis_port })
    finally(function()
      local f = io.open(release, "w")
      if f then f:close() end
      h.cleanup()
      os.remove(handler); os.remove(release)
    end)
    local port = h.metrics_port()

    local producer = env.producer()
    local sent = {}
    for i = 1, 3 do sent[i] = assert(producer:send(topic, "live " .. i)) end
    producer:close()

    -- /leases: the three, two running under their Redis lock, one queued
    local view, by_id
    wait_for(function()
      local body, status, headers = fetch(port, "/leases")
      assert.equal(200, status)
      assert.equal("application/json", headers["content-type"])
      view = cjson.decode(body)
      by_id = {}
      for _, e in ipairs(view.leases) do by_id[e.id] = e end
      local running = 0
      -- running: its handler started (the policy takes the Redis lock first)
      for _, e in ipairs(view.leases) do if e.handler == "running" and e.fence then running = running + 1 end end
      return by_id[sent[1]] and by_id[sent[2]] and by_id[sent[3]] and running == 2
    end, 30, "the three leases in /leases, two running under their lock")
    assert.same({ 3, 3, 0 }, { view.total, view.listed, view.more })
    assert.equal(3, view.gauges.leases_held)
    local alive = { held = true, renewing = true, expiring = true }
    for _, e in ipairs(view.leases) do
      assert.equal(topic, e.topic)
      assert.equal(group, e.group)
      assert.is_true(alive[e.state], e.state)
      assert.is_true(e.remaining > 0 and e.remaining <= 10.5, tostring(e.remaining))
      assert.is_true(e.age >= 0, tostring(e.age))
      assert.is_true(e.renewals >= 0)
      assert.equal(false, e.uncertain)
      assert.equal(1, e.delivery_attempt)
      if e.handler == "running" then
        assert.is_true(e.fence >= 1)
        assert.matches("/", e.lock_owner, 1, true)
      else
        assert.equal("queued", e.handler)
        assert.is_nil(e.fence)
      end
    end
    -- oldest first
    for i = 2, #view.leases do assert.is_true(view.leases[i - 1].age >= view.leases[i].age) end

    -- a second fetch, past one renewal: every lease is older, renewed, still alive
    local first = by_id
    wait_for(function()
      local body = fetch(port, "/leases")
      view = cjson.decode(body)
      by_id = {}
      for _, e in ipairs(view.leases) do by_id[e.id] = e end
      for _, id in ipairs(sent) do
        if not by_id[id] or by_id[id].renewals < 1 then return false end
      end
      return true
    end, 25, "a renewal of each lease in /leases")
    for _, id in ipairs(sent) do
      assert.is_true(by_id[id].age > first[id].age, id)
      assert.is_true(by_id[id].remaining > 0, id)
    end
    assert.is_true(view.gauges.renewals_ok >= 3)

    -- the page, in a real browser: one row per lease, the gauges
    local html, status, headers = fetch(port, "/")
    assert.equal(200, status)
    assert.equal("text/html; charset=utf-8", headers["content-type"])
    assert.matches("<table", html, 1, true)
    if not has_chromium() then
      print("\nlive_spec: chromium not found (" .. CHROMIUM .. "; set MQLEASE_CHROMIUM): skipping the browser check")
    else
      local url = ("http://127.0.0.1:%d/"):format(port)
      local dom = chromium("--dump-dom " .. q(url))
      local rows = 0
      for row in dom:gmatch('<tr class="lease[^"]*">(.-)</tr>') do
        rows = rows + 1
        assert.matches(topic, row, 1, true)
      end
      assert.equal(3, rows, dom)
      for _, id in ipairs(sent) do assert.matches(id, dom, 1, true) end
      assert.matches("<span>leases held</span>", dom, 1, true)
      os.remove(SCREENSHOT)
      chromium(("--window-size=1480,340 --screenshot=%s %s"):format(q(SCREENSHOT), q(url)))
      local png = read(SCREENSHOT)
      assert.equal("\137PNG", png:sub(1, 4))
      print("\nlive_spec: screenshot of the page at " .. SCREENSHOT)
    end

    -- released: acked, and the list empties
    local f = assert(io.open(release, "w"))
    f:close()
    wait_for(function()
      return #cjson.decode((fetch(port, "/leases"))).leases == 0
    end, 30, "an empty /leases once the handlers return")
    os.execute(("kill -TERM %d"):format(h.pid))
    wait_for(function() return h.rc() ~= nil end, 30, "the command's exit")
    assert.equal(0, h.rc(), h.stderr())
  end)
end)

-- mqlease.message without a server: a message built the way the core hands
-- it over (its own fields, plus a shape shared with other messages) shows
-- every field through m:totable(), which pairs(m) does not.
local message = require "mqlease.message"

-- A router whose core client holds no lease and never closes.
local function fake_router()
  return {
    leases = setmetatable({}, { __mode = "v" }),
    client = { closed = function() return false end, lease = function() return nil end },
    pump = function() end,
  }
end

-- own as the core hands it over (src/lua/lmql_push.c): the fields every
-- message has in their slots of the array part, the others by name.
local function receive(consumer, router, own, shape)
  local t = {}
  for k, v in pairs(own) do
    local slot = message.SLOTS[k]
    if slot then t[slot] = v else t[k] = v end
  end
  return message.wrap(router, consumer, t, message.shape_mt(consumer, shape))
end

describe("mqlease.message", function()
  local consumer, router
  before_each(function()
    router = fake_router()
    consumer = { _shapes = setmetatable({}, { __mode = "v" }), options = { release_delay = 1 },
      count = function() end, _router = router }
  end)

  local SHAPE = { topic = "t", tag = "TagA", born_host = "10.0.0.1", store_host = "10.0.0.2",
    message_type = "NORMAL", queue_id = 3, delivery_attempt = 2 }

  it("gives every field a handler reads in a plain table, with keys and properties of its own", function()
    local m = receive(consumer, router, {
      id = "01AB", body = "hello", offset = 42, born_at = 1700000000.5, store_at = 1700000001,
      trace_context = "00-abc-01", keys = { "k1", "k2" }, properties = { a = "b" }, lease = 7,
    }, SHAPE)
    local seen = {}
    for k in pairs(m) do seen[k] = true end
    assert.is_nil(seen.topic)            -- shared fields stay in the shape: pairs misses them
    if _VERSION ~= "Lua 5.1" then        -- __pairs (LuaJIT 2.1 lists the slots by number)
      assert.same({ id = true, body = true, offset = true, born_at = true, store_at = true,
        lease = true, trace_context = true, keys = true, properties = true }, seen)
    end
    local t = m:totable()
    assert.same({
      id = "01AB", body = "hello", offset = 42, born_at = 1700000000.5, store_at = 1700000001,
      trace_context = "00-abc-01", keys = { "k1", "k2" }, properties = { a = "b" },
      topic = "t", tag = "TagA", born_host = "10.0.0.1", store_host = "10.0.0.2",
      message_type = "NORMAL", queue_id = 3, delivery_attempt = 2,
    }, t)
    assert.is_nil(getmetatable(t))
    assert.are_not.equal(m.keys, t.keys)
    t.keys[3] = "mine"                   -- the copy is the caller's to change
    assert.equal(2, #m.keys)
    assert.equal(7, m.lease.id)          -- the lease stays on the message, out of the table
    assert.is_nil(t.lease)
    assert.is_nil(t.consumer)
  end)

  it("gives writable empty keys and properties for a message without any", function()
    local m = receive(consumer, router, { id = "01CD", body = "", offset = 1, born_at = 1, lease = 8 }, SHAPE)
    assert.has_error(function() m.keys[1] = "x" end, "mqlease.message: keys is read-only")
    local t = m:totable()
    assert.same({}, t.keys)
    assert.same({}, t.properties)
    t.keys[1] = "x"
    t.properties.a = "b"
    assert.equal("TagA", t.tag)
  end)

  it("lists in FIELDS every field the core sets on a message or its shape", function()
    -- the names src/lua/lmql_push.c sets (besides keys, properties and lease)
    local pushed = {}
    local f = assert(io.open("src/lua/lmql_push.c"))
    local text = f:read("a")
    f:close()
    local body = assert(text:match("static void push_message.-\n}")) .. assert(text:match("static void push_shape.-\n}"))
    for name in body:gmatch('lmql_set_%a+%(L, "([%w_]+)"') do pushed[name] = true end
    -- and the slots, in the order of its enum: the order of message.SLOTS
    local slots = assert(text:match("enum {%s*(MSG_ID.-)MSG_SLOTS"))
    local i = 0
    for name in slots:gmatch("MSG_([%u_]+)") do
      i = i + 1
      name = name:lower()
      assert.equal(i, message.SLOTS[name], name .. " is not in slot " .. i .. " of mqlease.message.SLOTS")
      pushed[name] = true
    end
    assert.equal(6, i)
    pushed.lease = nil
    local listed = {}
    for _, k in ipairs(message.FIELDS) do listed[k] = true end
    for name in pairs(pushed) do assert.is_true(listed[name], name .. " is not in mqlease.message.FIELDS") end
  end)

  it("keeps the fields a user sets on a message, and lists them in pairs", function()
    local m = receive(consumer, router, { id = "01EF", body = "b", offset = 1, born_at = 1, lease = 9 }, SHAPE)
    m.mine, m.body = "x", "changed"
    assert.equal("x", m.mine)
    assert.equal("changed", m.body)
    assert.equal("01EF", m.id)
    if _VERSION ~= "Lua 5.1" then
      local seen, n = {}, 0
      for k, v in pairs(m) do seen[k] = v; n = n + 1 end
      assert.equal("changed", seen.body)
      assert.equal("x", seen.mine)
      assert.equal(6, n)   -- id, body, offset, born_at, lease, mine: body once
    end
  end)

  it("makes its lease when it is first asked for, and gives back a dropped message either way", function()
    local nacks = {}
    router.client.lease = function(_, id) return not nacks[id] and "held" or nil end
    router.client.nack = function(_, id) nacks[id] = true; return id end
    router.forget = function() end
    local m = receive(consumer, router, { id = "01A1", body = "", offset = 1, born_at = 1, lease = 11 }, SHAPE)
    assert.equal(11, rawget(m, message.SLOTS.lease))   -- the core's lease id, no object yet
    assert.equal(m, router.leases[11])
    assert.equal(11, message.lease_id(m))
    local lease = m.lease
    assert.equal(11, lease.id)
    assert.equal(lease, m.lease)
    assert.equal(lease, rawget(m, "lease"))             -- read raw from now on
    assert.equal(11, rawget(m, message.SLOTS.lease))
    assert.equal("held", lease.state)
    receive(consumer, router, { id = "01A2", body = "", offset = 2, born_at = 1, lease = 12 }, SHAPE)
    m = nil
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_true(nacks[12])           -- dropped without a lease object
    assert.is_nil(nacks[11])            -- its lease keeps the message alive
    lease = nil
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_true(nacks[11])
  end)
end)

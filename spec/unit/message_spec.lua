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

-- own as the core hands it over (src/lua/lmql_message.c): one userdata with
-- the fields every message has in its bytes, the others in its own table.
local function receive(consumer, router, own, shape)
  return message.wrap(router, consumer, message.new(own), message.shape_mt(consumer, shape))
end

-- pairs over a userdata: Lua 5.4's __pairs (LuaJIT 2.1 has none for it)
local HAS_PAIRS = _VERSION ~= "Lua 5.1"

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
    if HAS_PAIRS then
      local seen = {}
      for k in pairs(m) do seen[k] = true end
      assert.is_nil(seen.topic)          -- shared fields stay in the shape: pairs misses them
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
    -- the names src/lua/lmql_message.c and src/lua/lmql_push.c set (besides keys,
    -- properties and lease)
    local pushed = {}
    local function read(path)
      local f = assert(io.open(path))
      local text = f:read("a")
      f:close()
      return text
    end
    local m_text, text = read("src/lua/lmql_message.c"), read("src/lua/lmql_push.c")
    local body = assert(m_text:match("void lmql_message_push.-\n}")) .. assert(text:match("static void push_message.-\n}"))
      .. assert(text:match("static void push_new_shape.-\n}"))
    for name in body:gmatch('lmql_set_%a+%(L, "([%w_]+)"') do pushed[name] = true end
    local own = assert(m_text:match("static int message_push_own.-\n}"))
    local n_own = 0
    for name in own:gmatch('memcmp%(k, "([%w_]+)"') do pushed[name] = true; n_own = n_own + 1 end
    assert.equal(5, n_own)   -- id, body, offset, born_at, store_at
    -- and the slots of a transaction check's half message, in the order of its
    -- enum: the order of message.SLOTS
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
    if HAS_PAIRS then
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
    assert.equal(11, message.lease_id(m))             -- the core's lease id, no object yet
    assert.is_nil(message.made_lease(m))
    assert.equal(m, router.leases[11])
    local lease = m.lease
    assert.equal(11, lease.id)
    assert.equal(lease, m.lease)
    assert.equal(lease, message.made_lease(m))        -- kept in its own table from now on
    assert.equal(11, message.lease_id(m))
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

  it("reads back from its bytes every value it was handed", function()
    local ids = {
      "01A2B3C4D5E6F7A8B9C0D1E2F3A4B5C6D7",   -- RocketMQ's: "01" and 32 hex digits (packed)
      "01a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7",   -- lowercase: kept as it is
      "0ABC1", "", "not hex at all", ("F"):rep(600), ("ab"):rep(300),
    }
    for i, id in ipairs(ids) do
      local body = i == 3 and "" or ("\0b\255" .. ("x"):rep(i * 1000))
      local m = receive(consumer, router, { id = id, body = body, offset = 2^53 - i, born_at = 1700000000.123,
        store_at = 1700000001.5, lease = 100 + i }, SHAPE)
      assert.equal(id, m.id)
      assert.equal(body, m.body)
      assert.equal(2^53 - i, m.offset)
      assert.is_true(math.type == nil or math.type(m.offset) == "integer")
      assert.equal(1700000000.123, m.born_at)
      assert.equal(1700000001.5, m.store_at)
      assert.equal(100 + i, message.lease_id(m))
      assert.equal("t", m.topic)
      assert.equal(2, m.delivery_attempt)
    end
    local m = receive(consumer, router, { body = "b", offset = 1, born_at = 1, lease = 200 }, SHAPE)
    assert.is_nil(m.id)
    assert.is_nil(m.store_at)
    assert.is_nil(m.trace_context)
    assert.equal("mqlease.message", getmetatable(m).__name)
  end)

  it("tells its messages from other values", function()
    assert.is_nil(message.lease_id(io.stdout))       -- a userdata of another kind
    assert.is_nil(message.lease_id("01AB"))
    assert.equal(5, message.lease_id({ nil, nil, nil, nil, nil, 5 }))   -- a stand-in, by slot
    assert.equal(6, message.lease_id({ lease = { id = 6 } }))          -- or by its lease
    assert.has_error(function() message.new({ id = "x" }) end)         -- no lease id
  end)

  -- born_at and store_at are kept as whole milliseconds: a time no int64 of
  -- them holds (inf, NaN, 1e300) was converted all the same, which C leaves
  -- undefined, and read back as whatever the machine made of it
  it("refuses a time no milliseconds can hold, naming the field", function()
    for _, bad in ipairs({ math.huge, -math.huge, 0 / 0, 1e300, -1e300 }) do
      for _, field in ipairs({ "born_at", "store_at" }) do
        local ok, err = pcall(message.new, { id = "x", lease = 1, [field] = bad })
        assert.is_false(ok, field .. " = " .. tostring(bad) .. " was taken")
        assert.matches(field, tostring(err))
      end
    end
    local m = receive(consumer, router, { id = "x", lease = 1, born_at = 1733600000.123, store_at = -1.5 }, SHAPE)
    assert.equal(1733600000.123, m.born_at)
    assert.equal(-1.5, m.store_at)
  end)

  it("still reads every field once its lease has ended", function()
    local held = true
    router.client.lease = function() return held and "held" or nil end
    router.client.ack = function() return 1 end
    local m = receive(consumer, router, { id = "01B1", body = "done", offset = 5, born_at = 2, lease = 21,
      keys = { "k" }, properties = { p = "v" }, message_group = "g" }, SHAPE)
    assert.equal("held", m.lease.state)
    held = false
    m.lease:_set_state("acked", 3)
    collectgarbage("collect")
    assert.equal("acked", m.lease.state)
    assert.equal(3, m.lease.renewals)
    assert.same({ "01B1", "done", 5, 2, "t", "TagA", "k", "v", "g" },
      { m.id, m.body, m.offset, m.born_at, m.topic, m.tag, m.keys[1], m.properties.p, m.message_group })
    assert.equal("done", m:totable().body)
  end)

  it("lives as long as its lease object, which reads it after the rest let go", function()
    local nacks = {}
    router.client.lease = function(_, id) return not nacks[id] and "held" or nil end
    router.client.nack = function(_, id) nacks[id] = true; return id end
    router.forget = function() end
    local lease = receive(consumer, router, { id = "01C1", body = ("z"):rep(5000), offset = 9, born_at = 3,
      lease = 31, properties = { a = "b" } }, SHAPE).lease
    for _ = 1, 3 do collectgarbage("collect") end
    assert.is_nil(nacks[31])
    local m = rawget(lease, "_message")
    assert.equal(("z"):rep(5000), m.body)
    assert.equal("01C1", m.id)
    assert.equal("b", m.properties.a)
    assert.equal(lease, m.lease)
    assert.equal(m, router.leases[31])
  end)

  it("keeps a field a user sets apart from its own, which comes back when it is cleared", function()
    local m = receive(consumer, router, { id = "01D1", body = "own", offset = 1, born_at = 1, lease = 41 }, SHAPE)
    m.topic = "mine"
    assert.equal("mine", m.topic)
    assert.equal("t", receive(consumer, router, { id = "01D2", body = "", offset = 1, born_at = 1, lease = 42 }, SHAPE).topic)
    m.body = "changed"
    assert.equal("changed", m.body)
    m.body = nil
    assert.equal("own", m.body)
    -- a long body (kept as a string of its own) the same
    local long = ("L"):rep(4096)
    m = receive(consumer, router, { id = "01D3", body = long, offset = 1, born_at = 1, lease = 43 }, SHAPE)
    m.body = "short"
    assert.equal("short", m.body)
    m.body = nil
    assert.equal(long, m.body)
    if HAS_PAIRS then
      local n = 0
      for k in pairs(m) do assert.is_string(k); n = n + 1 end
      assert.equal(5, n)   -- id, body, offset, born_at, lease
    end
  end)
end)

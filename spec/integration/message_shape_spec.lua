-- Held messages are small: a consumer may hold 1,000,000 of them, so a message is
-- one userdata with only its own fields (src/lua/lmql_message.c), shares the rest
-- (topic, tag, hosts, type, queue, delivery attempt) with the other messages of its
-- shape through one metatable, and its lease object is made only when asked for;
-- every documented field still reads the same.
local mqlease = require "mqlease"
local core = require "mqlease.core"
local message = require "mqlease.message"
local env = require "support.env"
local devbroker = require "support.devbroker"

local N, BODY = 2000, ("b"):rep(100)

describe("held messages", function()
  local dv
  before_each(function() dv = devbroker.start({ "t1" }) end)
  after_each(function() dv.stop() end)

  it("share the fields of their shape and keep only their own, every field readable", function()
    local p = assert(mqlease.producer { endpoints = dv.endpoints })
    for i = 1, N do assert(p:send("t1", BODY, { tag = i % 2 == 0 and "even" or "odd" })) end
    assert(p:send("t1", "keyed", { tag = "even", keys = { "k1" }, properties = { a = "1" } }))
    p:close()
    local c = assert(mqlease.consumer { endpoints = dv.endpoints, group = "g", topic = "t1",
      invisible = 30, await = 1 })
    collectgarbage("collect")
    local before = collectgarbage("count")
    local held = env.collect(c, 60, nil, function(all) return #all >= N + 1 end)
    collectgarbage("collect")
    local lua_bytes = (collectgarbage("count") - before) * 1024 / #held
    assert.equal(N + 1, #held)

    local shapes, keyed = {}, nil
    for _, m in ipairs(held) do
      if m.body == "keyed" then keyed = m else
        -- id, body, offset, born_at, store_at and the lease id in its bytes, not the
        -- 16 fields of every message: no table of its own (no keys, properties or
        -- lease object until it is asked for)
        assert.equal("userdata", type(m))
        assert.is_nil(core.message_extras(m), "a message holds fields in a table of its own")
        assert.is_nil(message.made_lease(m))
        assert.equal(BODY, m.body)
        assert.equal("t1", m.topic)
        assert.equal(1, m.delivery_attempt)
        assert.is_string(m.id)
        assert.is_number(m.offset)
        assert.is_number(m.born_at)
        assert.is_number(m.queue_id)
        assert.same({}, m.keys)
        assert.same({}, m.properties)
        assert.equal("held", m.lease.state)
        assert.equal(c, m.consumer)
        shapes[getmetatable(m)] = m.tag
        assert.equal(m.lease, message.made_lease(m))   -- made once, then kept
      end
    end
    local nshapes, tags = 0, {}
    for _, tag in pairs(shapes) do nshapes = nshapes + 1; tags[tag] = true end
    -- one shape per tag and queue of the topic, each shared by hundreds of messages
    assert.same({ even = true, odd = true }, tags)
    assert.is_true(nshapes <= 16, nshapes .. " shapes for " .. N .. " messages")
    assert.same({ "k1" }, keyed.keys)
    assert.equal("1", keyed.properties.a)
    assert.equal("even", keyed.tag)
    assert.matches("^mqlease%.message%(%x+, t1, attempt 1%)$", tostring(keyed))
    assert.has_error(function() held[1].keys[1] = "x" end, "mqlease.message: keys is read-only")
    if _VERSION == "Lua 5.4" and not rawget(_G, "jit") then
      -- a message table of 16 slots made it 770 bytes with the 100-byte body and
      -- the id, the lease and the consumer's and this list's slots; 8 hash nodes
      -- and a lease object made at once, 560; a table with 6 slots and the id and
      -- body strings, 390; the userdata, 250
      assert.is_true(lua_bytes < 320, ("%.0f bytes of Lua heap per held message"):format(lua_bytes))
    end
    for first = 1, #held, 256 do
      local batch = {}
      for i = first, math.min(first + 255, #held) do batch[#batch + 1] = held[i] end
      assert(c:ack(batch))
    end
    c:close()
  end)
end)

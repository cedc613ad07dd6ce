-- producer:send's options at their edges, where an adversary reviewing the
-- send path found them wrong. Each spec failed before its fix. No server.
--
-- The core hands tag, keys, message_group and the property names to
-- protobuf-c as C strings: it packs each up to its first NUL, and a key the
-- binding reads as NULL (a hole in the keys array) it packs with strlen(NULL).
local config = require "mqlease.config"

local function refused(check, args, pattern)
  local ok, err = pcall(check, (table.unpack or unpack)(args))
  assert.is_false(ok, "accepted: " .. pattern)
  assert.matches(pattern, err)
end

describe("send options at their edges", function()
  -- keys = { "a", nil, "c" } has # == 3 (on Lua 5.4): config.lua read it with ipairs (one
  -- string, fine), the core with lua_rawlen (3) and lua_tostring (NULL for
  -- the hole), and the packing of the request crashed the process (SIGSEGV in
  -- protobuf_c_message_get_packed_size): a Lua argument took down an nginx worker
  it("refuses keys with a hole in the array, naming the option", function()
    local holed = { "a", "b", "c", "d" }
    holed[2] = nil   -- # is 4 on Lua 5.4 and LuaJIT alike ({ "a", nil, "c" } is 1 on LuaJIT)
    assert.equal(4, #holed)
    refused(config.check_send, { "t", "b", { keys = holed } }, "mqlease.send: option 'keys' must hold non%-blank strings")
    refused(config.check_send_many, { "t", { { body = "b", keys = holed } } }, "message 1: option 'keys'")
    refused(config.check_begin, { "t", "b", { keys = holed } }, "mqlease.begin: option 'keys'")
  end)

  -- the proxy refuses control characters in all four (ILLEGAL_MESSAGE_TAG,
  -- _KEY, _GROUP, _PROPERTY_KEY), but it never saw the NUL: "vip\0x" went out as
  -- the tag "vip" (consumers filtering on "vip" got it), two groups "g\0a" and
  -- "g\0b" as the one group "g", the property "p\0q" as "p"
  it("refuses a NUL byte in the tag, a key, the message group or a property name", function()
    refused(config.check_send, { "t", "b", { tag = "vip\0x" } }, "option 'tag' must be .- without a NUL byte")
    refused(config.check_send, { "t", "b", { tag = "\0" } }, "option 'tag'")
    refused(config.check_send, { "t", "b", { keys = "k\0x" } }, "option 'keys' must hold .- without a NUL byte")
    refused(config.check_send, { "t", "b", { keys = { "ok", "k\0x" } } }, "option 'keys'")
    refused(config.check_send, { "t", "b", { message_group = "g\0a" } }, "option 'message_group' must be .- without a NUL byte")
    refused(config.check_send, { "t", "b", { message_group = "\0" } }, "option 'message_group'")
    refused(config.check_send, { "t", "b", { properties = { ["p\0q"] = "v" } } },
      "option 'properties' must map names without a NUL byte")
    refused(config.check_send_many, { "t", { "a", { body = "b", tag = "x\0y" } } }, "message 2: option 'tag'")
  end)

  it("still takes a property value with a NUL byte (the core sends it with its length)", function()
    local opts = { properties = { p = "a\0b" }, tag = "vip", keys = { "k1", "k2" }, message_group = "g" }
    assert.equal(opts, config.check_send("t", "b", opts))
  end)
end)

describe("the core's send", function()
  -- below config.lua (the command line, a caller of the core): the binding
  -- passed the hole on as a NULL key; now it raises before anything is built
  it("raises on a key that is not a string instead of handing protobuf-c a NULL", function()
    local core = require "mqlease.core"
    local p = core.producer { endpoint = "127.0.0.1:1", topics = { "t" } }
    local holed = { "a", "b", "c", "d" }
    holed[2] = nil
    local ok, err = pcall(p.send, p, "t", "body", nil, holed)
    local ok2, err2 = pcall(p.send, p, "t", "body", nil, { "a", 7 })
    assert.is_true(pcall(p.send, p, "t", "body", nil, { "a", "c" }))
    p:close()
    assert.is_false(ok, "a hole in the keys reached the core")
    assert.matches("keys%[2%] is not a string", err)
    assert.is_false(ok2, "a number key reached the core")
    assert.matches("keys%[2%] is not a string", err2)
  end)
end)

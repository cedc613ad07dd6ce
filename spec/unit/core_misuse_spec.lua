-- mqlease.core called directly, with what config.lua would have refused: it
-- must raise, never crash, corrupt a Lua object or read freed memory.
--
-- 1. A message's __index and __newindex are C functions anyone can reach
--    (getmetatable(m).__index, core.message_newindex): they took argument 1
--    for a message unchecked, so a string or a table there made them read a
--    NULL message (a crash), and __newindex on a table set a user value in
--    the table's own bytes (Lua 5.4: its metatable overwritten).
-- 2. The option readers of core.consumer/producer/redis kept pointers to
--    strings nothing held: a number converted by luaL_checkstring on the
--    stack's copy, popped at once; or a string an __index of the config table
--    made (or that Lua code run by one dropped). A collection before the
--    client copied them freed them under it: a use after free, which a child
--    lua5.4 on the sanitizer build (ASan) catches.

local function interpreter()
  if jit then return "luajit" end
  return "lua5.4"
end

-- Runs code in a child of the same interpreter with this process's cpath;
-- returns its output and whether it exited with status 0.
local function run_child(code, prefix)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(("package.cpath = %q .. package.cpath\n"):format(package.cpath .. ";"), code)
  f:close()
  local p = assert(io.popen(("%s%s %s 2>&1"):format(prefix or "", interpreter(), script)))
  local out = p:read("a")
  local ok = p:close()
  os.remove(script)
  return out, ok
end

describe("a message's __index and __newindex", function()
  local core = require "mqlease.core"

  local function bound_message()
    local m = core.message_new { id = "01AB", body = "x", lease = 1 }
    local idx = core.message_index({}, function() end)
    return core.message_bind(m, { __name = "mqlease.message", __index = idx,
      __newindex = core.message_newindex })
  end

  it("still serve a message", function()
    local m = bound_message()
    assert.equal("01AB", m.id)
    assert.equal("x", m.body)
    m.note = "n"
    assert.equal("n", m.note)
  end)

  it("raise when __index is given something else (no crash)", function()
    local out, ok = run_child([[
local core = require "mqlease.core"
local idx = core.message_index({}, function() end)
for _, x in ipairs { "a string", {}, 42 } do
  local ok, err = pcall(idx, x, "id")
  print(ok, err)
end
print("finished")
]])
    assert.truthy(ok, out)
    assert.matches("finished", out)
    assert.not_matches("true", out)
    assert.matches("a message of mqlease expected", out)
  end)

  it("raise when __newindex is given a table, and leave the table alone", function()
    local t = {}
    local ok, err = pcall(core.message_newindex, t, "k", 1)
    assert.falsy(ok)
    assert.matches("a message of mqlease expected", err)
    assert.is_nil(getmetatable(t))
    assert.is_nil(rawget(t, "k"))
  end)
end)

describe("the core's option readers", function()
  local function libasan()
    local p = assert(io.popen("gcc -print-file-name=libasan.so"))
    local path = p:read("l")
    p:close()
    return path
  end

  -- code in a lua5.4 child on the sanitizer build, with ASan preloaded
  local function run_san(code)
    assert.truthy(io.open("build/san/mqlease/core.so"), "make sanitize builds the module this needs")
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write('package.cpath = "build/san/?.so;" .. package.cpath\n',
      'local core = require "mqlease.core"\n',
      -- every allocation that checks the collector runs a whole cycle
      'collectgarbage("incremental", 1, 1000, 40); collectgarbage()\n', code)
    f:close()
    local cmd = ("ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 LD_PRELOAD=%s lua5.4 %s 2>&1")
      :format(libasan(), script)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    os.remove(script)
    return out
  end

  local function numbers(n)
    local t = {}
    for i = 1, n do t[i] = 1000000 + i end
    return t
  end

  it("do not keep a topic given as a number past its conversion", function()
    local out = run_san(([[
local ok, c = pcall(core.producer, { endpoint = "127.0.0.1:1", topics = %s })
if ok then c:close() end
print("finished", ok, c)
]]):format("{" .. table.concat(numbers(64), ",") .. "}"))
    assert.not_matches("AddressSanitizer", out)
    assert.matches("finished", out)
  end)

  it("do not keep a Redis node given as a number past its conversion", function()
    local out = run_san(([[
local ok, r = pcall(core.redis, { cluster = true, nodes = %s, timeout_ms = 50 })
if ok then r:close() end
print("finished", ok, r)
]]):format("{" .. table.concat(numbers(64), ",") .. "}"))
    assert.not_matches("AddressSanitizer", out)
    assert.matches("finished", out)
  end)

  it("take no string from an __index of the config table", function()
    local out = run_san([[
local cfg = setmetatable({ topics = { "t" } }, { __index = function(_, k)
  if k == "endpoint" then return ("127.0.0.1:%d"):format(1) end
  collectgarbage()
end })
local ok, c = pcall(core.producer, cfg)
if ok then c:close() end
print("finished", ok, c)
]])
    assert.not_matches("AddressSanitizer", out)
    assert.matches("finished", out)
  end)
end)

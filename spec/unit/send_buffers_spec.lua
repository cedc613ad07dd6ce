-- The core's send(topic, body, tag, keys, properties, group, deliver_at, delay)
-- builds arrays for the keys and the properties before it reads its last
-- arguments. Issue 20 item 12: they came from calloc, so an argument that
-- raised after them (a table where the message group goes, a delay that is
-- not a number) leaked both, once per call. A child lua5.4 runs the sanitizer
-- build with LeakSanitizer on, once with a few such calls and once with many:
-- what it reports leaked must not grow with the number of calls. No server is
-- needed: the producer's endpoint answers nothing, and nothing is sent.
local function libasan()
  local p = assert(io.popen("gcc -print-file-name=libasan.so"))
  local path = p:read("l")
  p:close()
  return path
end

local CHILD = [[
package.cpath = "build/san/?.so;" .. package.cpath
local core = require "mqlease.core"
local p = core.producer{ endpoint = "127.0.0.1:1", topics = { "t" } }
local raised = 0
for _ = 1, tonumber(arg[1]) do
  local ok = pcall(p.send, p, "t", "body", "tag", { "k1", "k2" }, { a = "b", c = "d" }, {}, 0)
  local ok2 = pcall(p.send, p, "t", "body", "tag", { "k1" }, { a = "b" }, nil, 0, {})
  if not ok and not ok2 then raised = raised + 1 end
end
p:close()
print("raised " .. raised)
]]

-- Runs the child with n rounds; returns how many rounds raised twice and the
-- bytes LeakSanitizer reported (0 if it reported nothing).
local function leaked_after(n)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(CHILD)
  f:close()
  local cmd = ("ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LD_PRELOAD=%s lua5.4 %s %d 2>&1")
    :format(libasan(), script, n)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  os.remove(script)
  local raised = tonumber(out:match("raised (%d+)"))
  assert(raised, "the child did not finish:\n" .. out)
  return raised, tonumber(out:match("SUMMARY: AddressSanitizer: (%d+) byte%(s%) leaked")) or 0
end

describe("the core's send", function()
  it("frees its key and property arrays when a later argument raises", function()
    assert.truthy(io.open("build/san/mqlease/core.so"), "make sanitize builds the module this needs")
    local few_raised, few = leaked_after(5)
    local many_raised, many = leaked_after(200)
    assert.equal(5, few_raised)
    assert.equal(200, many_raised)
    assert.equal(few, many)
  end)
end)

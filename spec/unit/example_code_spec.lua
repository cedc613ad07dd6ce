-- The programs in examples/ and the Lua in the user docs, as a new user copies
-- them: each compiles; none drops what an ack, a nack or a send returns (a
-- failure there is an error to see: after a failed ack or nack the lease is no
-- longer renewed); and the exactly-once worker, run against a stand-in for
-- mqlease and Redis, applies each message's fenced write once and fails a
-- handler whose write the fence refused. The lab scenarios are loaded by
-- lab_scenario_spec.lua too; here every file of examples/lab/ is.
local scenario = require "mqlease.lab.scenario"

local DOCS = { "README.md", "docs/api.md", "docs/exactly-once.md", "docs/openresty.md" }

local function read(path)
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  return text
end

local function example_files(ext)
  local out = {}
  local p = assert(io.popen("find examples -name '*." .. ext .. "' | sort"))
  for path in p:lines() do out[#out + 1] = path end
  p:close()
  return out
end

-- The fenced code blocks of a markdown file: { lang =, line = (first line of
-- code), code = }. An indented fence (inside a list item) counts.
local function code_blocks(path)
  local out, cur, lang, start, n = {}, nil, nil, nil, 0
  for line in (read(path) .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    local fence = line:match("^%s*```(%w*)%s*$")
    if fence and not cur then
      cur, lang, start = {}, fence, n + 1
    elseif fence then
      out[#out + 1] = { lang = lang, line = start, code = table.concat(cur, "\n") }
      cur = nil
    elseif cur then
      cur[#cur + 1] = line
    end
  end
  assert(not cur, path .. ": a code block that never closes")
  return out
end

-- Every piece of Lua a user may copy from the docs, named path:line: the lua
-- blocks, and the bodies of *_by_lua_block in the nginx blocks.
local function doc_lua()
  local out = {}
  for _, path in ipairs(DOCS) do
    for _, b in ipairs(code_blocks(path)) do
      if b.lang == "lua" then
        out[#out + 1] = { name = path .. ":" .. b.line, code = b.code }
      elseif b.lang == "nginx" then
        for body in b.code:gmatch("_by_lua_block%s*(%b{})") do
          out[#out + 1] = { name = path .. ":" .. b.line, code = body:sub(2, -2) }
        end
      end
    end
  end
  return out
end

-- Lines of `code` that call a method whose failure is `nil, err, code` as a
-- statement, dropping what it returns (`m:ack()` alone, or after then/else/do).
local CHECKED = { "ack", "nack", "dead_letter", "let_expire", "send", "recall", "commit", "rollback",
  "subscribe_lite", "unsubscribe_lite" }
local function dropped_results(code)
  local out, n = {}, 0
  for line in (code .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    local text = line:gsub("%-%-.*$", "")
    for _, method in ipairs(CHECKED) do
      local from = 1
      while true do
        local s, e = text:find("[%w_%.]+:" .. method .. "%(", from)
        if not s then break end
        local before = text:sub(1, s - 1):gsub("%s+$", "")
        if before == "" or before:match("%f[%w]then$") or before:match("%f[%w]else$")
          or before:match("%f[%w]do$") or before:match(";$") then
          out[#out + 1] = ("line %d: %s"):format(n, (line:gsub("^%s+", "")))
        end
        from = e + 1
      end
    end
  end
  return out
end

describe("the Lua in the docs", function()
  it("compiles, block by block", function()
    local blocks = doc_lua()
    assert.is_true(#blocks >= 10, "found only " .. #blocks .. " Lua blocks")
    for _, b in ipairs(blocks) do
      local fn, err = load(b.code, "=" .. b.name, "t", {})
      assert(fn, err)
    end
  end)

  it("uses what every ack, nack and send returns", function()
    local bad = {}
    for _, b in ipairs(doc_lua()) do
      for _, where in ipairs(dropped_results(b.code)) do bad[#bad + 1] = b.name .. " " .. where end
    end
    assert.same({}, bad)
  end)
end)

describe("the examples", function()
  it("compile, every Lua file of examples/", function()
    local files = example_files("lua")
    assert.is_true(#files >= 15, "found only " .. #files .. " examples")
    for _, path in ipairs(files) do assert(loadfile(path, "t", {})) end
  end)

  it("compile the Lua of examples/nginx/nginx.conf", function()
    local n = 0
    for body in read("examples/nginx/nginx.conf"):gmatch("_by_lua_block%s*(%b{})") do
      assert(load(body:sub(2, -2), "=nginx.conf", "t", {}))
      n = n + 1
    end
    assert.is_true(n >= 3)
  end)

  it("use what every ack, nack and send returns", function()
    local bad = {}
    for _, path in ipairs(example_files("lua")) do
      for _, where in ipairs(dropped_results(read(path))) do bad[#bad + 1] = path .. " " .. where end
    end
    assert.same({}, bad)
  end)

  it("load as lab scenarios, every file of examples/lab/", function()
    local n = 0
    for _, path in ipairs(example_files("lua")) do
      if path:match("^examples/lab/") then
        local s = scenario.load(path)
        assert.equal(path:match("([^/]+)%.lua$"), s.name)
        n = n + 1
      end
    end
    assert.is_true(n >= 7)
  end)
end)

-- A Redis for the example's business writes: EVAL runs the script here, its
-- redis.call over state.data (GET, SET, INCRBY: what a fenced write needs);
-- with state.down it answers nothing, as a Redis past its timeout.
local function fake_redis(state)
  local store = state.data
  local r = {}
  local function call(cmd, key, value)
    cmd = cmd:upper()
    if cmd == "GET" then return store[key] or false end
    if cmd == "SET" then store[key] = tostring(value); return { ok = "OK" } end
    if cmd == "INCRBY" then
      store[key] = ("%d"):format(tonumber(store[key] or "0") + tonumber(value))
      return tonumber(store[key])
    end
    error("fake redis: no " .. cmd)
  end
  function r.eval(_, script, keys, args)
    if state.down then return nil, "no reply in 1 s", "TIMEOUT" end
    local argv = {}
    for i, v in ipairs(args or {}) do argv[i] = tostring(v) end
    local env = { KEYS = keys or {}, ARGV = argv, tonumber = tonumber, tostring = tostring,
                  redis = { call = call } }
    return assert(load(script, "=script", "t", env))()
  end
  function r.call(_, ...)
    if state.down then return nil, "no reply in 1 s", "TIMEOUT" end
    return call(...)
  end
  function r.close() return true end
  return r
end

-- Loads an example with `require "mqlease"` answered by a stand-in whose run
-- only keeps the handler and the options; returns them.
local function load_with_stub(path, state)
  local got = {}
  local consumer = { metrics = function() return {} end, close = function() return true end }
  local stub = {
    consumer = function() return consumer end,
    redis = function() return fake_redis(state) end,
    sleep = function() end,
    policy = { exactly_once = function(opts) return { exactly_once = opts } end },
    run = function(_, handler, opts)
      got.handler, got.opts = handler, opts
      return { received = 0, acked = 0, nacked = 0 }
    end,
  }
  local env = setmetatable({
    arg = {},
    print = function() end,
    require = function(name)
      if name == "mqlease" then return stub end
      return require(name)
    end,
  }, { __index = _G })
  assert(loadfile(path, "t", env))()
  assert.is_function(got.handler)
  return got
end

describe("examples/exactly-once/worker.lua", function()
  it("applies each message's effect, whatever fence another message's redelivery reached", function()
    local state = { data = {} }
    local got = load_with_stub("examples/exactly-once/worker.lua", state)
    -- fencing tokens count per message id (mqlease:{<id>}:fence): a message
    -- handed to a second owner writes with 2, a fresh one with 1
    assert.is_true(got.handler({ id = "A", body = "5" }, { fence = 2 }))
    assert.is_true(got.handler({ id = "B", body = "7" }, { fence = 1 }))
    assert.equal("12", state.data["balance:example"])
  end)

  it("refuses a write with the fence a failover handed out twice, and fails its handler", function()
    local state = { data = {} }
    local got = load_with_stub("examples/exactly-once/worker.lua", state)
    -- docs/exactly-once.md: a failover can hand one token to two owners of a
    -- message; the writer must reject a token equal to the last it saw
    assert.is_true(got.handler({ id = "A", body = "5" }, { fence = 1 }))   -- the new owner
    local ok, err = got.handler({ id = "A", body = "5" }, { fence = 1 })   -- the stale one
    assert.is_falsy(ok)   -- not acked: its redelivery finds the new owner's done marker
    assert.is_string(err)
    assert.equal("5", state.data["balance:example"])
  end)

  it("fails its handler, with the error, when the write gets no answer", function()
    local state = { data = {}, down = true }
    local got = load_with_stub("examples/exactly-once/worker.lua", state)
    local ok, err = got.handler({ id = "C", body = "1" }, { fence = 1 })
    assert.is_falsy(ok)
    assert.matches("no reply in 1 s", tostring(err), 1, true)
  end)
end)

-- The mqlease command without a server: flags, MQLEASE_* variables and their
-- errors, help, handler files, output formats, and the /metrics listener.
local options = require "mqlease.cli.options"
local cli_run = require "mqlease.cli.run"
local send = require "mqlease.cli.send"
local peek = require "mqlease.cli.peek"
local devbroker = require "mqlease.cli.devbroker"
local http = require "mqlease.cli.http"
local scheduler = require "mqlease.scheduler"
local core = require "mqlease.core"
local socket = require "socket"

local function parse(argv, env)
  local ok, r = options.parse(argv, env or {})
  return ok, r
end

local write_file = require("support.command").write_file

describe("mqlease command flags", function()
  local RUN = { "run", "h.lua", "--endpoints", "127.0.0.1:8081", "--group", "g", "--topic", "t" }
  local function with(extra)
    local argv = {}
    for i, a in ipairs(RUN) do argv[i] = a end
    for _, a in ipairs(extra) do argv[#argv + 1] = a end
    return argv
  end

  it("takes an option from its MQLEASE_ variable, and the flag over the variable", function()
    local ok, r = parse({ "run", "h.lua" }, {
      MQLEASE_ENDPOINTS = "10.0.0.1:8081", MQLEASE_GROUP = "g1", MQLEASE_TOPIC = "t1", MQLEASE_INVISIBLE = "45",
    })
    assert.is_true(ok, r.message)
    assert.equal("run", r.command)
    assert.equal("10.0.0.1:8081", r.opts.endpoints)
    assert.equal("g1", r.opts.group)
    assert.equal(45, r.opts.invisible)
    assert.equal("h.lua", r.opts.handler)
    ok, r = parse({ "run", "h.lua", "--group", "g2", "--invisible", "60" }, {
      MQLEASE_ENDPOINTS = "10.0.0.1:8081", MQLEASE_GROUP = "g1", MQLEASE_TOPIC = "t1", MQLEASE_INVISIBLE = "45",
    })
    assert.is_true(ok, r.message)
    assert.equal("g2", r.opts.group)
    assert.equal(60, r.opts.invisible)
  end)

  it("fills defaults: invisible and grace from mqlease.config, concurrency 16, filter *", function()
    local ok, r = parse(RUN)
    assert.is_true(ok, r.message)
    assert.equal(30, r.opts.invisible)
    assert.equal(25, r.opts.grace)
    assert.equal(16, r.opts.concurrency)
    assert.equal("*", r.opts.filter)
    assert.is_nil(r.opts.policy)
  end)

  it("names a missing required option and its variable", function()
    local ok, r = parse({ "run", "h.lua", "--endpoints", "h:1", "--topic", "t" })
    assert.is_false(ok)
    assert.equal(options.EXIT.usage, r.code)
    assert.equal("run", r.command)
    assert.equal("option '--group' is required (or set MQLEASE_GROUP)", r.message)
  end)

  it("takes --invisible auto (and MQLEASE_INVISIBLE=auto) as the library's adaptive window", function()
    local ok, r = parse(with({ "--invisible", "auto" }))
    assert.is_true(ok)
    assert.equal("auto", r.opts.invisible)
    ok, r = parse(RUN, { MQLEASE_INVISIBLE = "auto" })
    assert.is_true(ok)
    assert.equal("auto", r.opts.invisible)
    ok, r = parse(with({ "--invisible", "AUTO" }))
    assert.is_false(ok)
    assert.matches('or "auto" (got "AUTO")', r.message, 1, true)
  end)

  it("names an unknown flag and suggests the close one", function()
    local ok, r = parse(with({ "--invisibel", "30" }))
    assert.is_false(ok)
    assert.equal(options.EXIT.usage, r.code)
    assert.matches("unknown option '--invisibel'", r.message, 1, true)
    assert.matches("'--invisible'", r.message, 1, true)
  end)

  it("names a bad value by the flag or the variable it came from", function()
    local ok, r = parse(with({ "--invisible", "0.5" }))
    assert.is_false(ok)
    assert.equal("option '--invisible': option 'invisible' must be a number between 1 and 43200, or \"auto\" (got 0.5)", r.message)
    ok, r = parse(RUN, { MQLEASE_CONCURRENCY = "many" })
    assert.is_false(ok)
    assert.equal("MQLEASE_CONCURRENCY: option 'concurrency' must be a number (got \"many\")", r.message)
    ok, r = parse(RUN, { MQLEASE_CONCURRENCY = "2.5" })
    assert.is_false(ok)
    assert.equal("MQLEASE_CONCURRENCY: option 'concurrency' must be an integer (got 2.5)", r.message)
    ok, r = parse(with({ "--metrics", "9464" }))
    assert.is_false(ok)
    assert.equal("option '--metrics' must be HOST:PORT (got \"9464\")", r.message)
    ok, r = parse(with({ "--policy", "twice" }))
    assert.is_false(ok)
    assert.equal("option '--policy' must be one of plain, exactly_once (got \"twice\")", r.message)
    ok, r = parse({ "peek", "--endpoints", "h:1", "--group", "g", "--topic", "t", "-n", "0" })
    assert.is_false(ok)
    assert.equal("option '-n/--count' must be an integer from 1 to 10000 (got \"0\")", r.message)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "bad topic!", "x" })
    assert.is_false(ok)
    assert.matches("^option '%-%-topic': option 'topic' must be a name", r.message)
  end)

  it("refuses a bad value with the library's own message, after the flag or variable it came from", function()
    local mqlease = require "mqlease"
    local config = require "mqlease.config"
    -- the library's message without its "mqlease.xxx: " prefix (and a position, if any)
    local function library(fn)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      return (tostring(err):match("mqlease[%w._]*: (option .*)$"))
    end
    local BASE = { endpoints = "h:1", group = "g", topic = "t" }
    local function consumer(k, v)
      local o = {}
      for bk, bv in pairs(BASE) do o[bk] = bv end
      o[k] = v
      return function() mqlease.consumer(o) end
    end
    local cases = {
      { with({ "--invisible", "0.5" }), "option '--invisible'", consumer("invisible", 0.5) },
      { with({ "--invisible", "soon" }), "option '--invisible'", consumer("invisible", "soon") },
      { with({ "--group", "a b" }), "option '--group'", consumer("group", "a b") },
      { with({ "--endpoints", "nohost" }), "option '--endpoints'", consumer("endpoints", "nohost") },
      { { "run", "h.lua" }, "MQLEASE_ENDPOINTS", consumer("endpoints", "a:1;"),
        { MQLEASE_ENDPOINTS = "a:1;", MQLEASE_GROUP = "g", MQLEASE_TOPIC = "t" } },
      { with({ "--concurrency", "0" }), "option '--concurrency'", function() config.run_options { concurrency = 0 } end },
      { with({ "--grace=-1" }), "option '--grace'", function() config.run_options { grace = -1 } end },
      { { "send", "--endpoints", "h:1", "--topic", "t", "--tag", " ", "x" }, "option '--tag'",
        function() config.check_send("t", "x", { tag = " " }) end },
      { { "send", "--endpoints", "h:1", "--topic", "t", "--key", "", "x" }, "option '--key'",
        function() config.check_send("t", "x", { keys = { "" } }) end },
      { { "send", "--endpoints", "h:1", "--topic", "t", "--delay=-2", "x" }, "option '--delay'",
        function() config.check_send("t", "x", { delay = -2 }) end },
    }
    for _, case in ipairs(cases) do
      local ok, r = parse(case[1], case[4])
      assert.is_false(ok, table.concat(case[1], " "))
      assert.equal(options.EXIT.usage, r.code)
      local said = library(case[3])
      assert.is_string(said)
      assert.equal(case[2] .. ": " .. said, r.message)
    end
  end)

  it("answers --version with the module's version", function()
    local ok, r = parse({ "--version" })
    assert.is_true(ok)
    assert.equal("mqlease " .. core._VERSION .. " (" .. (jit and jit.version or _VERSION) .. ")", r.version)
  end)

  it("takes TLS flags as the library's tls option, checked and read as the library does", function()
    local ok, r = parse(with({ "--tls" }))
    assert.is_true(ok, r.message)
    assert.is_true(r.opts.tls)
    ok, r = parse(with({}))
    assert.is_nil(r.opts.tls)
    local ca = write_file("-----BEGIN CERTIFICATE-----\n")
    ok, r = parse(with({ "--ca-file", ca, "--server-name", "proxy.test" }))
    assert.is_true(ok, r.message)
    assert.same({ ca_file = ca, server_name = "proxy.test" }, r.opts.tls)
    ok, r = parse(RUN, { MQLEASE_CA_FILE = ca })
    assert.same({ ca_file = ca }, r.opts.tls)
    ok, r = parse(with({ "--cert-file", ca }))
    assert.is_false(ok)
    assert.matches("^option '%-%-tls': option 'tls' must be a table with both cert_file and key_file, or neither", r.message)
    ok, r = parse(with({ "--ca-file", "/nonexistent/ca.pem" }))
    assert.is_false(ok)
    assert.matches("^option '%-%-tls': option 'tls%.ca_file' cannot be read: /nonexistent/ca%.pem", r.message)
    os.remove(ca)
  end)

  it("takes the ACL access key by flag or variable and the secret key only from the environment or a file", function()
    local ok, r = parse(with({ "--access-key", "ak" }), { MQLEASE_SECRET_KEY = "sk" })
    assert.is_true(ok, r.message)
    assert.same({ access_key = "ak", secret_key = "sk" }, r.opts.credentials)
    local file = write_file("from-file\n")
    ok, r = parse(with({ "--secret-key-file", file }), { MQLEASE_ACCESS_KEY = "ak2" })
    assert.is_true(ok, r.message)
    assert.same({ access_key = "ak2", secret_key = "from-file" }, r.opts.credentials)
    os.remove(file)
    ok, r = parse(with({ "--access-key", "ak" }))
    assert.is_false(ok)
    assert.equal("option '--access-key' needs the secret key: set MQLEASE_SECRET_KEY or give --secret-key-file", r.message)
    ok, r = parse(with({}), { MQLEASE_SECRET_KEY = "sk" })
    assert.is_false(ok)
    assert.equal("MQLEASE_SECRET_KEY needs option '--access-key' (or set MQLEASE_ACCESS_KEY)", r.message)
    for _, flag in ipairs({ { "--secret-key", "sk" }, { "--secret-key=sk" } }) do
      ok, r = parse(with(flag))
      assert.is_false(ok)
      assert.equal(options.EXIT.usage, r.code)
      assert.matches("there is no option '--secret-key'", r.message, 1, true)
      assert.is_nil(r.message:find("sk", #"there is no option '--secret-key'", true))   -- the value is not echoed
    end
    ok, r = parse(with({}))
    assert.is_nil(r.opts.credentials)
  end)

  it("ties --redis and --policy exactly_once together", function()
    local ok, r = parse(with({ "--policy", "exactly_once" }))
    assert.is_false(ok)
    assert.matches("option '--redis' is required with --policy exactly_once", r.message, 1, true)
    ok, r = parse(with({ "--redis", "127.0.0.1:6379" }))
    assert.is_false(ok)
    assert.equal("option '--redis' needs --policy exactly_once", r.message)
    ok, r = parse(with({ "--policy", "exactly_once", "--redis", "127.0.0.1:6379" }))
    assert.is_true(ok, r.message)
    assert.same({ host = "127.0.0.1", port = 6379, text = "127.0.0.1:6379" }, r.opts.redis)
  end)

  it("refuses a --redis the exactly_once policy would refuse, as a usage error before anything connects", function()
    for _, address in ipairs({ "[::1]:6379", "a:b:6379", "127.0.0.1:0" }) do
      local ok, r = parse(with({ "--policy", "exactly_once", "--redis", address }))
      assert.is_false(ok, address)
      assert.equal(options.EXIT.usage, r.code)
      assert.matches("^option '%-%-redis': mqlease.redis: option 'address' must be host:port", r.message)
      ok, r = parse(with({ "--policy", "exactly_once" }), { MQLEASE_REDIS = address })
      assert.is_false(ok, address)
      assert.matches("^MQLEASE_REDIS: mqlease.redis: option 'address'", r.message)
    end
    -- the command itself: exit 2 and a message, not a traceback from the policy
    local handler = os.tmpname()
    write_file(handler, "return function() return true end")
    local argv = with({ "--policy", "exactly_once", "--redis", "[::1]:6379" })
    argv[2] = handler
    local stderr, said = io.stderr, {}
    io.stderr = { write = function(_, ...) for _, x in ipairs({ ... }) do said[#said + 1] = x end end }
    local ok, code = pcall(require("mqlease.cli").main, argv, { env = {} })
    io.stderr = stderr
    os.remove(handler)
    assert.is_true(ok, code)
    assert.equal(options.EXIT.usage, code)
    assert.matches("mqlease run: option '--redis': ", table.concat(said), 1, true)
  end)

  it("names the option of a negative number given as its own word (not argparse's unknown option '-1')", function()
    local ok, r = parse(with({ "--grace", "-1" }))
    assert.is_false(ok)
    assert.equal(options.EXIT.usage, r.code)
    assert.equal("option '--grace': option 'grace' must be a number between 0 and 3600 (got -1)", r.message)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--delay", "-5", "x" })
    assert.is_false(ok)
    assert.matches("^option '%-%-delay': option 'delay' must be seconds", r.message)
    ok, r = parse({ "peek", "--endpoints", "h:1", "--group", "g", "--topic", "t", "-n", "-3" })
    assert.is_false(ok)
    assert.equal("option '-n/--count' must be an integer from 1 to 10000 (got \"-3\")", r.message)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--tag", "-1", "x" })
    assert.is_true(ok, r.message)
    assert.equal("-1", r.opts.tag)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--", "-1" })
    assert.is_true(ok, r.message)
    assert.equal("-1", r.opts.body)
  end)

  it("collects repeated --key and --prop for send and rejects a --prop without '='", function()
    local ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--key", "a", "--key", "b",
      "--prop", "x=1", "--prop", "y=a=b", "body" })
    assert.is_true(ok, r.message)
    assert.same({ "a", "b" }, r.opts.key)
    assert.same({ { "x", "1" }, { "y", "a=b" } }, r.opts.prop)
    assert.equal("body", r.opts.body)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--prop", "novalue" })
    assert.is_false(ok)
    assert.equal("option '--prop' must be KEY=VALUE (got \"novalue\")", r.message)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--tag", "a|b" })
    assert.is_false(ok)
    assert.equal("option '--tag': option 'tag' must be a non-blank string without '|' (got \"a|b\")", r.message)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--file", "f", "body" })
    assert.is_false(ok)
    assert.equal("give either BODY or option '--file', not both", r.message)
  end)

  it("takes --message-group (FIFO) or --delay (DELAY) for send, not both", function()
    local ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--message-group", "order-1", "x" })
    assert.is_true(ok)
    assert.equal("order-1", r.opts["message-group"])
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--delay", "2.5", "x" })
    assert.is_true(ok)
    assert.equal(2.5, r.opts.delay)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--delay", "3", "--message-group", "g", "x" })
    assert.is_false(ok)
    assert.equal("give either option '--message-group' or option '--delay', not both", r.message)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--delay", "0", "x" })
    assert.is_false(ok)
    assert.equal([[option '--delay': option 'delay' must be seconds, more than 0 and at most 315360000 (got 0)]], r.message)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--message-group", " ", "x" })
    assert.is_false(ok)
    assert.matches("option '--message-group': option 'message_group' must be a non-blank string", r.message, 1, true)
  end)

  it("takes --priority for send, an integer from 0, without --delay or --message-group", function()
    local ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--priority", "3", "x" })
    assert.is_true(ok)
    assert.equal(3, r.opts.priority)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--priority", "1.5", "x" })
    assert.is_false(ok)
    assert.matches("option '--priority': option 'priority' must be an integer from 0", r.message, 1, true)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--priority", "2", "--delay", "1", "x" })
    assert.is_false(ok)
    assert.equal("give either option '--priority' or option '--delay', not both", r.message)
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--priority", "2", "--message-group", "g", "x" })
    assert.is_false(ok)
    assert.equal("give either option '--priority' or option '--message-group', not both", r.message)
    local cjson = require "cjson.safe"
    local body, o = send.decode(cjson, '{"body":"b","priority":4}', {})
    assert.equal("b", body)
    assert.equal(4, o.priority)
    local _, err = send.decode(cjson, '{"body":"b","priority":4,"delay":1}', {})
    assert.equal("options 'priority' and 'delay' exclude each other", err)
  end)

  it("takes recall's --topic and its HANDLE", function()
    local ok, r = parse({ "recall", "--endpoints", "h:1", "--topic", "t", "aGFuZGxl" })
    assert.is_true(ok)
    assert.equal("recall", r.command)
    assert.equal("aGFuZGxl", r.opts.handle)
    assert.equal("t", r.opts.topic)
    ok, r = parse({ "recall", "--endpoints", "h:1", "--topic", "t" })
    assert.is_false(ok)
    -- a blank one is a usage error here, not a raise of producer:recall once connected
    for _, blank in ipairs({ "", " " }) do
      ok, r = parse({ "recall", "--endpoints", "h:1", "--topic", "t", blank })
      assert.is_false(ok)
      assert.equal(options.EXIT.usage, r.code)
      assert.matches("HANDLE", r.message, 1, true)
    end
  end)

  it("takes --trace-context for send, checked as a W3C traceparent naming the flag", function()
    local tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    local ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--trace-context", tp, "x" })
    assert.is_true(ok)
    assert.equal(tp, r.opts["trace-context"])
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--trace-context", tp:upper(), "x" })
    assert.is_false(ok)
    assert.matches("option '--trace-context': option 'trace_context' must be a W3C traceparent", r.message, 1, true)
    assert.matches("hex digits must be lowercase", r.message, 1, true)
  end)

  it("answers --help with the help of that subcommand, which lists its variables", function()
    for _, name in ipairs({ "run", "send", "peek" }) do
      local ok, r = parse({ name, "--bogus", "--help" })
      assert.is_true(ok)
      assert.matches("^Usage: mqlease " .. name, r.help)
    end
    local ok, r = parse({ "devbroker", "--help" })
    assert.is_true(ok)
    assert.matches("^Usage: mqlease devbroker", r.help)
    local _
    _, r = parse({ "run", "-h" })
    assert.matches("[env MQLEASE_ENDPOINTS]", r.help, 1, true)
    _, r = parse({ "--help" })
    assert.matches("Exit codes: 0 done, 1", r.help, 1, true)
    for _, name in ipairs({ "run", "send", "peek", "devbroker" }) do assert.matches("\n   " .. name .. " ", r.help, 1, true) end
    -- after "--", --help is an argument
    ok, r = parse({ "send", "--endpoints", "h:1", "--topic", "t", "--", "--help" })
    assert.is_true(ok, r.message)
    assert.equal("--help", r.opts.body)
  end)

  it("hands every devbroker argument to mqlease-devbroker, adding --listen when none is given", function()
    local ok, r = parse({ "devbroker", "--topic", "a", "--fail-ack", "0.5" })
    assert.is_true(ok, r.message)
    assert.same({ "--topic", "a", "--fail-ack", "0.5", "--listen", "127.0.0.1:8081" }, devbroker.arguments(r.opts.args))
    assert.same({ "--listen", "127.0.0.1:0" }, devbroker.arguments({ "--listen", "127.0.0.1:0" }))
  end)

  it("returns nil, message, code when the program to become cannot run, and raises on a wrong argument list", function()
    local core = require "mqlease.core"
    local ok, err, code = core.exec({ "/nonexistent/mqlease-devbroker", "--listen", "127.0.0.1:0" })
    assert.is_nil(ok)
    assert.matches("cannot run /nonexistent/mqlease-devbroker", err, 1, true)
    assert.equal("ENOENT", code)
    assert.has_error(function() core.exec({}) end)
    assert.has_error(function() core.exec({ "true", 1 }) end)
    assert.has_error(function() core.exec("true") end)
  end)

  it("reads the whole environment it needs through getenv", function()
    local env = options.environment(function(name) return name == "MQLEASE_TOPIC" and "t" or nil end)
    assert.equal("t", env.MQLEASE_TOPIC)
    local ok, r = parse({ "send", "--endpoints", "h:1", "x" }, env)
    assert.is_true(ok, r.message)
    assert.equal("t", r.opts.topic)
  end)
end)

describe("mqlease run handler files", function()
  it("loads a file returning a function", function()
    local path = write_file("return function(m) return true end\n")
    local h = assert(cli_run.load_handler(path))
    os.remove(path)
    assert.is_function(h.handler)
    assert.is_nil(h.policy)
  end)

  it("loads a file returning {handler=, policy=, on_error=}", function()
    local path = write_file("return { handler = function() end, policy = function() end, on_error = function() end }\n")
    local h = assert(cli_run.load_handler(path))
    os.remove(path)
    assert.is_function(h.handler)
    assert.is_function(h.policy)
    assert.is_function(h.on_error)
  end)

  it("says what is wrong with a file that is not a handler", function()
    local cases = {
      { "return 42", "must return a function or a table" },
      { "return { handler = function() end, retries = 3 }", "unknown field 'retries'" },
      { "return { handler = 'x' }", "field 'handler' must be a function (got string)" },
      { "return { policy = function() end }", "has no 'handler' function" },
      { "return function(", "expected" },
      { "error('boom')", "boom" },
    }
    for _, case in ipairs(cases) do
      local path = write_file(case[1])
      local h, err = cli_run.load_handler(path)
      os.remove(path)
      assert.is_nil(h, case[1])
      assert.matches(case[2], err, 1, true)
    end
    local h, err = cli_run.load_handler("/nonexistent/handler.lua")
    assert.is_nil(h)
    assert.matches("/nonexistent/handler.lua", err, 1, true)
  end)
end)

describe("mqlease send and peek output", function()
  it("writes a peeked message as one JSON object with every field of m:totable(), empty keys and properties left out", function()
    local cjson = require "cjson.safe"
    local function fake(keys, properties)
      return { totable = function()
        return { id = "01AB", body = "b\n\"q\"", topic = "t", tag = "T", delivery_attempt = 2, offset = 5,
          keys = keys, properties = properties }
      end }
    end
    local line = peek.json_line(cjson, fake({ "k" }, { a = "1" }))
    assert.is_nil(line:find("\n", 1, true))
    assert.same({ id = "01AB", body = "b\n\"q\"", topic = "t", tag = "T", delivery_attempt = 2, offset = 5,
      keys = { "k" }, properties = { a = "1" } }, cjson.decode(line))
    local empty = cjson.decode(peek.json_line(cjson, fake({}, {})))
    assert.is_nil(empty.properties)
    assert.is_true(empty.keys == nil or (type(empty.keys) == "table" and next(empty.keys) == nil))
  end)

  it("reads a --json line as body and send options, the object's fields over the flags, checked by mqlease.config", function()
    local cjson = require "cjson.safe"
    local body, o = send.decode(cjson, '{"body":"b1","tag":"T","keys":["k"],"properties":{"a":"1"},"delay":2}',
      { tag = "flag" })
    assert.equal("b1", body)
    assert.same({ tag = "T", keys = { "k" }, properties = { a = "1" }, delay = 2 }, o)
    body, o = send.decode(cjson, '{"body":"b2","message_group":"g1"}', { tag = "flag" })
    assert.same({ tag = "flag", message_group = "g1" }, o)
    assert.equal("b2", body)
    local _, err = send.decode(cjson, '{"body":"x","tag":"a|b"}', {})
    assert.equal("option 'tag' must be a non-blank string without '|' (got \"a|b\")", err)
    _, err = send.decode(cjson, '{"body":"x","colour":"red"}', {})
    assert.matches("unknown field 'colour'", err, 1, true)
    _, err = send.decode(cjson, '{"tag":"t"}', {})
    assert.equal("field 'body' must be a string", err)
    _, err = send.decode(cjson, 'hello', {})
    assert.matches("^not a JSON object", err)
    _, err = send.decode(cjson, '{"body":"x","delay":1,"message_group":"g"}', {})
    assert.equal("options 'message_group' and 'delay' exclude each other", err)
  end)

  it("reads trace_context from a --json line over --trace-context, and refuses one that is not a traceparent", function()
    local cjson = require "cjson.safe"
    local flag = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    local own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    local body, o = send.decode(cjson, '{"body":"b","trace_context":"' .. own .. '"}', { trace_context = flag })
    assert.equal("b", body)
    assert.same({ trace_context = own }, o)
    body, o = send.decode(cjson, '{"body":"b"}', { trace_context = flag })
    assert.same({ trace_context = flag }, o)
    local _, err = send.decode(cjson, '{"body":"x","trace_context":"01-' .. own:sub(4) .. '"}', {})
    assert.matches("^option 'trace_context' must be a W3C traceparent.*the version must be 00", err)
    _, err = send.decode(cjson, '{"body":"x","colour":"red"}', {})
    assert.matches("message_group, priority, properties, tag, trace_context)", err, 1, true)
  end)

  it("reads bodies from BODY, from --file as one message, and from stdin one per non-empty line", function()
    local function all(it)
      local out = {}
      for b in it do out[#out + 1] = b end
      return out
    end
    assert.same({ "hi" }, all(assert(send.bodies({ body = "hi" }))))
    local path = write_file("a\nb\n")
    assert.same({ "a\nb\n" }, all(assert(send.bodies({ file = path }))))
    os.remove(path)
    local stdin = io.tmpfile()
    stdin:write("one\n\ntwo\nthree")
    stdin:seek("set")
    assert.same({ "one", "two", "three" }, all(assert(send.bodies({ body = "-" }, stdin))))
    local it, err = send.bodies({ file = "/nonexistent/body" })
    assert.is_nil(it)
    assert.matches("option '--file'", err, 1, true)
  end)

  it("prints a peeked message on one line with escaped, shortened body", function()
    local line = peek.format({
      id = "01AB", delivery_attempt = 2, tag = "T", keys = { "k1", "k2" },
      properties = { b = "2", a = "1" }, body = "line 1\nline \"2\"\t\0",
    })
    assert.equal('01AB\tattempt=2\ttype=-\ttag=T\tkeys=k1,k2\tprops=a=1,b=2\tbody="line 1\\nline \\"2\\"\\t\\x00"', line)
    line = peek.format({ id = "01AC", delivery_attempt = 1, keys = {}, properties = {}, body = ("x"):rep(100),
      message_type = "TRANSACTION" })
    assert.equal('01AC\tattempt=1\ttype=TRANSACTION\ttag=-\tkeys=-\tprops=-\tbody="' .. ("x"):rep(64) .. '"... (100 bytes)', line)
  end)

  it("prints a peeked message's id with its control bytes escaped, as the producer chose it", function()
    -- a producer may set any id (a message id is the sender's MessageId property): one with a
    -- newline or an escape sequence must not forge a second line or recolour the terminal
    local line = peek.format({ id = "01AD\n01AE\tattempt=9\27[2J", delivery_attempt = 1, keys = {},
      properties = {}, body = "" })
    assert.equal('01AD\\n01AE\\tattempt=9\\x1b[2J\tattempt=1\ttype=-\ttag=-\tkeys=-\tprops=-\tbody=""', line)
    assert.is_nil(line:find("\n", 1, true))
  end)
end)

describe("the /metrics listener", function()
  -- Sends a request from this process and runs the scheduler until the answer is complete.
  local function request(server, sched, text)
    local c = assert(socket.tcp())
    c:settimeout(2)
    assert(c:connect("127.0.0.1", server.port))
    assert(c:send(text))
    c:settimeout(0)
    local answer, deadline = "", core.now() + 5
    sched:loop(function()
      local data, err, partial = c:receive("*a")
      answer = answer .. (data or partial or "")
      return data ~= nil or err == "closed" or core.now() > deadline
    end)
    c:close()
    return answer
  end

  it("answers GET /metrics with Prometheus text from inside the scheduler, 404 and 405 otherwise", function()
    local sched = scheduler.new()
    local scrapes = 0
    local server = assert(http.listen("127.0.0.1", 0, function()
      scrapes = scrapes + 1
      return "# TYPE x_total counter\nx_total 1\n"
    end))
    assert.is_true(server.port > 0)
    server:serve(sched)
    local answer = request(server, sched, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert.matches("^HTTP/1.1 200 OK\r\n", answer)
    assert.matches("Content-Type: text/plain; version=0.0.4", answer, 1, true)
    assert.matches("\r\n\r\n# TYPE x_total counter\nx_total 1\n$", answer)
    assert.equal(1, scrapes)
    assert.matches("^HTTP/1.1 404 ", request(server, sched, "GET / HTTP/1.0\r\n\r\n"))
    assert.matches("^HTTP/1.1 405 ", request(server, sched, "POST /metrics HTTP/1.1\r\n\r\n"))
    assert.matches("^HTTP/1.1 400 ", request(server, sched, "hello\r\n\r\n"))
    server:close()
  end)

  it("serves the pages beside /metrics: their content type, their failure status, the query ignored", function()
    local sched = scheduler.new()
    local server = assert(http.listen("127.0.0.1", 0, function() return "x 1\n" end, {
      ["/leases"] = function() return '{"leases":[]}', "application/json" end,
      ["/"] = function() return "<p>hi</p>", "text/html; charset=utf-8" end,
      ["/off"] = function() return nil, "501 Not Implemented", "needs lua-cjson" end,
      ["/bad"] = function() error("broken page", 0) end,
    }))
    server:serve(sched)
    local answer = request(server, sched, "GET /leases?x=1 HTTP/1.1\r\n\r\n")
    assert.matches("^HTTP/1.1 200 OK\r\n", answer)
    assert.matches("Content-Type: application/json\r\n", answer, 1, true)
    assert.matches('\r\n\r\n{"leases":%[%]}$', answer)
    answer = request(server, sched, "GET / HTTP/1.0\r\n\r\n")
    assert.matches("Content-Type: text/html; charset=utf-8\r\n", answer, 1, true)
    assert.matches("\r\n\r\n<p>hi</p>$", answer)
    assert.matches("^HTTP/1.1 501 Not Implemented\r\n.*needs lua%-cjson\n$", request(server, sched, "GET /off HTTP/1.0\r\n\r\n"))
    assert.matches("^HTTP/1.1 500 .*broken page\n$", request(server, sched, "GET /bad HTTP/1.0\r\n\r\n"))
    assert.matches("^HTTP/1.1 404 ", request(server, sched, "GET /other HTTP/1.0\r\n\r\n"))
    assert.matches("^HTTP/1.1 200 OK\r\n.*\r\n\r\n$", request(server, sched, "HEAD / HTTP/1.0\r\n\r\n"))
    server:close()
  end)

  it("keeps other tasks running while a client sends nothing", function()
    local sched = scheduler.new()
    local server = assert(http.listen("127.0.0.1", 0, function() return "x 1\n" end))
    server:serve(sched)
    local silent = assert(socket.tcp())
    assert(silent:connect("127.0.0.1", server.port))
    local ticks = 0
    sched:spawn(function()
      for _ = 1, 5 do
        ticks = ticks + 1
        require("mqlease.loop").sleep(0.01)
      end
    end)
    local stop_at = core.now() + 0.5
    sched:loop(function() return ticks == 5 or core.now() > stop_at end)
    assert.equal(5, ticks)
    silent:close()
    server:close()
  end)

  it("holds at most 64 connections: a new one drops the oldest, and a scrape is still answered", function()
    local sched = scheduler.new()
    local server = assert(http.listen("127.0.0.1", 0, function() return "x 1\n" end))
    server:serve(sched)
    local idle = {}
    for i = 1, 70 do
      idle[i] = assert(socket.tcp())
      idle[i]:settimeout(2)
      assert(idle[i]:connect("127.0.0.1", server.port))
      -- let the server accept each before the next: the order is the point
      local _, port = idle[i]:getsockname()
      local until_ = core.now() + 2
      sched:loop(function()
        local newest = server.connections[#server.connections]
        return (newest and tostring(select(2, newest.client:getpeername())) == tostring(port)) or core.now() > until_
      end)
    end
    assert.equal(64, #server.connections)
    -- the first six were closed by the server, the last one is still open
    idle[1]:settimeout(1)
    local _, err = idle[1]:receive(1)
    assert.equal("closed", err)
    idle[70]:settimeout(0)
    _, err = idle[70]:receive(1)
    assert.equal("timeout", err)
    assert.matches("^HTTP/1.1 200 OK\r\n", request(server, sched, "GET /metrics HTTP/1.1\r\n\r\n"))
    assert.is_true(#server.connections <= 64)
    for _, c in ipairs(idle) do c:close() end
    server:close()
    assert.equal(0, #server.connections)
  end)

  it("reports a port it cannot bind", function()
    local first = assert(http.listen("127.0.0.1", 0, function() return "" end))
    local second, err = http.listen("127.0.0.1", first.port, function() return "" end)
    assert.is_nil(second)
    assert.matches("cannot listen on 127.0.0.1:" .. first.port, err, 1, true)
    first:close()
  end)
end)

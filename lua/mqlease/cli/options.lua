-- mqlease.cli.options: the flags of every `mqlease` subcommand, parsed with
-- argparse, merged with MQLEASE_* environment variables and checked, so that a
-- bad flag or variable is reported by its own name before anything connects.
--
--   local ok, parsed = options.parse({ "send", "--topic", "t", "hello" }, env)
--   parsed.command == "send"; parsed.opts.topic == "t"; parsed.opts.body == "hello"
--   -- or ok == false, parsed = { message = "...", code = options.EXIT.usage }
--
-- A flag given on the command line wins over its variable; the variable wins
-- over the default. A flag that is a library option is checked by
-- mqlease.config itself, so the command accepts what the library accepts and
-- says what is wrong in the library's words, after the flag or variable:
--   option '--invisible': option 'invisible' must be a number between 1 and 43200, or "auto" (got 0.5)

local config = require "mqlease.config"
-- The command's own dependencies load only here, never with the library, so a
-- library or OpenResty user needs neither; a missing one is named (see parse).
local has_argparse, argparse = pcall(require, "argparse")

local tostring, tonumber, ipairs, pairs, error, pcall = tostring, tonumber, ipairs, pairs, error, pcall
local floor = math.floor
local concat = table.concat

local _M = {}

-- Exit codes of the command (README "Command line").
_M.EXIT = {
  ok = 0,        -- done: sent, peeked, or drained after a stop
  failure = 1,   -- the broker, Redis or the network failed (message on stderr)
  usage = 2,     -- a bad flag, argument or MQLEASE_* variable
  handler = 3,   -- the handler file could not be loaded or returned the wrong thing
}
-- 128 + N: `run` was killed by signal N after its grace ran out (the core exits so).

-- Every option a subcommand may take: how it is written, checked and documented.
-- env = true: also read from MQLEASE_<NAME> (upper case, '-' as '_').
-- lib = { "consumer" | "run", name }: the value is one of the library's options
-- and mqlease.config checks it, so the command and the library refuse the same
-- values with the same words; send = name: a producer:send option, likewise.
-- Other kinds exist only on the command line and are checked here.
local DEFS = {
  -- a library option's text is its doc in mqlease.config (help_text): no help here
  endpoints = { kind = "string", lib = { "consumer", "endpoints" }, env = true, required = true, arg = "HOST:PORT" },
  namespace = { kind = "string", lib = { "consumer", "namespace" }, env = true, arg = "NS" },
  group = { kind = "string", lib = { "consumer", "group" }, env = true, required = true, arg = "GROUP" },
  topic = { kind = "string", lib = { "consumer", "topic" }, env = true, required = true, arg = "TOPIC" },
  filter = { kind = "string", lib = { "consumer", "filter" }, env = true, arg = "EXPR", default = "*" },
  invisible = { kind = "invisible", lib = { "consumer", "invisible" }, env = true, arg = "SECONDS|auto",
    range = config.consumer.invisible },
  concurrency = { kind = "number", lib = { "run", "concurrency" }, env = true, arg = "N", default = "16" },
  grace = { kind = "number", lib = { "run", "grace" }, env = true, arg = "SECONDS", range = config.run.grace },
  policy = { kind = "choice", env = true, arg = "NAME", values = { "plain", "exactly_once" },
    help = "plain (ack on success) or exactly_once (Redis lock + done marker; needs --redis); default: the handler file's, else plain" },
  -- redis = true: mqlease.redis checks it too, as exactly_once will
  redis = { kind = "hostport", redis = true, env = true, arg = "HOST:PORT", help = "Redis for --policy exactly_once" },
  metrics = { kind = "hostport", env = true, arg = "HOST:PORT",
    help = "serve Prometheus text at http://HOST:PORT/metrics (port 0: any free port, printed)" },
  tls = { kind = "flag", help = "TLS to the proxy, checked against the system CAs unless --ca-file is given" },
  ["ca-file"] = { kind = "string", env = true, arg = "PEM", help = "CA certificates the proxy's certificate must chain to (implies --tls)" },
  ["cert-file"] = { kind = "string", env = true, arg = "PEM", help = "client certificate for mutual TLS (with --key-file; implies --tls)" },
  ["key-file"] = { kind = "string", env = true, arg = "PEM", help = "the client certificate's private key (implies --tls)" },
  ["server-name"] = { kind = "string", env = true, arg = "NAME", help = "the name the proxy's certificate must carry (implies --tls)" },
  ["access-key"] = { kind = "string", env = true, arg = "KEY",
    help = "ACL access key; the secret key comes from MQLEASE_SECRET_KEY or --secret-key-file, never a flag" },
  ["secret-key-file"] = { kind = "string", arg = "FILE",
    help = "file holding the ACL secret key (one line); else MQLEASE_SECRET_KEY holds the key itself" },
  json = { kind = "flag", help = "newline-delimited JSON in and out (needs lua-cjson)" },
  tag = { kind = "string", send = "tag", env = true, arg = "TAG", help = "message tag" },
  key = { kind = "string", send = "keys", list = true, arg = "KEY", help = "message key (repeatable)" },
  prop = { kind = "property", list = true, arg = "K=V", help = "user property (repeatable)" },
  file = { kind = "string", arg = "FILE", help = "send the whole file as one message" },
  ["message-group"] = { kind = "string", send = "message_group", arg = "GROUP",
    help = "message group: FIFO messages, kept in order within the group (the topic must be FIFO)" },
  ["trace-context"] = { kind = "string", send = "trace_context", arg = "TRACEPARENT",
    help = "W3C traceparent the message carries (00-<32 hex>-<16 hex>-<2 hex>)" },
  delay = { kind = "number", send = "delay", arg = "SECONDS",
    help = "deliver this many seconds from now (the topic must be DELAY)" },
  priority = { kind = "number", send = "priority", arg = "N",
    help = "message priority, an integer >= 0, higher received first (the topic must be PRIORITY, RocketMQ 5.4+)" },
  transaction = { kind = "choice", arg = "MODE", values = { "commit", "rollback", "check" },
    help = "send each message as a transaction (the topic must be TRANSACTION): commit it, roll it back, or leave it open until the broker's check asks, and answer commit" },
  ["check-timeout"] = { kind = "number", arg = "SECONDS", default = "120", range = { min = 1, max = 3600 },
    help = "with --transaction check: seconds to wait for the broker's checks of the messages sent" },
  quiet = { kind = "flag", help = "no progress or summary line on stderr" },
  progress = { kind = "number", arg = "SECONDS", default = "2", range = { min = 0, max = 3600 },
    help = "seconds between progress lines on stderr (0: none)" },
  count = { kind = "integer", short = "-n", arg = "N", default = "10", range = { min = 1, max = 10000 },
    help = "messages to show" },
  wait = { kind = "number", arg = "SECONDS", default = "5", range = { min = 0, max = 20 },
    help = "seconds to wait for messages" },
}

-- The flags every command that connects takes.
local CONNECT = { "endpoints", "namespace", "tls", "ca-file", "cert-file", "key-file", "server-name", "access-key",
  "secret-key-file" }
local function with_connect(list)
  local out = {}
  for _, k in ipairs(CONNECT) do out[#out + 1] = k end
  for _, k in ipairs(list) do out[#out + 1] = k end
  return out
end

local COMMANDS = {
  { name = "run", summary = "Run a handler file on every message of a topic until SIGTERM.",
    description = "HANDLER is a Lua file that returns a function(m, lease) -> true to ack, "
      .. "or a table {handler=, policy=, on_error=}. SIGTERM or SIGINT drains gracefully; "
      .. "a summary line is printed at exit (with --json: one JSON object on stdout).",
    options = with_connect({ "group", "topic", "filter", "invisible", "concurrency",
                "grace", "policy", "redis", "metrics", "json" }),
    arguments = { { "handler", "Lua file returning the handler" } } },
  { name = "send", summary = "Send messages: BODY, the whole of --file, or stdin one message per line.",
    description = "Prints the id of each message sent, one per line, followed by a tab and its "
      .. "recall handle when the proxy gave one (a delay message, RocketMQ 5.3.2+). With no BODY and no --file, "
      .. "or with BODY '-', each line of stdin is one message (empty lines are skipped). "
      .. "Stops at the first failure. With --json each line (and BODY) is an object "
      .. "{\"body\":, \"tag\":, \"keys\":, \"properties\":, \"message_group\":, \"delay\":, \"priority\":, \"trace_context\":} "
      .. "whose fields win over the flags, and each message sent prints {\"id\":, \"offset\":, \"recall_handle\":}.",
    options = with_connect({ "topic", "tag", "key", "prop", "message-group", "delay", "priority", "trace-context", "file",
                "transaction", "check-timeout", "progress", "quiet", "json" }),
    arguments = { { "body", "message body, or - for stdin", "?" } } },
  { name = "recall", summary = "Take back a delay message before it is delivered (RocketMQ 5.3.2+).",
    description = "HANDLE is the recall handle 'mqlease send' printed for the message. Prints the "
      .. "message id on success; a proxy without RecallMessage (5.2.0) fails with UNIMPLEMENTED.",
    options = with_connect({ "topic" }),
    arguments = { { "handle", "the recall handle of the send" } } },
  { name = "peek", summary = "Show messages without consuming them: receive, print, give back.",
    description = "Prints id, delivery attempt, message type, tag, keys, properties and the start of the body; "
      .. "every message is given back (nack, no delay) before exit, so it is delivered again "
      .. "(its delivery attempt grows by one). With --json: one object per message, every field "
      .. "of m:totable() (keys and properties left out when empty).",
    options = with_connect({ "group", "topic", "count", "wait", "json" }) },
  { name = "devbroker", summary = "Run mqlease-devbroker, the in-memory dev broker.",
    description = "Every argument goes to mqlease-devbroker (README \"Dev broker\"); "
      .. "--listen defaults to 127.0.0.1:8081.",
    passthrough = true },
  { name = "lab", summary = "Run lab scenario files: workload, fleet, faults; a table and an HTML report.",
    description = "Its own flags: see 'mqlease lab --help'.",
    passthrough = true, args_help = "scenario files and flags", help_module = "mqlease.cli.lab" },
}

_M.DEFS, _M.COMMANDS, _M.CONNECT = DEFS, COMMANDS, CONNECT

-- Markdown as plain text: a link alone in parentheses dropped, another link as
-- its text, no backticks.
local function plain(s)
  s = s:gsub(" %(%[[^%]]*%]%([^%)]*%)%)", "")
  return (s:gsub("%[([^%]]*)%]%([^%)]*%)", "%1"):gsub("`", ""))
end

-- The text of a flag: a library option's doc from mqlease.config (the text of
-- docs/api.md), else its own help; markdown as written for the docs
-- (spec/support/gen-option-docs.lua), plain for --help.
function _M.help_text(key, markdown)
  local d = DEFS[key]
  local text = d.lib and config[d.lib[1]][d.lib[2]].doc or d.help
  return markdown and text or plain(text)
end

local function find_command(name)
  for _, c in ipairs(COMMANDS) do
    if c.name == name then return c end
  end
end
_M.find_command = find_command

function _M.env_name(key)
  return "MQLEASE_" .. key:upper():gsub("-", "_")
end

local function env_doc(key)
  return DEFS[key].env and (" [env " .. _M.env_name(key) .. "]") or ""
end

-- The argparse parser of the whole command (built once per call: it is cheap).
function _M.parser()
  local p = argparse("mqlease", "RocketMQ 5 messages as leases: run a handler, send, peek, or start the dev broker.")
    :command_target("command"):help_max_width(88)
    :epilog("Exit codes: 0 done, 1 broker/Redis/network failure, 2 bad flag, variable or --json input, "
      .. "3 bad handler file, 128+N killed by signal N after the grace ran out.\n"
      .. "Run 'mqlease COMMAND --help' for the flags of a command, 'mqlease --version' for the version.")
  for _, c in ipairs(COMMANDS) do
    local cmd = p:command(c.name):summary(c.summary)
      :description(c.summary .. "\n" .. c.description):help_max_width(88)
    if c.passthrough then
      cmd:handle_options(false)
      cmd:argument("args", c.args_help or "arguments for mqlease-devbroker"):args("*")
    else
      for _, key in ipairs(c.options) do
        local d = DEFS[key]
        local names = (d.short and (d.short .. " ") or "") .. "--" .. key
        local default = d.default or (d.range and d.range.default)
        local text = _M.help_text(key) .. env_doc(key) .. (default and (" (default " .. default .. ")") or "")
        -- target = the DEFS key as written ("message-group", not argparse's "message_group")
        if d.kind == "flag" then
          cmd:flag(names, text):target(key)
        else
          local o = cmd:option(names, text):argname(d.arg):target(key)
          if d.list then o:count("*") end
        end
      end
      for _, a in ipairs(c.arguments or {}) do
        local arg = cmd:argument(a[1], a[2])
        if a[3] then arg:args(a[3]) end
      end
    end
  end
  return p
end

-- ------------------------------------------------------------ checking values

local function quote(v)
  return ("%q"):format(tostring(v))
end

local function in_range(v, range)
  return not range or ((not range.min or v >= range.min) and (not range.max or v <= range.max))
end

-- The value of a flag or variable (a string) as the library's option: numbers
-- as numbers; anything else as it was, so that the library's check says what
-- is wrong with it.
local function convert(d, v)
  if d.kind == "number" or d.kind == "invisible" then
    if d.kind == "invisible" and v == "auto" then return v end
    return tonumber(v) or v
  end
  return v
end

-- Checks one value; returns it checked, or nil, the message. label is the flag
-- or the variable the value came from.
local function check(d, v, label)
  if d.lib or d.send then
    v = convert(d, v)
    local problem
    if d.lib then
      problem = config.problem(config[d.lib[1]], d.lib[2], v)
    else
      problem = config.send_problem(d.send, d.send == "keys" and { v } or v)
    end
    if problem then return nil, label .. ": " .. problem end
    if d.lib and d.lib[1] == "run" and d.lib[2] == "concurrency" then v = floor(v) end
    return v
  end
  local kind = d.kind
  local function bad(want)
    return nil, ("%s must be %s (got %s)"):format(label, want, quote(v))
  end
  if kind == "string" then
    if v == "" then return bad("a non-empty string") end
    return v
  elseif kind == "number" or kind == "integer" then
    local n = tonumber(v)
    local what = kind == "integer" and "an integer" or "a number"
    if d.range and d.range.min and d.range.max then
      what = ("%s from %s to %s"):format(what, d.range.min, d.range.max)
    end
    if not n or n ~= n or (kind == "integer" and n ~= floor(n)) or not in_range(n, d.range) then
      return bad(what)
    end
    if kind == "integer" then n = floor(n) end
    return n
  elseif kind == "choice" then
    for _, allowed in ipairs(d.values) do
      if v == allowed then return v end
    end
    return bad("one of " .. concat(d.values, ", "))
  elseif kind == "hostport" then
    local host, port = v:match("^(.+):(%d+)$")
    port = tonumber(port)
    if not host or not port or port > 65535 then return bad("HOST:PORT") end
    if d.redis then
      -- what the policy's client refuses ("[::1]:6379", port 0) is refused here,
      -- not raised from the policy once the flags passed
      local ok, err = pcall(require("mqlease.redis").check, v)
      if not ok then return nil, label .. ": " .. tostring(err):gsub("^[^:]*:%d+: ", "") end
    end
    return { host = host, port = port, text = v }
  elseif kind == "property" then
    local k, val = v:match("^([^=]+)=(.*)$")
    if not k then return bad("KEY=VALUE") end
    return { k, val }
  end
  error("unknown option kind " .. tostring(kind))
end
_M.check = check

local function usage_error(command, message)
  return false, { command = command, message = message, code = _M.EXIT.usage }
end

-- Merges flags, environment and defaults for one command; checks every value.
local function merge(c, raw, env)
  local opts = {}
  for _, key in ipairs(c.options) do
    local d = DEFS[key]
    local flag = (d.short and (d.short .. "/") or "") .. "--" .. key
    local v, label = raw[key], "option '" .. flag .. "'"
    if d.kind == "flag" then
      opts[key] = v and true or false
    elseif d.list then
      local out = {}
      for i, item in ipairs(v or {}) do
        local checked, err = check(d, item, label)
        if checked == nil then return nil, err end
        out[i] = checked
      end
      opts[key] = out
    else
      if v == nil and d.env then
        local name = _M.env_name(key)
        v = env[name]
        if v ~= nil then label = name end
      end
      if v == nil then v = d.default or (d.range and d.range.default) end
      if v ~= nil then
        local checked, err = check(d, v, label)
        if checked == nil then return nil, err end
        opts[key] = checked
      elseif d.required then
        return nil, ("option '%s' is required%s"):format(flag,
          d.env and (" (or set " .. _M.env_name(key) .. ")") or "")
      end
    end
  end
  for _, a in ipairs(c.arguments or {}) do opts[a[1]] = raw[a[1]] end
  return opts
end

-- The library's tls option from the TLS flags (nil: plaintext), checked by
-- mqlease.config, files read as the library reads them; or nil, message.
local function tls_option(opts)
  local t = {}
  local given = false
  for flag, field in pairs({ ["ca-file"] = "ca_file", ["cert-file"] = "cert_file", ["key-file"] = "key_file",
                             ["server-name"] = "server_name" }) do
    if opts[flag] then t[field] = opts[flag]; given = true end
  end
  if not given then return opts.tls or nil end
  local problem = config.problem(config.consumer, "tls", t)
  if problem then return nil, "option '--tls': " .. problem end
  local ok, err = pcall(config.tls_core, "mqlease", t)
  if not ok then
    return nil, "option '--tls': " .. (tostring(err):match("(option 'tls%..*)$") or tostring(err))
  end
  return t
end

-- The library's credentials option from --access-key and the secret key
-- (MQLEASE_SECRET_KEY or --secret-key-file; never a flag: flags show in ps).
local function credentials_option(opts, env)
  local secret, source = env.MQLEASE_SECRET_KEY, "MQLEASE_SECRET_KEY"
  if opts["secret-key-file"] then
    local f, err = io.open(opts["secret-key-file"], "rb")
    if not f then return nil, "option '--secret-key-file': " .. tostring(err) end
    secret = (f:read("a") or ""):gsub("\r?\n$", "")
    f:close()
    source = "option '--secret-key-file'"
    if secret == "" then return nil, "option '--secret-key-file': the file is empty" end
  end
  local access = opts["access-key"]
  if not access and not secret then return nil end
  if not access then return nil, source .. " needs option '--access-key' (or set MQLEASE_ACCESS_KEY)" end
  if not secret or secret == "" then
    return nil, "option '--access-key' needs the secret key: set MQLEASE_SECRET_KEY or give --secret-key-file"
  end
  return { access_key = access, secret_key = secret }
end

-- Relations between options of one command.
local function relate(command, opts, env)
  if opts.endpoints then
    local tls, err = tls_option(opts)
    if err then return err end
    local credentials
    credentials, err = credentials_option(opts, env)
    if err then return err end
    opts.tls, opts.credentials = tls, credentials
  end
  if command == "run" then
    if opts.policy == "exactly_once" and not opts.redis then
      return "option '--redis' is required with --policy exactly_once (or set MQLEASE_REDIS)"
    end
    if opts.redis and opts.policy ~= "exactly_once" then
      return "option '--redis' needs --policy exactly_once"
    end
  elseif command == "recall" then
    -- producer:recall raises on a blank handle: say so before connecting
    if not opts.handle:match("%S") then return "HANDLE must be a recall handle, not blank" end
  elseif command == "send" then
    if opts.file and opts.body ~= nil then
      return "give either BODY or option '--file', not both"
    end
    if opts["message-group"] and opts.delay then
      return "give either option '--message-group' or option '--delay', not both"
    end
    if opts.priority and (opts["message-group"] or opts.delay) then
      return ("give either option '--priority' or option '--%s', not both"):format(opts.delay and "delay" or "message-group")
    end
    if opts.transaction and (opts["message-group"] or opts.delay or opts.priority) then
      return ("option '--transaction' makes TRANSACTION messages: not with option '--%s'"):format(
        opts["message-group"] and "message-group" or opts.delay and "delay" or "priority")
    end
  end
end

-- Which help, if any, argv asks for: nil, or the command name ("" for the top).
local function wants_help(argv)
  local first = argv[1]
  local c = first and find_command(first)
  if first == "-h" or first == "--help" then return "" end
  if not c then return nil end
  if c.passthrough then
    if argv[2] == "-h" or argv[2] == "--help" then return c.name end
    return nil
  end
  for i = 2, #argv do
    if argv[i] == "--" then return nil end
    if argv[i] == "-h" or argv[i] == "--help" then return c.name end
  end
end

-- The help text of a command ("" or nil: the whole command).
function _M.help(name)
  local c = name and find_command(name)
  if c and c.help_module then return require(c.help_module).help() end
  local p = _M.parser()
  if name and name ~= "" then
    for _, cmd in ipairs(p._commands) do
      if cmd._name == name then return cmd:get_help() end
    end
  end
  return p:get_help()
end

-- parse(argv, env) -> true, { command =, opts = } | true, { help = text } | true, { version = text }
--                   | false, { command =, message =, code = }
-- env is a table of environment variables (os.getenv is not read here).
function _M.parse(argv, env)
  env = env or {}
  for _, a in ipairs(argv) do
    if a == "--" then break end
    if a == "--secret-key" or a:match("^%-%-secret%-key=") then
      local c = find_command(argv[1] or "")
      return usage_error(c and c.name, "there is no option '--secret-key': a flag shows in ps and in the shell's "
        .. "history; set MQLEASE_SECRET_KEY or give --secret-key-file")
    end
  end
  if argv[1] == "--version" then return true, { version = _M.version() } end
  if not has_argparse then
    return false, { message = "the command needs the Lua package argparse (luarocks install argparse; "
      .. "Debian: apt-get install lua-argparse)", code = _M.EXIT.failure }
  end
  local help = wants_help(argv)
  if help then return true, { help = _M.help(help) } end
  local args = {}
  for i = 1, #argv do args[i] = argv[i] end
  local first = args[1]
  local command = find_command(first or "")
  if command and not command.passthrough then
    -- "--grace -1": argparse would take the value for a flag of its own
    -- ("unknown option '-1'"); as "--grace=-1" the check names the option
    local joined, i = {}, 1
    while i <= #args do
      local a, key = args[i], args[i]:match("^%-%-([%w-]+)$")
      local d = key and DEFS[key]
      if a == "--" then
        for j = i, #args do joined[#joined + 1] = args[j] end
        break
      end
      if not d then
        for _, k in ipairs(command.options) do
          if DEFS[k].short == a then key, d = k, DEFS[k] end
        end
      end
      if d and d.kind ~= "flag" and (args[i + 1] or ""):match("^%-%.?%d") then
        joined[#joined + 1] = "--" .. key .. "=" .. args[i + 1]
        i = i + 2
      else
        joined[#joined + 1] = a
        i = i + 1
      end
    end
    args = joined
  end
  local ok, raw = _M.parser():pparse(args)
  local c = find_command(first)
  if not ok then
    return usage_error(c and c.name, raw)
  end
  c = find_command(raw.command)
  if c.passthrough then
    return true, { command = c.name, opts = { args = raw.args } }
  end
  local opts, err = merge(c, raw, env)
  if not opts then return usage_error(c.name, err) end
  err = relate(c.name, opts, env)
  if err then return usage_error(c.name, err) end
  return true, { command = c.name, opts = opts }
end

-- cjson.safe for --json, or nil, a message naming the package to install.
function _M.json()
  local ok, cjson = pcall(require, "cjson.safe")
  if ok then return cjson end
  return nil, "option '--json' needs the Lua package lua-cjson (luarocks install lua-cjson; Debian: apt-get install lua-cjson)"
end

-- "mqlease 0.1.0 (Lua 5.4)": the version of the module the command runs.
function _M.version()
  local mqlease_core = require "mqlease.core"
  return ("mqlease %s (%s)"):format(mqlease_core._VERSION, jit and jit.version or _VERSION)
end

-- The environment as a table, for parse: only the MQLEASE_* names it reads.
function _M.environment(getenv)
  getenv = getenv or os.getenv
  local env = { MQLEASE_SECRET_KEY = getenv("MQLEASE_SECRET_KEY") }
  for key, d in pairs(DEFS) do
    if d.env then
      local name = _M.env_name(key)
      env[name] = getenv(name)
    end
  end
  return env
end

return _M

-- mqlease.config: every option of every constructor, with its type, default
-- and range, and the one validator that names the bad option in its error.
--
-- Options are programmer input: a wrong one raises (at the caller's level),
-- unlike network and broker failures, which return nil, message, code.

local type, pairs, ipairs, tostring, error, getmetatable = type, pairs, ipairs, tostring, error, getmetatable
local math_type = math.type
local floor = math.floor
local concat, sort = table.concat, table.sort
local trace = require "mqlease.trace"

local _M = {}

-- RocketMQ's own limits (proxy ProxyConfig and ReceiveMessageActivity / ChangeInvisibleDurationActivity):
local PROXY_MIN_INVISIBLE = 10  -- minInvisibleTimeMillsForRecv's default: a receive asking less fails
local MIN_INVISIBLE = 1         -- what a proxy configured lower (or the dev broker) may accept
local MAX_INVISIBLE = 43200     -- 12 h, the proxy's maximum per call
local NAME_PATTERN = "^[%%|%w_%-]+$"

local function is_integer(v)
  if math_type then return math_type(v) == "integer" or (type(v) == "number" and v == floor(v)) end
  return type(v) == "number" and v == floor(v)
end

local function describe(v)
  if type(v) == "string" then return ("%q"):format(v) end
  return tostring(v)
end

-- kind: "string" | "endpoints" | "number" | "integer" | "boolean" | "table" | "enum" | "name" | "strings" | "tls"
--       | "invisible" | "auto_invisible"

-- The fields of auto_invisible, their defaults and ranges (seconds; margin a factor).
local AUTO_FIELDS = {
  min = { default = PROXY_MIN_INVISIBLE, min = MIN_INVISIBLE, max = MAX_INVISIBLE },
  max = { default = 600, min = MIN_INVISIBLE, max = MAX_INVISIBLE },
  margin = { default = 2, min = 1, max = 100 },
  start = { default = 30, min = MIN_INVISIBLE, max = MAX_INVISIBLE },
}
_M.AUTO_FIELDS = AUTO_FIELDS
-- Each option's doc is the one text about it: `mqlease run --help` shows it
-- (links and backticks dropped), and spec/support/gen-option-docs.lua writes
-- the option tables of docs/api.md and docs/cli.md from it, with the default,
-- the range and unit ("s", "bytes"). default_doc and range_doc say in words
-- what a computed default or a kind's range is. Markdown links are relative to
-- docs/. The order below is the tables' order.
local common = {
  endpoints = { kind = "endpoints", required = true, range_doc = "`host:port[;…]`",
    doc = "host:port of the RocketMQ proxy (its gRPC port); several joined by ';' are tried in order at start ([endpoints](connecting.md#several-endpoints))" },
  namespace = { kind = "string", doc = "resource namespace (RocketMQ 5 namespaces)" },
  credentials = { kind = "table", range_doc = "`{access_key, secret_key, security_token}`",
    doc = "ACL signature (`MQv2-HMAC-SHA1`) on every call, for ACL-enabled proxies ([ACL](connecting.md#acl)); afterwards the consumer's or producer's `options.credentials` holds only `access_key`: the secret key and the security token live only in the C core, out of reach of every message" },
  request_timeout = { kind = "number", default = 3, min = 0.1, max = 60, unit = "s",
    doc = "seconds allowed to each unary RPC (ack, renew, send, …): its deadline" },
  start_timeout = { kind = "number", default = 10, min = 0.1, max = 300, unit = "s",
    doc = "seconds allowed to the session start (route, settings)" },
  tls = { kind = "tls", default = false,
    doc = "TLS to the proxy: `true` (the system CAs) or `{ca_file=, cert_file=, key_file=, server_name=, insecure=}` ([TLS](connecting.md#tls))" },
}

_M.consumer = {
  endpoints = common.endpoints,
  group = { kind = "name", required = true, max_len = 255, doc = "consumer group" },
  topic = { kind = "name", required = true, max_len = 127, doc = "topic" },
  filter = { kind = "string", default = "*",
    doc = "tag expression (`\"*\"`, `\"TagA || TagB\"`), or SQL92 when `filter_type = \"sql\"`" },
  filter_type = { kind = "enum", values = { "tag", "sql" }, default = "tag", doc = "how `filter` is read" },
  lite_topics = { kind = "strings", default_doc = "nil (not a lite consumer)",
    doc = "RocketMQ 5.5+: `topic` is a LITE topic and the consumer receives from these lite topics under it (`{}`: none yet; `c:subscribe_lite`, `c:unsubscribe_lite` change the set); `group` must be bound to `topic` ([lite topics](api.md#lite-topics))" },
  lite_sync_every = { kind = "number", default = 30, min = 1, max = 150, unit = "s",
    doc = "with `lite_topics` only: how often the whole lite set is sent again (`COMPLETE_ADD`), as the official clients do every 30 s; the 5.5 broker drops a lite subscription not sent for `liteSubscriptionCheckTimeoutMills` (3 min) ([lite topics](api.md#lite-topics))" },
  invisible = { kind = "invisible", default = 30, min = MIN_INVISIBLE, max = MAX_INVISIBLE, unit = "s",
    doc = "lease length: seconds each receive and each renewal hides the message. RocketMQ's proxy refuses a receive under its `minInvisibleTimeMillsForRecv` (10 s unless configured lower; the receive returns `nil, err, \"ILLEGAL_INVISIBLE_TIME\"`); the dev broker's is `--min-invisible-ms`. `\"auto\"`: follow the handler times ([`auto_invisible`](api.md#invisible--auto))" },
  auto_invisible = { kind = "auto_invisible",
    doc = "with `invisible = \"auto\"` only: `{min=, max=, margin=, start=}`; new receives and renewals ask for `clamp(p99 × margin, min, max)` of how long leases were held (receive → ack or nack), `start` until 100 have been; missing fields take their defaults" },
  renew = { kind = "boolean", default = true, doc = "renew leases in the C core until acked, nacked or out of budget" },
  renew_every = { kind = "number", min = 1, max = MAX_INVISIBLE, unit = "s", default_doc = "`invisible`/3",
    doc = "seconds between renewals, each lease at its own phase of the period ([renewal pacing](internals.md#renewal-pacing)); must be less than `invisible`" },
  max_renewals = { kind = "integer", min = 0, max = 1e9, default_doc = "nil (unlimited)", doc = "renewals allowed per lease (the budget)" },
  max_lease = { kind = "number", default = 3600, min = MIN_INVISIBLE, max = 7 * 86400, unit = "s",
    doc = "seconds a lease may be held in total, renewals included; must be at least `invisible`" },
  on_budget = { kind = "enum", values = { "expire", "nack" }, default = "expire",
    doc = "when the budget is spent: stop renewing (`expire`: the message returns at its deadline) or give the message back at once (`nack`)" },
  await = { kind = "number", default = 20, min = 0, max = 20, unit = "s",
    doc = "long-poll seconds of a receive; the proxy polls at least 5 s and at most 20 s" },
  batch = { kind = "integer", default = 16, min = 1, max = 32, doc = "messages per receive (the proxy caps it at 32)" },
  release_delay = { kind = "number", default = 1, min = 0, max = MAX_INVISIBLE, unit = "s",
    doc = "delay of the nack that gives messages back on close, on stop and with `on_budget = \"nack\"`: seconds until they are visible again" },
  on_corrupt = { kind = "enum", values = { "dlq", "nack" }, default = "dlq",
    doc = "a message whose digest or body fails, or with a NUL byte inside a text field (`nul_in_text`): forward it to `%DLQ%<group>` (`dlq`) or give it back after `corrupt_delay` (`nack`); never handed to Lua either way" },
  corrupt_delay = { kind = "number", default = 10, min = 0, max = MAX_INVISIBLE, unit = "s",
    doc = "seconds before a corrupted message comes back when `on_corrupt = \"nack\"`" },
  max_body = { kind = "integer", default = 64 * 1024 * 1024, min = 1024, max = 2 ^ 31, unit = "bytes",
    doc = "bytes a body may have after inflation; a larger one is corrupted (`body_too_large`)" },
  request_timeout = common.request_timeout, start_timeout = common.start_timeout,
  namespace = common.namespace, credentials = common.credentials, tls = common.tls,
}

_M.producer = {
  endpoints = common.endpoints, namespace = common.namespace, credentials = common.credentials,
  request_timeout = common.request_timeout, start_timeout = common.start_timeout, tls = common.tls,
  topics = { kind = "strings", default_doc = "none", doc = "topics announced to the proxy at start (optional); a transaction's topic must be one of them (the proxy sends its checks to the producers that announced it)" },
  checker = { kind = "function", default_doc = "none",
    doc = "`function(m)` answering the proxy's check of a half message left open: `\"commit\"`, `\"rollback\"` or `\"unknown\"` (ask again later); needed for `begin` ([transactions](api.md#transactions))" },
  max_inflight = { kind = "integer", default = 128, min = 1, max = 65536,
    doc = "sends in flight at once (SendMessage calls started and not yet answered), from `send_many` and every coroutine together; a send beyond it waits for a free slot ([sends in flight](api.md#sends-in-flight-send_many-and-coroutines))" },
}

_M.run = {
  concurrency = { kind = "integer", default = 64, min = 1, max = 100000, doc = "handlers running at once (coroutines); a message waiting to be tried again (an ordered retry in place, a policy's defer) holds none" },
  max_inflight = { kind = "integer", min = 1, max = 1000000, default_doc = "2 × `concurrency`",
    doc = "messages held at once, running or waiting for a handler; receiving pauses at it" },
  max_inflight_bytes = { kind = "integer", default = 64 * 1024 * 1024, min = 1, max = 2 ^ 40, unit = "bytes",
    doc = "bytes of message bodies held at once; receiving pauses at it, and a receive takes at most the bytes still allowed (always at least one message)" },
  nack_delay = { kind = "delay", default_doc = "the group's retry policy",
    doc = "seconds before a failed message comes back (an ordered one: is tried again), a number or `fn(attempt)`; by default the group's retry policy from the server's Settings (RocketMQ: 1 s, 5 s, 10 s, 30 s, 1 min, 2 min … 2 h), else `2^(attempt-1)` s capped at 60 ([retries](api.md#retries-and-dead-lettering))" },
  policy = { kind = "function", default_doc = "`mqlease.policy.plain`",
    doc = "`fn(m, lease, handler) -> \"ack\" | \"nack\" | \"defer\" | \"skip\" [, delay [, err [, after]]]` ([policies](api.md#policies))" },
  signals = { kind = "boolean", default = false,
    doc = "drain gracefully on SIGTERM and SIGINT: installs handlers, and a watcher that may `_exit` the process past `grace` (the `mqlease run` command sets it)" },
  grace = { kind = "number", default = 25, min = 0, max = 3600, unit = "s",
    doc = "seconds running handlers get to finish after a stop (under Kubernetes' 30)" },
  mode = { kind = "enum", values = { "wait", "nack" }, default = "wait",
    doc = "on stop: let running handlers finish until `grace` (`wait`) or give their messages back at once (`nack`); either way no handler starts after the stop" },
  run_for = { kind = "number", min = 0, max = 1e9, unit = "s", default_doc = "nil (until a signal or a stop)",
    doc = "stop by itself after this many seconds" },
  stop = { kind = "function", default_doc = "nil", doc = "`fn() -> true` to stop; checked every loop turn" },
  on_error = { kind = "function", default_doc = "a line on stderr", doc = "`fn(m, err)`: a handler failed" },
  max_attempts = { kind = "integer", min = 1, max = 1000, default_doc = "nil (the group's retry policy)",
    doc = "deliveries a message gets: a failure on the last one, or a later delivery, forwards it to `%DLQ%<group>` instead of running it again (counted `dead_lettered{reason=\"max_attempts\"}`); keep it below the group's own retry limit (16 retries by default). Ordered messages are retried in place up to it, or up to the group's limit when unset" },
}

-- The fields of a tls table and what each must be.
local TLS_FIELDS = {
  ca_file = "string", cert_file = "string", key_file = "string", server_name = "string", insecure = "boolean",
}

local function check_tls(v)
  if type(v) == "boolean" then return end
  if type(v) ~= "table" then return "true, false or a table {ca_file=, cert_file=, key_file=, server_name=, insecure=}" end
  for k, fv in pairs(v) do
    local want = TLS_FIELDS[k]
    if not want then
      return ("a table with only ca_file, cert_file, key_file, server_name, insecure (unknown field '%s')"):format(tostring(k))
    end
    if type(fv) ~= want or fv == "" or (want == "string" and fv:find("\0", 1, true)) then
      return ("a table whose field '%s' is a %s"):format(k, want == "string" and "non-empty string without a NUL byte" or want)
    end
  end
  if (v.cert_file == nil) ~= (v.key_file == nil) then
    return "a table with both cert_file and key_file, or neither"
  end
end

local function check_auto(v)
  if type(v) ~= "table" then return "a table {min=, max=, margin=, start=}" end
  for k, fv in pairs(v) do
    local f = AUTO_FIELDS[k]
    if not f then return ("a table with only min, max, margin, start (unknown field '%s')"):format(tostring(k)) end
    if type(fv) ~= "number" or fv ~= fv or fv < f.min or fv > f.max then
      return ("a table whose field '%s' is a number between %s and %s"):format(k, f.min, f.max)
    end
  end
  if (v.min or AUTO_FIELDS.min.default) > (v.max or AUTO_FIELDS.max.default) then
    return "a table whose 'min' is at most its 'max'"
  end
end

-- "host:port;host:port" checked entry by entry and joined again without
-- blanks, or nil when an entry is not host:port.
local function endpoint_list(endpoints)
  if type(endpoints) ~= "string" then return nil end
  local out = {}
  for entry in (endpoints .. ";"):gmatch("([^;]*);") do
    entry = entry:match("^%s*(.-)%s*$")
    local port = tonumber(entry:match("^[^:%s][^%s]*:(%d+)$") or "")
    if not port or port < 1 or port > 65535 then return nil end
    -- the core reads the list as a C string, which ends at a NUL
    if entry:find("\0", 1, true) then return nil end
    out[#out + 1] = entry
  end
  return concat(out, ";")
end

-- What v must be when it is not a valid value of spec, else nil.
-- Whether t's keys are exactly 1 .. #t: no hole and no named field. The
-- border alone cannot tell: {a, nil, c} has # 3 under Lua 5.4 and 1 under
-- LuaJIT, and ipairs stops at the hole under both. What the core reads as
-- an array (#t entries) and what Lua code walks (pairs, ipairs) then agree.
function _M.is_array(t)
  local n, count = #t, 0
  for _ in pairs(t) do
    count = count + 1
    if count > n then return false end
  end
  return count == n
end

local function expected(spec, v)
  local kind = spec.kind
  if kind == "string" then
    if type(v) ~= "string" or v == "" then return "a non-empty string" end
    -- the core copies it as a C string, which ends at a NUL: a filter "TagA\0x"
    -- subscribed to "TagA", and "\0TagA" to every tag (an empty filter is "*")
    if v:find("\0", 1, true) then return "a string without a NUL byte" end
  elseif kind == "endpoints" then
    if not endpoint_list(v) then return "host:port, or several joined by ';'" end
  elseif kind == "name" then
    if type(v) ~= "string" or not v:match(NAME_PATTERN) or #v > spec.max_len then
      return ("a name of letters, digits, '%%', '|', '_' or '-' (at most %d characters)"):format(spec.max_len)
    end
  elseif kind == "number" or kind == "integer" then
    if type(v) ~= "number" or v ~= v then return "a number" end
    if kind == "integer" and not is_integer(v) then return "an integer" end
    if (spec.min and v < spec.min) or (spec.max and v > spec.max) then
      return ("a number between %s and %s"):format(spec.min, spec.max)
    end
  elseif kind == "boolean" then
    if type(v) ~= "boolean" then return "a boolean" end
  elseif kind == "table" then
    if type(v) ~= "table" then return "a table" end
  elseif kind == "enum" then
    for _, allowed in ipairs(spec.values) do
      if v == allowed then return end
    end
    return "one of \"" .. concat(spec.values, "\", \"") .. "\""
  elseif kind == "function" then
    if type(v) ~= "function" and not (type(v) == "table" and getmetatable(v) and getmetatable(v).__call) then
      return "a function"
    end
  elseif kind == "delay" then
    if not (type(v) == "function" or (type(v) == "number" and v >= 0 and v <= MAX_INVISIBLE)) then
      return "a number of seconds (0 to 43200) or a function(attempt)"
    end
  elseif kind == "tls" then
    return check_tls(v)
  elseif kind == "invisible" then
    if v ~= "auto" and (type(v) ~= "number" or v ~= v or v < spec.min or v > spec.max) then
      return ("a number between %s and %s, or \"auto\""):format(spec.min, spec.max)
    end
  elseif kind == "auto_invisible" then
    return check_auto(v)
  elseif kind == "strings" then
    if type(v) ~= "table" then return "an array of strings" end
    -- every key an index 1 .. #v: the core reads the array part (#v), and a
    -- producer's begin read every value (a topic past a hole was allowed,
    -- and never announced to the proxy, which sends its checks to those
    -- that announced it; a hole before #v reached the core as nil)
    if not _M.is_array(v) then return "an array of strings" end
    for i = 1, #v do
      local s = v[i]
      if type(s) ~= "string" or s == "" then return "an array of strings" end
      if s:find("\0", 1, true) then return "an array of strings without a NUL byte" end
    end
  end
end

-- The one message for a bad value of an option, whoever reports it: the
-- library after "mqlease.consumer: ", the command after the flag or variable
-- the value came from. nil when v is a valid value of option name in specs.
function _M.problem(specs, name, v)
  local spec = specs[name]
  if not spec then error("mqlease.config: no option '" .. tostring(name) .. "'", 2) end
  local want = expected(spec, v)
  if want then return ("option '%s' must be %s (got %s)"):format(name, want, describe(v)) end
end

local function known_names(specs)
  local names = {}
  for k in pairs(specs) do names[#names + 1] = k end
  sort(names)
  return concat(names, ", ")
end

-- Validates opts against specs; returns a new table with defaults filled in.
-- where names the constructor in errors ("mqlease.consumer"). Errors point at
-- the user's call: user -> new -> *_options -> check.
function _M.check(where, specs, opts)
  if type(opts) ~= "table" then
    error(("%s: options table expected, got %s"):format(where, type(opts)), 4)
  end
  local out = {}
  for k, v in pairs(opts) do
    local spec = specs[k]
    if not spec then
      error(("%s: unknown option '%s' (known: %s)"):format(where, tostring(k), known_names(specs)), 4)
    end
    local want = expected(spec, v)
    if want then
      error(("%s: option '%s' must be %s (got %s)"):format(where, k, want, describe(v)), 4)
    end
    out[k] = v
  end
  for k, spec in pairs(specs) do
    if out[k] == nil then
      if spec.required then error(("%s: option '%s' is required"):format(where, k), 4) end
      out[k] = spec.default
    end
  end
  return out
end

-- Levels count from the user's call: user -> new -> *_options -> here.
local function relation_error(where, msg)
  error(where .. ": " .. msg, 4)
end

function _M.consumer_options(opts)
  local where = "mqlease.consumer"
  local o = _M.check(where, _M.consumer, opts)
  -- with "auto" the smallest and largest value stand in for invisible
  local shortest, longest, what = o.invisible, o.invisible, "'invisible'"
  if o.invisible == "auto" then
    local a = {}
    for k, f in pairs(AUTO_FIELDS) do a[k] = (o.auto_invisible or {})[k] or f.default end
    o.auto_invisible = a
    shortest, longest = a.min, a.max
  elseif o.auto_invisible then
    relation_error(where, ("option 'auto_invisible' needs 'invisible' = \"auto\" (got %s)"):format(describe(o.invisible)))
  end
  -- compared in the whole milliseconds the core keeps (consumer.lua floors
  -- both): 1.0001 s and 1.0005 s are one period as long as the window
  if o.renew_every and floor(o.renew_every * 1000) >= floor(shortest * 1000) then
    if o.invisible == "auto" then what = "'auto_invisible.min'" end
    relation_error(where, ("option 'renew_every' (%s) must be less than %s (%s)"):format(o.renew_every, what, shortest))
  end
  if o.max_lease < longest then
    if o.invisible == "auto" then what = "'auto_invisible.max'" end
    relation_error(where, ("option 'max_lease' (%s) must be at least %s (%s)"):format(o.max_lease, what, longest))
  end
  if o.credentials then
    local cr = o.credentials
    if type(cr.access_key) ~= "string" or type(cr.secret_key) ~= "string" then
      relation_error(where, "option 'credentials' needs string fields access_key and secret_key")
    end
  end
  return o
end

function _M.producer_options(opts)
  local where = "mqlease.producer"
  return _M.check(where, _M.producer, opts)
end

function _M.run_options(opts)
  local o = _M.check("mqlease.run", _M.run, opts or {})
  o.max_inflight = o.max_inflight or 2 * o.concurrency
  if o.max_inflight < o.concurrency then
    relation_error("mqlease.run", ("option 'max_inflight' (%d) must be at least 'concurrency' (%d)"):format(o.max_inflight, o.concurrency))
  end
  return o
end

local function read_file(where, field, path)
  local f, err = io.open(path, "rb")
  local text = f and f:read("a")
  if f then f:close() end
  if not text or text == "" then
    -- level 5: read_file <- tls_core <- client_core <- consumer/producer.new <- the caller
    error(("%s: option 'tls.%s' cannot be read: %s"):format(where, field, err or (path .. ": empty or unreadable")), 5)
  end
  return text
end

-- The core's TLS fields for a checked tls option: the files are read here,
-- so a missing or unreadable one raises naming its field. The PEM text goes
-- to the core only, never into the options a consumer keeps.
local function tls_core(where, tls)
  if not tls then return { tls = false } end
  if tls == true then return { tls = true } end
  return {
    tls = true,
    tls_insecure = tls.insecure or false,
    tls_ca_pem = tls.ca_file and read_file(where, "ca_file", tls.ca_file),
    tls_cert_pem = tls.cert_file and read_file(where, "cert_file", tls.cert_file),
    tls_key_pem = tls.key_file and read_file(where, "key_file", tls.key_file),
    tls_server_name = tls.server_name,
  }
end
_M.tls_core = tls_core

-- Checked options as a consumer or producer keeps them (its .options, which
-- every message reaches through m.consumer): the credentials without the
-- secret key and the security token, which only the core keeps once
-- client_core handed them over. The caller's own table is left as it was.
function _M.kept(o)
  local cr = o.credentials
  if cr then o.credentials = { access_key = cr.access_key } end
  return o
end

-- The fields of core.consumer{} and core.producer{} that both share, from
-- checked options: where to connect, how to sign, how to encrypt, how long
-- a call may take. The caller adds its own.
function _M.client_core(where, o)
  local cr = o.credentials or {}
  local t = tls_core(where, o.tls)
  return {
    endpoint = _M.endpoint_list(o.endpoints),
    namespace = o.namespace,
    access_key = cr.access_key, secret_key = cr.secret_key, security_token = cr.security_token,
    tls = t.tls, tls_insecure = t.tls_insecure, tls_ca_pem = t.tls_ca_pem,
    tls_cert_pem = t.tls_cert_pem, tls_key_pem = t.tls_key_pem, tls_server_name = t.tls_server_name,
    request_timeout_ms = floor(o.request_timeout * 1000),
  }
end

-- "host:port;host:port" checked entry by entry, joined again without blanks.
-- The core tries them in order at start (see README, several endpoints).
function _M.endpoint_list(endpoints)
  local list = endpoint_list(endpoints)
  if not list then
    error(("mqlease: option 'endpoints' must be host:port, or several joined by ';' (got %s)"):format(describe(endpoints)), 3)
  end
  return list
end

-- Bounds for send's options: the proxy's default max message group length
-- (ProxyConfig.maxMessageGroupSize, 64), and values whose milliseconds fit an
-- int64 with room to spare (the proxy itself refuses a delivery time past
-- ProxyConfig.maxDelayTimeMills, one day by default, as ILLEGAL_DELIVERY_TIME).
local MAX_MESSAGE_GROUP = 64
local MAX_DELAY_SECONDS = 10 * 365 * 86400
local MAX_EPOCH_SECONDS = 1e11

-- The send options, as the command line shares them (the message's part; the
-- routing part, topic, is a name as in the consumer options).
_M.SEND_OPTIONS = { "delay", "deliver_at", "keys", "lite_topic", "message_group", "priority", "properties", "tag",
  "trace_context" }

-- SystemProperties.priority is an int32 (apache/rocketmq-apis 2.1.x); the broker maps
-- priority n to queue min(n, queues - 1) of a PRIORITY topic (SendMessageProcessor, 5.4+).
local MAX_PRIORITY = 2147483647
-- ProxyConfig.maxLiteTopicSize's default (5.5.0): the proxy refuses a longer lite topic
local MAX_LITE_TOPIC = 64

-- The core hands the tag, the keys, the message group and the property names
-- to protobuf-c as C strings, which end at a NUL: "vip\0x" would go out as the
-- tag "vip" (the proxy refuses control characters there, but never sees it).
local function has_nul(s)
  return s:find("\0", 1, true) ~= nil
end

-- The message for a bad value of send option k, or nil: "option 'k' must be ...".
function _M.send_problem(k, v)
  if k == "tag" then
    if type(v) ~= "string" or v:find("|", 1, true) or not v:match("%S") then
      return ("option 'tag' must be a non-blank string without '|' (got %s)"):format(describe(v))
    elseif has_nul(v) then
      return ("option 'tag' must be a string without a NUL byte (got %s)"):format(describe(v))
    end
  elseif k == "keys" then
    if type(v) == "string" then v = { v } end
    if type(v) ~= "table" then
      return "option 'keys' must be a string or an array of strings"
    end
    -- every index up to #v: the core reads #v keys, and a hole would reach it as NULL
    for i = 1, #v do
      local key = v[i]
      if type(key) ~= "string" or not key:match("%S") then
        return ("option 'keys' must hold non-blank strings (got %s)"):format(describe(key))
      end
      -- RocketMQ joins a message's keys with a space (MessageConst.KEY_SEPARATOR):
      -- "a b" would reach every other client as the two keys "a" and "b"
      if key:find("%s") then
        return ("option 'keys' must hold keys without whitespace (RocketMQ joins keys with a space; got %s)")
          :format(describe(key))
      elseif has_nul(key) then
        return ("option 'keys' must hold keys without a NUL byte (got %s)"):format(describe(key))
      end
    end
  elseif k == "properties" then
    if type(v) ~= "table" then return "option 'properties' must be a table of strings" end
    for pk, pv in pairs(v) do
      if type(pk) ~= "string" or type(pv) ~= "string" then
        return ("option 'properties' must map strings to strings (bad entry %s)"):format(describe(pk))
      elseif has_nul(pk) then
        return ("option 'properties' must map names without a NUL byte to strings (bad entry %s)"):format(describe(pk))
      end
    end
  elseif k == "message_group" then
    if type(v) ~= "string" or not v:match("%S") or #v > MAX_MESSAGE_GROUP then
      return ("option 'message_group' must be a non-blank string of at most %d bytes (got %s)")
        :format(MAX_MESSAGE_GROUP, describe(v))
    elseif has_nul(v) then
      return ("option 'message_group' must be a string without a NUL byte (got %s)"):format(describe(v))
    end
  elseif k == "delay" then
    if type(v) ~= "number" or v ~= v or v <= 0 or v > MAX_DELAY_SECONDS then
      return ("option 'delay' must be seconds, more than 0 and at most %d (got %s)")
        :format(MAX_DELAY_SECONDS, describe(v))
    end
  elseif k == "deliver_at" then
    if type(v) ~= "number" or v ~= v or v <= 0 or v > MAX_EPOCH_SECONDS then
      return ("option 'deliver_at' must be epoch seconds, a positive number (got %s)"):format(describe(v))
    end
  elseif k == "priority" then
    if not is_integer(v) or v < 0 or v > MAX_PRIORITY then
      return ("option 'priority' must be an integer from 0 to %d, higher first (got %s)")
        :format(MAX_PRIORITY, describe(v))
    end
  elseif k == "lite_topic" then
    if type(v) ~= "string" or not v:match(NAME_PATTERN) or #v > MAX_LITE_TOPIC then
      return ("option 'lite_topic' must be a topic name of at most %d characters (got %s)")
        :format(MAX_LITE_TOPIC, describe(v))
    end
  elseif k == "trace_context" then
    local ok, why = trace.parse(v)
    if not ok then
      return ("option 'trace_context' must be a W3C traceparent, 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<flags: 2 hex>: %s (got %s)")
        :format(why, describe(v))
    end
  elseif k == "timeout" then
    -- once listed as known and taken by nothing: a deadline given here was
    -- silently not kept
    return "option 'timeout' is not one of a send: the producer's option 'request_timeout' is each send's deadline"
  else
    return ("unknown option '%s' (known: %s)"):format(tostring(k), concat(_M.SEND_OPTIONS, ", "))
  end
end

-- The message for bad send options opts, or nil. skip: a key to pass over
-- (send_many's entries carry their body beside the options).
function _M.send_options_problem(opts, skip)
  for k, v in pairs(opts) do
    if k ~= skip then
      local problem = _M.send_problem(k, v)
      if problem then return problem end
    end
  end
  -- a message is FIFO or DELAY, not both (the official clients' MessageBuilder refuses it too)
  local timed = opts.delay ~= nil and "delay" or opts.deliver_at ~= nil and "deliver_at" or nil
  if opts.delay ~= nil and opts.deliver_at ~= nil then
    return "options 'delay' and 'deliver_at' exclude each other"
  elseif timed and opts.message_group ~= nil then
    return ("options 'message_group' and '%s' exclude each other"):format(timed)
  end
  -- a PRIORITY message is neither (the broker's TopicMessageType.parseFromMessageProperty
  -- takes a delay or a group first and then drops the priority)
  local other = timed or opts.message_group ~= nil and "message_group" or nil
  if opts.priority ~= nil and other then
    return ("options 'priority' and '%s' exclude each other"):format(other)
  end
  -- a LITE topic takes plain messages only (TopicMessageType LITE)
  other = other or opts.priority ~= nil and "priority" or nil
  if opts.lite_topic ~= nil and other then
    return ("options 'lite_topic' and '%s' exclude each other"):format(other)
  end
end

local function check_topic(topic, fn)
  if type(topic) ~= "string" or not topic:match(NAME_PATTERN) then
    error(("bad argument #1 to '%s' (topic: a topic name expected, got %s)"):format(fn, describe(topic)), 4)
  end
end

-- Checks the arguments of producer:send; raises naming the bad one.
function _M.check_send(topic, body, opts)
  check_topic(topic, "send")
  if type(body) ~= "string" then
    error(("bad argument #2 to 'send' (body: string expected, got %s)"):format(type(body)), 3)
  end
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error(("bad argument #3 to 'send' (options table expected, got %s)"):format(type(opts)), 3)
  end
  local problem = _M.send_options_problem(opts)
  if problem then error("mqlease.send: " .. problem, 3) end
  return opts
end

-- Checks the arguments of producer:recall; raises naming the bad one.
function _M.check_recall(topic, handle)
  check_topic(topic, "recall")
  if type(handle) ~= "string" or not handle:match("%S") then
    error(("bad argument #2 to 'recall' (recall handle: a non-blank string expected, got %s)"):format(describe(handle)), 3)
  end
end

-- The options of producer:begin: send's, without those that make another
-- message type (a half message is TRANSACTION, as the official clients'
-- MessageBuilder refuses a group or a delivery time on it), plus recovery.
local NOT_IN_TRANSACTION = { message_group = "FIFO", delay = "DELAY", deliver_at = "DELAY" }
local MAX_RECOVERY_SECONDS = 86400 * 30
_M.BEGIN_OPTIONS = { "keys", "properties", "recovery", "tag", "trace_context" }
local IN_BEGIN = {}
for _, k in ipairs(_M.BEGIN_OPTIONS) do IN_BEGIN[k] = true end

-- Checks the arguments of producer:begin; raises naming the bad one.
-- Returns opts (a table) and recovery in seconds or nil.
function _M.check_begin(topic, body, opts)
  check_topic(topic, "begin")
  if type(body) ~= "string" then
    error(("bad argument #2 to 'begin' (body: string expected, got %s)"):format(type(body)), 3)
  end
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error(("bad argument #3 to 'begin' (options table expected, got %s)"):format(type(opts)), 3)
  end
  local rest = {}
  for k, v in pairs(opts) do
    if NOT_IN_TRANSACTION[k] then
      error(("mqlease.begin: option '%s' makes a %s message; a transaction's message is TRANSACTION"):format(k, NOT_IN_TRANSACTION[k]), 3)
    elseif not IN_BEGIN[k] and k ~= "timeout" then
      error(("mqlease.begin: unknown option '%s' (known: %s)"):format(tostring(k), concat(_M.BEGIN_OPTIONS, ", ")), 3)
    elseif k == "recovery" then
      if type(v) ~= "number" or v ~= v or v < 1 or v > MAX_RECOVERY_SECONDS or not is_integer(v) then
        error(("mqlease.begin: option 'recovery' must be whole seconds between 1 and %d (got %s)"):format(MAX_RECOVERY_SECONDS, describe(v)), 3)
      end
    else
      rest[k] = v
    end
  end
  local problem = _M.send_options_problem(rest)
  if problem then error("mqlease.begin: " .. problem, 3) end
  return opts
end

-- Checks the arguments of producer:send_many before anything is sent: a
-- topic and an array of messages, each a body string or a table { body =,
-- and send's options }. Raises naming the first bad message by its index.
function _M.check_send_many(topic, list)
  check_topic(topic, "send_many")
  if type(list) ~= "table" then
    error(("bad argument #2 to 'send_many' (array of messages expected, got %s)"):format(type(list)), 3)
  end
  for i = 1, #list do
    local m = list[i]
    if type(m) == "table" then
      if type(m.body) ~= "string" then
        error(("mqlease.send_many: message %d: field 'body' must be a string (got %s)"):format(i, describe(m.body)), 3)
      end
      local problem = _M.send_options_problem(m, "body")
      if problem then error(("mqlease.send_many: message %d: %s"):format(i, problem), 3) end
    elseif type(m) ~= "string" then
      error(("mqlease.send_many: message %d must be a body string or a table {body=, ...} (got %s)")
        :format(i, describe(m)), 3)
    end
  end
  return list
end

return _M

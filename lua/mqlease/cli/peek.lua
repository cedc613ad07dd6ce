-- mqlease.cli.peek: `mqlease peek --topic T --group G [-n 10]` -- receives up
-- to n messages, prints one line each, and gives every one back (nack, no
-- delay) before it exits: the messages are delivered again, their delivery
-- attempt one higher. They are held (and renewed) until the end of the peek,
-- so one peek never shows a message twice.

local mqlease = require "mqlease"
local options = require "mqlease.cli.options"
local escape = require("mqlease.text").escape

local tostring, pairs, ipairs, next, math_min = tostring, pairs, ipairs, next, math.min
local concat, sort = table.concat, table.sort
local EXIT = options.EXIT

local _M = {}

local PREVIEW = 64   -- bytes of body shown

function _M.preview(body)
  if #body <= PREVIEW then return '"' .. escape(body) .. '"' end
  return ('"%s"... (%d bytes)'):format(escape(body:sub(1, PREVIEW)), #body)
end

-- One line per message: id, attempt, type, tag, keys, properties, body
-- preview, each escaped (the producer chose every one of them, the id too).
function _M.format(m)
  local props = {}
  for k, v in pairs(m.properties or {}) do props[#props + 1] = escape(k) .. "=" .. escape(v) end
  sort(props)
  local keys = {}
  for i, k in ipairs(m.keys or {}) do keys[i] = escape(k) end
  return ("%s\tattempt=%d\ttype=%s\ttag=%s\tkeys=%s\tprops=%s\tbody=%s"):format(escape(m.id), m.delivery_attempt or 0,
    m.message_type and escape(m.message_type) or "-", m.tag and escape(m.tag) or "-", #keys > 0 and concat(keys, ",") or "-",
    #props > 0 and concat(props, ",") or "-", _M.preview(m.body))
end

-- One --json line: every field of m:totable(). Empty keys and properties are
-- left out (a plain cjson cannot tell an empty array from an empty object);
-- a cjson with empty_array (OpenResty's) writes [] for no keys.
function _M.json_line(json, m)
  local t = m:totable()
  if #t.keys == 0 then t.keys = json.empty_array end
  if next(t.properties) == nil then t.properties = nil end
  return (json.encode(t))
end

function _M.main(opts)
  local json, jerr
  if opts.json then
    json, jerr = options.json()
    if not json then
      io.stderr:write("mqlease peek: ", jerr, "\n")
      return EXIT.failure
    end
  end
  local line = json and function(m) return _M.json_line(json, m) end or _M.format
  local consumer, err, code = mqlease.consumer {
    endpoints = opts.endpoints, namespace = opts.namespace, group = opts.group, topic = opts.topic,
    tls = opts.tls, credentials = opts.credentials,
    invisible = 10,   -- the proxy's least by default: if we die, they come back soon
  }
  if not consumer then
    io.stderr:write(("mqlease peek: cannot start the consumer: %s (%s)\n"):format(tostring(err), tostring(code)))
    return EXIT.failure
  end
  local held, seen, status = {}, {}, EXIT.ok
  local deadline = mqlease.now() + opts.wait
  while #held < opts.count do
    local left = deadline - mqlease.now()
    if left < 0 then left = 0 end
    local msgs
    msgs, err, code = consumer:receive(math_min(32, opts.count - #held), { await = left })
    if not msgs then
      io.stderr:write(("mqlease peek: receive failed: %s (%s)\n"):format(tostring(err), tostring(code)))
      status = EXIT.failure
      break
    end
    for _, m in ipairs(msgs) do
      held[#held + 1] = m
      if not seen[m.id] then
        seen[m.id] = true
        io.stdout:write(line(m), "\n")
      end
    end
    io.stdout:flush()
    if #msgs == 0 or left == 0 then break end   -- the long poll ran out
  end
  for _, m in ipairs(held) do
    local ok
    ok, err, code = m:nack(0)
    if not ok then
      io.stderr:write(("mqlease peek: could not give %s back: %s (%s)\n"):format(escape(m.id), tostring(err), tostring(code)))
      status = EXIT.failure
    end
  end
  consumer:close()
  return status
end

return _M

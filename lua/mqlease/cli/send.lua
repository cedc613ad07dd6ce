-- mqlease.cli.send: `mqlease send --topic T [BODY | --file F | -]` -- sends
-- one message, or one per line of stdin, and prints each message id on stdout.
-- A progress line goes to stderr every few seconds of a long send, a summary
-- line at the end (--quiet: neither). It stops at the first failure, so every
-- id printed was sent and nothing after it was.

local mqlease = require "mqlease"
local options = require "mqlease.cli.options"

local tostring, ipairs = tostring, ipairs
local EXIT = options.EXIT

local _M = {}

-- An iterator over the bodies to send, or nil, message.
function _M.bodies(opts, stdin)
  if opts.file then
    local f, err = io.open(opts.file, "rb")
    if not f then return nil, "option '--file': " .. tostring(err) end
    local body = f:read("a")
    f:close()
    local done = false
    return function()
      if done then return nil end
      done = true
      return body
    end
  end
  if opts.body ~= nil and opts.body ~= "-" then
    local done = false
    return function()
      if done then return nil end
      done = true
      return opts.body
    end
  end
  stdin = stdin or io.stdin
  return function()
    for line in stdin:lines() do
      if line ~= "" then return line end
    end
  end
end

-- A progress reporter: step(n) at each message, a line every `every` seconds
-- (0: never); finish(n) at the end.
local function progress(quiet, every, out)
  local started = mqlease.now()
  local next_at = started + every
  local r = {}
  function r.step(n)
    if quiet or every == 0 then return end
    local now = mqlease.now()
    if now >= next_at then
      next_at = now + every
      out:write(("mqlease send: %d sent (%.0f/s)\n"):format(n, n / (now - started)))
    end
  end
  function r.finish(n, topic, failed)
    if quiet then return end
    out:write(("mqlease send: %d sent to %s in %.1f s%s\n"):format(n, topic, mqlease.now() - started,
      failed and ", stopped at the first failure" or ""))
  end
  return r
end

function _M.main(opts)
  local bodies, err = _M.bodies(opts)
  if not bodies then
    io.stderr:write("mqlease send: ", err, "\n")
    return EXIT.usage
  end
  local send_opts = { tag = opts.tag, message_group = opts["message-group"], delay = opts.delay }
  if #opts.key > 0 then send_opts.keys = opts.key end
  if #opts.prop > 0 then
    send_opts.properties = {}
    for _, kv in ipairs(opts.prop) do send_opts.properties[kv[1]] = kv[2] end
  end

  local producer, code
  producer, err, code = mqlease.producer { endpoints = opts.endpoints, namespace = opts.namespace }
  if not producer then
    io.stderr:write(("mqlease send: cannot start the producer: %s (%s)\n"):format(tostring(err), tostring(code)))
    return EXIT.failure
  end
  local report = progress(opts.quiet, opts.progress, io.stderr)
  local n, failed = 0, false
  for body in bodies do
    local id
    id, err, code = producer:send(opts.topic, body, send_opts)
    if not id then
      io.stderr:write(("mqlease send: message %d not sent: %s (%s)\n"):format(n + 1, tostring(err), tostring(code)))
      failed = true
      break
    end
    n = n + 1
    io.stdout:write(id, "\n")
    io.stdout:flush()
    report.step(n)
  end
  producer:close()
  report.finish(n, opts.topic, failed)
  return failed and EXIT.failure or EXIT.ok
end

return _M

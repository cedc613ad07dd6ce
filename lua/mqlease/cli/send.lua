-- mqlease.cli.send: `mqlease send --topic T [BODY | --file F | -]` -- sends
-- one message, or one per line of stdin, and prints each message id on stdout.
-- A progress line goes to stderr every few seconds of a long send, a summary
-- line at the end (--quiet: neither). It stops at the first failure, so every
-- id printed was sent and nothing after it was. --transaction sends each
-- message as a transaction and commits it, rolls it back, or (check) leaves
-- it open and answers the broker's check of it with commit.

local mqlease = require "mqlease"
local config = require "mqlease.config"
local options = require "mqlease.cli.options"

local tostring, ipairs, pairs, type = tostring, ipairs, pairs, type
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

-- The fields of a --json line, and the send option each one is.
local JSON_FIELDS = { body = true, tag = "tag", keys = "keys", properties = "properties",
  message_group = "message_group", delay = "delay", priority = "priority", trace_context = "trace_context" }

-- One --json line as body, send options (the flags' own, overridden by the
-- object's fields), checked by mqlease.config; or nil, message.
function _M.decode(json, text, defaults)
  local obj, err = json.decode(text)
  if type(obj) ~= "table" then return nil, "not a JSON object" .. (err and (": " .. err) or "") end
  local send_opts = {}
  for k, v in pairs(defaults) do send_opts[k] = v end
  for k, v in pairs(obj) do
    local field = JSON_FIELDS[k]
    if not field then
      return nil, ("unknown field '%s' (known: body, delay, keys, message_group, priority, properties, tag, trace_context)"):format(tostring(k))
    end
    if field ~= true then
      local problem = config.send_problem(field, v)
      if problem then return nil, problem end
      send_opts[field] = v
    end
  end
  if type(obj.body) ~= "string" then return nil, "field 'body' must be a string" end
  local problem = config.send_options_problem(send_opts)
  if problem then return nil, problem end
  return obj.body, send_opts
end

function _M.main(opts)
  local json, err
  if opts.json then
    json, err = options.json()
    if not json then
      io.stderr:write("mqlease send: ", err, "\n")
      return EXIT.failure
    end
  end
  local bodies
  bodies, err = _M.bodies(opts)
  if not bodies then
    io.stderr:write("mqlease send: ", err, "\n")
    return EXIT.usage
  end
  local send_opts = { tag = opts.tag, message_group = opts["message-group"], delay = opts.delay,
    priority = opts.priority, trace_context = opts["trace-context"] }
  if #opts.key > 0 then send_opts.keys = opts.key end
  if #opts.prop > 0 then
    send_opts.properties = {}
    for _, kv in ipairs(opts.prop) do send_opts.properties[kv[1]] = kv[2] end
  end

  local mode = opts.transaction
  local open_ids, waiting = {}, 0   -- --transaction check: the ids not asked about yet
  local checker
  if mode then
    checker = function(m)
      if open_ids[m.id] then
        open_ids[m.id] = nil
        waiting = waiting - 1
        if not opts.quiet then io.stderr:write(("mqlease send: the broker checked %s: commit\n"):format(m.id)) end
        return "commit"
      end
      return "unknown"   -- another producer's, or an earlier run's: not ours to decide
    end
  end

  local producer, code
  producer, err, code = mqlease.producer { endpoints = opts.endpoints, namespace = opts.namespace,
    tls = opts.tls, credentials = opts.credentials, topics = mode and { opts.topic } or nil, checker = checker }
  if not producer then
    io.stderr:write(("mqlease send: cannot start the producer: %s (%s)\n"):format(tostring(err), tostring(code)))
    return EXIT.failure
  end
  local report = progress(opts.quiet, opts.progress, io.stderr)
  local n, failed, status = 0, false, EXIT.ok
  for text in bodies do
    local body, this_opts = text, send_opts
    if json then
      body, this_opts = _M.decode(json, text, send_opts)
      if not body then
        io.stderr:write(("mqlease send: message %d: %s\n"):format(n + 1, this_opts))
        failed, status = true, EXIT.usage
        break
      end
    end
    -- on success id, offset and (a delay message on 5.3.2+) its recall handle;
    -- on failure nil, message, code
    local id, offset, handle
    if mode and (this_opts.message_group or this_opts.delay or this_opts.priority) then
      io.stderr:write(("mqlease send: message %d: option '--transaction' makes TRANSACTION messages: no %s\n")
        :format(n + 1, this_opts.message_group and "message_group" or this_opts.delay and "delay" or "priority"))
      failed, status = true, EXIT.usage
      break
    end
    if mode then
      id, offset, handle = _M.transact(producer, mode, opts.topic, body, this_opts)
      if id and mode == "check" then
        open_ids[id] = true
        waiting = waiting + 1
      end
    else
      id, offset, handle = producer:send(opts.topic, body, this_opts)
    end
    if not id then
      io.stderr:write(("mqlease send: message %d not sent: %s (%s)\n"):format(n + 1, tostring(offset), tostring(handle)))
      failed, status = true, EXIT.failure
      break
    end
    n = n + 1
    if json then
      io.stdout:write(json.encode({ id = id, offset = offset, recall_handle = handle }), "\n")
    else
      io.stdout:write(id, handle and ("\t" .. handle) or "", "\n")
    end
    io.stdout:flush()
    report.step(n)
  end
  if mode == "check" and waiting > 0 then
    -- the broker asks after its transactionTimeOut, then every transactionCheckInterval
    local deadline = mqlease.now() + opts["check-timeout"]
    while waiting > 0 and mqlease.now() < deadline do producer:poll(1) end
    if waiting > 0 then
      io.stderr:write(("mqlease send: %d message(s) not checked within %s s: the broker will ask again\n")
        :format(waiting, opts["check-timeout"]))
      status = EXIT.failure
    end
  end
  producer:close()
  report.finish(n, opts.topic, failed)
  return status
end

-- One message as a transaction: begin, then commit or roll back (mode
-- "commit", "rollback"), or leave it open ("check"). Returns the message id
-- and its offset, or nil, message, code.
function _M.transact(producer, mode, topic, body, send_opts)
  local tx, err, code = producer:begin(topic, body, send_opts)
  if not tx then return nil, err, code end
  if mode ~= "check" then
    local ok
    if mode == "commit" then ok, err, code = tx:commit() else ok, err, code = tx:rollback() end
    if not ok then return nil, ("%s of %s failed: %s"):format(mode, tx.message_id, tostring(err)), code end
  end
  return tx.message_id, tx.offset
end

return _M

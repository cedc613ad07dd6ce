-- mqlease.cli.recall: `mqlease recall --topic T HANDLE` -- takes back a delay
-- message before it is delivered (RecallMessage, RocketMQ 5.3.2+) by the recall
-- handle `mqlease send` printed for it, and prints the message id.

local mqlease = require "mqlease"
local options = require "mqlease.cli.options"

local tostring = tostring
local EXIT = options.EXIT

local _M = {}

function _M.main(opts)
  local producer, err, code = mqlease.producer { endpoints = opts.endpoints, namespace = opts.namespace,
    tls = opts.tls, credentials = opts.credentials }
  if not producer then
    io.stderr:write(("mqlease recall: cannot start the producer: %s (%s)\n"):format(tostring(err), tostring(code)))
    return EXIT.failure
  end
  local id
  id, err, code = producer:recall(opts.topic, opts.handle)
  producer:close()
  if not id then
    io.stderr:write(("mqlease recall: not recalled: %s (%s)\n"):format(tostring(err), tostring(code)))
    return EXIT.failure
  end
  io.stdout:write(id, "\n")
  return EXIT.ok
end

return _M

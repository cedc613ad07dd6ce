-- mqlease.cli.http: the smallest HTTP server that serves GET /metrics from
-- inside mqlease's own scheduler, without ever blocking it.
--
--   local server = assert(http.listen("127.0.0.1", 9464, function() return text end))
--   server:serve(scheduler)   -- one task accepts, one task per connection
--   server:close()
--
-- The listening socket (LuaSocket) is non-blocking and waited for with
-- mqlease.loop like every descriptor of the core, so a scrape is answered
-- between two handler steps and a slow client only holds its own task.
-- One request per connection (Connection: close); anything but GET or HEAD
-- /metrics gets 404 or 405.

local socket = require "socket"
local core = require "mqlease.core"
local wait = require "mqlease.loop"

local setmetatable, tonumber, tostring, pcall = setmetatable, tonumber, tostring, pcall
local format = string.format

local _M = {}
local methods = {}
local mt = { __index = methods, __name = "mqlease.cli.http" }

local READ_TIMEOUT = 5      -- seconds a client gets to send its request
local MAX_REQUEST = 8192    -- bytes of request head we read at most

-- Binds host:port (port 0: any free port, see server.port). body() returns the
-- text of /metrics. Returns the server, or nil, message.
function _M.listen(host, port, body)
  local sock, err = socket.bind(host, port)
  if not sock then return nil, ("cannot listen on %s:%s: %s"):format(host, port, tostring(err)) end
  sock:settimeout(0)
  local _, bound = sock:getsockname()
  return setmetatable({ sock = sock, host = host, port = tonumber(bound), body = body, closed = false }, mt)
end

local function response(status, content_type, body, head_only)
  return format("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
    status, content_type, #body, head_only and "" or body)
end

-- The answer to one request head.
function methods:answer(head)
  local method, path = head:match("^(%u+) (%S+) HTTP/1%.%d\r?\n")
  if not method then
    return response("400 Bad Request", "text/plain", "bad request\n")
  end
  if method ~= "GET" and method ~= "HEAD" then
    return response("405 Method Not Allowed", "text/plain", "only GET\n")
  end
  if path:match("^[^?]*") ~= "/metrics" then
    return response("404 Not Found", "text/plain", "not found: try /metrics\n", method == "HEAD")
  end
  local ok, text = pcall(self.body)
  if not ok then
    return response("500 Internal Server Error", "text/plain", tostring(text) .. "\n")
  end
  return response("200 OK", "text/plain; version=0.0.4; charset=utf-8", text, method == "HEAD")
end

-- One connection: read the request head (waiting in the scheduler), answer, close.
function methods:handle(client)
  client:settimeout(0)
  local deadline = core.now() + READ_TIMEOUT
  local head = ""
  while true do
    local data, err, partial = client:receive(MAX_REQUEST - #head)
    head = head .. (data or partial or "")
    if head:find("\r?\n\r?\n") or #head >= MAX_REQUEST then break end
    if err == "closed" or core.now() >= deadline then
      client:close()
      return
    end
    wait.wait(client:getfd(), deadline)
  end
  -- the answer is a few kilobytes: it fits in the socket buffer, so this
  -- short blocking send does not stall the loop in practice
  client:settimeout(2)
  client:send(self:answer(head))
  client:close()
end

-- Starts accepting inside sched (an mqlease.scheduler): call it from a task
-- or a loop callback of that scheduler.
function methods:serve(sched)
  sched:spawn(function()
    while not self.closed do
      wait.wait(self.sock:getfd())
      local client = not self.closed and self.sock:accept()
      if client then sched:spawn(self.handle, self, client) end
    end
  end)
end

function methods:close()
  if self.closed then return end
  self.closed = true
  self.sock:close()
end

return _M

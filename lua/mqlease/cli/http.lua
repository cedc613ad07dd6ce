-- mqlease.cli.http: the smallest HTTP server that serves GET /metrics (and
-- the live pages beside it) from inside mqlease's own scheduler, without ever
-- blocking it.
--
--   local server = assert(http.listen("127.0.0.1", 9464, function() return text end,
--     { ["/leases"] = function() return json, "application/json" end }))
--   server:serve(scheduler)   -- one task accepts, one task per connection
--   server:close()
--
-- The listening socket (LuaSocket) is non-blocking and waited for with
-- mqlease.loop like every descriptor of the core, so a scrape is answered
-- between two handler steps. One request per connection (Connection: close);
-- anything but GET or HEAD /metrics or one of the pages gets 404 or 405.
--
-- Whatever clients do, the server can neither end nor slow the loop it shares
-- with the handlers:
--   * at most max_connections (64) connections are held: a new one drops the
--     oldest. Each held connection waits on its own descriptor in the
--     scheduler's poll, which takes a bounded number of them; an unbounded
--     count of idle clients made that poll raise and end the run.
--   * writes never block: what the socket does not take now is sent later,
--     resumed where it stopped. The scheduler waits for readable descriptors
--     only, so a connection whose peer does not read retries on a short
--     growing timer (10 ms up to 200 ms) instead of waiting for POLLOUT.
--   * every connection has one deadline (10 s from its accept, 5 s of which
--     for the request to arrive); past it, it is closed as it stands.
--   * a failing accept (out of descriptors) pauses the accepting task for
--     100 ms rather than spinning on a listener that stays readable.

local socket = require "socket"
local core = require "mqlease.core"
local wait = require "mqlease.loop"

local setmetatable, tonumber, tostring, pcall, remove = setmetatable, tonumber, tostring, pcall, table.remove
local format, min = string.format, math.min

local _M = {}
local methods = {}
local mt = { __index = methods, __name = "mqlease.cli.http" }

local MAX_CONNECTIONS = 64  -- connections held at once; a new one drops the oldest
local READ_TIMEOUT = 5      -- seconds a client gets to send its request
local TIMEOUT = 10          -- seconds a connection lives at most, answer included
local MAX_REQUEST = 8192    -- bytes of request head we read at most
local RETRY_FIRST, RETRY_MAX = 0.01, 0.2   -- seconds between tries of a write the peer does not take
local ACCEPT_PAUSE = 0.1    -- seconds to wait after an accept failed (e.g. out of descriptors)

-- Binds host:port (port 0: any free port, see server.port). body() returns the
-- text of /metrics; pages (optional) maps other paths to a function that
-- returns a page's text and content type, or nil, status, message (e.g. nil,
-- "501 Not Implemented", "needs lua-cjson"). Returns the server, or nil, message.
function _M.listen(host, port, body, pages)
  local sock, err = socket.bind(host, port)
  if not sock then return nil, ("cannot listen on %s:%s: %s"):format(host, port, tostring(err)) end
  sock:settimeout(0)
  local _, bound = sock:getsockname()
  return setmetatable({
    sock = sock, host = host, port = tonumber(bound), body = body, pages = pages or {}, closed = false,
    connections = {},   -- held connections, oldest first: { client =, task =, dropped = }
    max_connections = MAX_CONNECTIONS,
  }, mt)
end

local function head_of(status, content_type, length, extra)
  return format("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n",
    status, content_type, length, extra or "")
end

-- The answer to one request head, as the response head and its body (sent
-- one after the other, so a large page is never copied into a response).
function methods:reply(head)
  local method, path = head:match("^(%u+) (%S+) HTTP/1%.%d\r?\n")
  local status, content_type, body, extra = "200 OK", "text/plain; version=0.0.4; charset=utf-8", nil, nil
  if not method then
    status, content_type, body = "400 Bad Request", "text/plain", "bad request\n"
  elseif method ~= "GET" and method ~= "HEAD" then
    -- a 405 must name the methods that are served (RFC 9110, 15.5.6)
    status, content_type, body = "405 Method Not Allowed", "text/plain", "only GET and HEAD\n"
    extra = "Allow: GET, HEAD\r\n"
  elseif path:match("^[^?]*") ~= "/metrics" then
    local page = self.pages[path:match("^[^?]*")]   -- the query string is ignored
    if not page then
      status, content_type, body = "404 Not Found", "text/plain", "not found: try /metrics\n"
    else
      local ok, text, kind, why = pcall(page)
      if not ok then
        status, content_type, body = "500 Internal Server Error", "text/plain", tostring(text) .. "\n"
      elseif text == nil then
        status, content_type, body = tostring(kind), "text/plain", tostring(why) .. "\n"
      else
        content_type, body = kind, tostring(text)
      end
    end
  else
    local ok, text = pcall(self.body)
    if not ok then
      status, content_type, body = "500 Internal Server Error", "text/plain", tostring(text) .. "\n"
    else
      body = tostring(text)
    end
  end
  return head_of(status, content_type, #body, extra), method == "HEAD" and "" or body
end

-- The whole answer as one string.
function methods:answer(head)
  local h, body = self:reply(head)
  return h .. body
end

-- Sends data from byte i on without blocking: true once all of it went out,
-- false when the connection was dropped, closed by the peer or out of time.
local function send_all(conn, data, deadline)
  local client, i, pause = conn.client, 1, RETRY_FIRST
  while i <= #data do
    local last, err, partial = client:send(data, i)
    if last then return true end
    if err ~= "timeout" then return false end
    if partial + 1 > i then pause = RETRY_FIRST end   -- the peer reads: try again soon
    i = partial + 1
    if i <= #data then
      if core.now() + pause > deadline then return false end
      wait.sleep(pause)
      if conn.dropped then return false end
      pause = min(pause * 2, RETRY_MAX)
    end
  end
  return true
end

local function forget(self, conn)
  local conns = self.connections
  for i = 1, #conns do
    if conns[i] == conn then remove(conns, i) break end
  end
  wait.forget(conn.client:getfd())
  conn.client:close()
end

-- Closes a held connection for a newer one (or at close); its task sees
-- conn.dropped when it runs next and ends.
local function drop(self, conn, sched)
  conn.dropped = true
  forget(self, conn)
  if conn.task then sched:wake(conn.task) end
end

-- One connection: read the request head (waiting in the scheduler), answer, close.
function methods:handle(conn)
  local client = conn.client
  client:settimeout(0)
  local now = core.now()
  local read_deadline, deadline = now + READ_TIMEOUT, now + TIMEOUT
  local head = ""
  while not conn.dropped do
    local data, err, partial = client:receive(MAX_REQUEST - #head)
    head = head .. (data or partial or "")
    if head:find("\r?\n\r?\n") or #head >= MAX_REQUEST then
      local response_head, body = self:reply(head)
      if send_all(conn, response_head, deadline) and body ~= "" then send_all(conn, body, deadline) end
      break
    end
    if err == "closed" or core.now() >= read_deadline then break end
    wait.wait(client:getfd(), read_deadline)
  end
  if not conn.dropped then forget(self, conn) end
end

-- Starts accepting inside sched (an mqlease.scheduler): call it from a task
-- or a loop callback of that scheduler.
function methods:serve(sched)
  self.sched = sched
  sched:spawn(function()
    while not self.closed do
      wait.wait(self.sock:getfd())
      if self.closed then break end
      local client, err = self.sock:accept()
      if client then
        local conns = self.connections
        while #conns >= self.max_connections do drop(self, conns[1], sched) end
        local conn = { client = client }
        conns[#conns + 1] = conn
        conn.task = sched:spawn(self.handle, self, conn)
      elseif err ~= "timeout" and not self.closed then
        wait.sleep(ACCEPT_PAUSE)
      end
    end
  end)
end

function methods:close()
  if self.closed then return end
  self.closed = true
  wait.forget(self.sock:getfd())
  self.sock:close()
  local conns = self.connections
  while #conns > 0 do
    local conn = conns[1]
    if self.sched then drop(self, conn, self.sched) else forget(self, conn) end
  end
end

return _M

-- mqlease.cli.http's answers to the requests it does not serve, read from
-- server:reply(head) on a stand-in socket (nothing listens, nothing connects).
describe("the metrics server's answer", function()
  local saved_socket, saved_http, server

  before_each(function()
    saved_socket, saved_http = package.loaded.socket, package.loaded["mqlease.cli.http"]
    local sock = { settimeout = function() end, getsockname = function() return "127.0.0.1", 9464 end }
    package.loaded.socket = { bind = function() return sock end }
    package.loaded["mqlease.cli.http"] = nil
    local http = require "mqlease.cli.http"
    server = assert(http.listen("127.0.0.1", 9464, function() return "x 1\n" end, {
      ["/"] = function() return "<p>hi</p>", "text/html; charset=utf-8" end,
    }))
  end)

  after_each(function()
    package.loaded.socket, package.loaded["mqlease.cli.http"] = saved_socket, saved_http
  end)

  it("to a method other than GET and HEAD says which methods it takes (405 needs Allow)", function()
    for _, method in ipairs({ "POST", "PUT", "DELETE", "OPTIONS" }) do
      local head = server:reply(method .. " / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert.matches("^HTTP/1.1 405 Method Not Allowed\r\n", head)
      assert.matches("\r\nAllow: GET, HEAD\r\n", head, 1, true)
    end
    -- the other answers are as they were
    local head, body = server:reply("GET /nowhere HTTP/1.1\r\n\r\n")
    assert.matches("^HTTP/1.1 404 Not Found\r\n", head)
    assert.is_nil(head:find("Allow:", 1, true))
    assert.equal("not found: try /metrics\n", body)
    head, body = server:reply("HEAD / HTTP/1.0\r\n\r\n")
    assert.matches("^HTTP/1.1 200 OK\r\n.*Content%-Length: 9\r\n", head)
    assert.equal("", body)
  end)
end)

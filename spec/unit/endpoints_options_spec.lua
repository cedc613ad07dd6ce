-- The endpoints option without a server: each entry must be host:port.
local mqlease = require "mqlease"
local config = require "mqlease.config"

describe("the endpoints option", function()
  it("joins several entries without the blanks around them", function()
    assert.equal("a:1;b.example:8081", config.endpoint_list(" a:1 ;  b.example:8081 "))
    assert.equal("127.0.0.1:18081", config.endpoint_list("127.0.0.1:18081"))
  end)

  it("names the option for an entry that is not host:port", function()
    for _, bad in ipairs({ "a:1;", ";a:1", "a:1;b", "a:0", "a:65536", ":80", "a b:1", "a:1;;b:2" }) do
      local ok, err = pcall(mqlease.producer, { endpoints = bad })
      assert.is_false(ok, bad)
      assert.matches("option 'endpoints' must be host:port", err)
    end
  end)
end)

-- The tls option without a server: wrong shapes and unreadable files raise
-- naming the option, and the files' text reaches the core, not the options.
local mqlease = require "mqlease"
local config = require "mqlease.config"

local function raises(pattern, fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, err)
end

local function consumer(tls)
  local c = mqlease.consumer { endpoints = "127.0.0.1:1", group = "g", topic = "t", tls = tls }
  return c   -- not a tail call: errors must point at this line
end

describe("the tls option", function()
  it("names the option when it is neither a boolean nor a table", function()
    raises("option 'tls' must be true, false or a table", function() consumer("yes") end)
    raises("option 'tls' must be true, false or a table", function()
      mqlease.producer { endpoints = "127.0.0.1:1", tls = 1 }
    end)
  end)

  it("names an unknown field and a field of the wrong type", function()
    raises("unknown field 'ca'", function() consumer { ca = "/x" } end)
    raises("field 'insecure' is a boolean", function() consumer { insecure = "yes" } end)
    raises("field 'ca_file' is a non%-empty string", function() consumer { ca_file = 42 } end)
    raises("field 'server_name' is a non%-empty string", function() consumer { server_name = "" } end)
  end)

  it("wants cert_file and key_file together", function()
    raises("both cert_file and key_file", function() consumer { cert_file = "/etc/hostname" } end)
    raises("both cert_file and key_file", function() consumer { key_file = "/etc/hostname" } end)
  end)

  it("names the file that cannot be read, at the caller", function()
    raises("option 'tls.ca_file' cannot be read: /nonexistent/ca.pem", function()
      consumer { ca_file = "/nonexistent/ca.pem" }
    end)
    raises("option 'tls.key_file' cannot be read", function()
      mqlease.producer { endpoints = "127.0.0.1:1", tls = { cert_file = "/etc/hostname", key_file = "/nonexistent/k" } }
    end)
    local ok, err = pcall(consumer, { ca_file = "/nonexistent/ca.pem" })
    assert.is_false(ok)
    assert.matches("tls_options_spec.lua:%d+:", err)
  end)

  it("hands the files' text to the core and keeps the paths out of it", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    f:close()
    local t = config.tls_core("mqlease.consumer", { ca_file = path, server_name = "localhost", insecure = false })
    os.remove(path)
    assert.is_true(t.tls)
    assert.matches("BEGIN CERTIFICATE", t.tls_ca_pem)
    assert.equal("localhost", t.tls_server_name)
    assert.is_false(t.tls_insecure)
    assert.is_nil(t.tls_cert_pem)
    assert.same({ tls = true }, config.tls_core("mqlease.consumer", true))
    assert.same({ tls = false }, config.tls_core("mqlease.consumer", false))
  end)
end)

-- TLS to the real proxy. RocketMQ's proxy serves TLS and plaintext on one
-- port (ProxyAndTlsProtocolNegotiator); with tlsTestModeEnable (the default)
-- its certificate is a fresh self-signed one for CN=localhost, so the right
-- CA is that very certificate, read off the port with openssl s_client.
local mqlease = require "mqlease"
local env = require "support.env"

local host, port = env.endpoints:match("^([^:;]+):(%d+)")

-- A produce-then-consume roundtrip with the given tls option on both ends.
local function roundtrip(tls, base)
  local topic = env.topic(base)
  local group = env.name("g_" .. base)
  local consumer = env.consumer { group = group, topic = topic, invisible = 10, await = 5, tls = tls }
  assert(consumer:receive(1, { await = 0 }))   -- subscribe before producing
  local producer = env.producer { topics = { topic }, tls = tls }
  local id = assert(producer:send(topic, "over " .. base, { tag = "t" }))
  local got
  env.collect(consumer, 30, function(m)
    if m.id == id then got = m end
    assert(m:ack())
  end, function() return got ~= nil end)
  producer:close()
  consumer:close()
  return got
end

-- The mqlease command from this checkout (without the sanitizer runtime the
-- specs preload); returns its exit code and its output (stdout and stderr).
local function command(args)
  local p = assert(io.popen("env -u LD_PRELOAD lua5.4 bin/mqlease " .. args .. " 2>&1; echo \"rc=$?\""))
  local out = p:read("a")
  p:close()
  return tonumber(out:match("rc=(%d+)\n$")), (out:gsub("rc=%d+\n$", ""))
end

describe("mqlease over TLS", function()
  local dir

  setup(function()
    dir = env.sh("mktemp -d /tmp/mqlease-tls-XXXXXX"):gsub("%s+$", "")
    -- a CA of our own, which never signed the proxy's certificate
    env.sh(("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
      .. "-keyout %s/other-ca.key -out %s/other-ca.pem"):format(dir, dir))
    -- a client certificate, and a key of another pair
    for _, name in ipairs({ "client", "stranger" }) do
      env.sh(("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=%s "
        .. "-keyout %s/%s.key -out %s/%s.pem"):format(name, dir, name, dir, name))
    end
    -- the proxy's own self-signed certificate, as it serves it now
    env.sh(("openssl s_client -connect %s:%s -servername localhost </dev/null 2>/dev/null "
      .. "| openssl x509 -out %s/proxy.pem"):format(host, port, dir))
  end)

  teardown(function()
    if dir then os.execute("rm -rf " .. dir) end
  end)

  it("produces and consumes end to end without checking the certificate (insecure)", function()
    local m = roundtrip({ insecure = true }, "tls_insecure")
    assert.is_userdata(m)
    assert.equal("over tls_insecure", m.body)
  end)

  it("produces and consumes when the proxy's certificate is the CA and server_name matches it", function()
    local m = roundtrip({ ca_file = dir .. "/proxy.pem", server_name = "localhost" }, "tls_ca")
    assert.is_userdata(m)
    assert.equal("over tls_ca", m.body)
  end)

  it("is reached by the mqlease command with --ca-file and --server-name, and refused under another CA", function()
    local topic = env.topic("tls_cli")
    local rc, out = command(("send --quiet --endpoints %s --topic %s --ca-file %s --server-name localhost over-tls")
      :format(env.endpoints, topic, dir .. "/proxy.pem"))
    assert.equal(0, rc, out)
    assert.matches("^%x+\n$", out)
    rc, out = command(("send --quiet --endpoints %s --topic %s --ca-file %s --server-name localhost over-tls")
      :format(env.endpoints, topic, dir .. "/other-ca.pem"))
    assert.equal(1, rc, out)
    assert.matches("(TLS_HANDSHAKE)", out, 1, true)
  end)

  it("fails at start with TLS_HANDSHAKE, not a hang, when the CA did not sign the proxy's certificate", function()
    local t0 = mqlease.now()
    local p, err, code = mqlease.producer {
      endpoints = env.endpoints, start_timeout = 5,
      tls = { ca_file = dir .. "/other-ca.pem", server_name = "localhost" },
    }
    assert.is_nil(p)
    assert.equal("TLS_HANDSHAKE", code)
    assert.matches("certificate verify failed", err)
    assert.is_true(mqlease.now() - t0 < 5, "the failure must come before start_timeout")

    local c, cerr, ccode = mqlease.consumer {
      endpoints = env.endpoints, start_timeout = 5, group = env.name("g_tls_bad"), topic = env.topic("tls_bad"),
      tls = { ca_file = dir .. "/other-ca.pem", server_name = "localhost" },
    }
    assert.is_nil(c)
    assert.equal("TLS_HANDSHAKE", ccode)
    assert.is_string(cerr)
  end)

  it("fails at start with TLS_HANDSHAKE when the name checked is not the certificate's", function()
    -- the right CA, but the proxy's certificate is for localhost, not for its address
    local p, _, code = mqlease.producer {
      endpoints = env.endpoints, start_timeout = 5,
      tls = { ca_file = dir .. "/proxy.pem", server_name = "proxy.example" },
    }
    assert.is_nil(p)
    assert.equal("TLS_HANDSHAKE", code)
  end)

  it("fails at start with TLS_HANDSHAKE under tls = true: the system CAs never signed a test-mode proxy", function()
    local p, _, code = mqlease.producer { endpoints = env.endpoints, start_timeout = 5, tls = true }
    assert.is_nil(p)
    assert.equal("TLS_HANDSHAKE", code)
  end)

  it("loads the client certificate and key it is given: a key of another pair fails the start", function()
    -- the 5.2.0 proxy never asks for a client certificate (ClientAuth.NONE in
    -- ProxyAndTlsProtocolNegotiator), so a matching pair just works
    local p = assert(mqlease.producer {
      endpoints = env.endpoints, start_timeout = 5,
      tls = { insecure = true, cert_file = dir .. "/client.pem", key_file = dir .. "/client.key" },
    })
    p:close()
    local bad, err, code = mqlease.producer {
      endpoints = env.endpoints, start_timeout = 5,
      tls = { insecure = true, cert_file = dir .. "/client.pem", key_file = dir .. "/stranger.key" },
    }
    assert.is_nil(bad)
    assert.equal("TLS_HANDSHAKE", code)
    assert.is_string(err)
  end)

  it("still speaks plaintext to the same port", function()
    local m = roundtrip(false, "tls_plain")
    assert.is_userdata(m)
    assert.equal("over tls_plain", m.body)
  end)
end)

-- ACL against a real RocketMQ 5.2.0 that checks it. The shared instance runs
-- without ACL, so this file starts one of its own (rocketmq.sh with
-- MQLEASE_ACL=1, other ports, its own run dir) once for all its tests and
-- stops it at the end: about 15 s to start and a few to stop.
--
-- 5.2.0 has ACL 1.0: with enableACL the proxy checks each call's signature
-- (MQv2-HMAC-SHA1 of x-mq-date-time) and the account's topic and group
-- permissions from plain_acl.yml, and denies with the gRPC status
-- PERMISSION_DENIED. The accounts are the ones rocketmq.sh writes.
local mqlease = require "mqlease"
local env = require "support.env"

local GRPC_PORT = tonumber(os.getenv("MQLEASE_ACL_GRPC_PORT") or "18781")
local ENDPOINTS = "127.0.0.1:" .. GRPC_PORT
local RUN = os.getenv("MQLEASE_ACL_RUN") or "/tmp/mqlease-acl-rocketmq"
local RMQ = table.concat({
  "MQLEASE_ACL=1",
  "MQLEASE_RUN=" .. RUN,
  "MQLEASE_GRPC_PORT=" .. GRPC_PORT,
  "MQLEASE_REMOTING_PORT=" .. (GRPC_PORT - 1),
  "MQLEASE_NAMESRV_PORT=" .. (GRPC_PORT + 1000),
  "MQLEASE_BROKER_PORT=" .. (GRPC_PORT + 2000),
  "bash mk/rocketmq.sh",
}, " ")

local ADMIN = { access_key = "mqlease-admin", secret_key = "mqlease-admin-secret" }
local READONLY = { access_key = "mqlease-readonly", secret_key = "mqlease-readonly-secret" }
local WRONG_SECRET = "not-the-admin-secret-42"

local function error_count(client, op, code)
  for _, e in ipairs(client:metrics().errors or {}) do
    if e.op == op and e.code == code then return e.n end
  end
  return 0
end

-- The path of the first place where value s is reachable from root through
-- table keys, values and metatables (what any code holding root can read
-- without the debug library), or nil.
local function reach(root, s)
  local seen, queue = {}, { { root, "" } }
  local getmt = debug.getmetatable
  while #queue > 0 do
    local item = table.remove(queue)
    local v, path = item[1], item[2]
    if v == s then return path end
    local t = type(v)
    if (t == "table" or t == "userdata") and not seen[v] then
      seen[v] = true
      local mt = getmt(v)
      if mt then queue[#queue + 1] = { mt, path .. "<mt>" } end
      if t == "table" then
        for k, x in next, v do
          queue[#queue + 1] = { k, path .. "[key]" }
          queue[#queue + 1] = { x, path .. "." .. tostring(k) }
        end
      end
    end
  end
end

describe("mqlease against a RocketMQ with ACL on", function()
  local topic = env.name("acl")
  local group = env.name("g_acl")

  setup(function()
    env.start_rocketmq(function(args) return env.sh(RMQ .. " " .. args) end)
    env.sh(("%s topics %s --group %s"):format(RMQ, topic, group))
  end)

  teardown(function()
    env.sh(RMQ .. " stop")
    os.execute("rm -rf " .. RUN)
  end)

  it("produces and consumes with the right key", function()
    local consumer = assert(mqlease.consumer {
      endpoints = ENDPOINTS, credentials = ADMIN, group = group, topic = topic, invisible = 10, await = 5,
    })
    assert(consumer:receive(1, { await = 0 }))
    local producer = assert(mqlease.producer { endpoints = ENDPOINTS, credentials = ADMIN, topics = { topic } })
    local id = assert(producer:send(topic, "signed", { tag = "acl" }))
    local got
    env.collect(consumer, 30, function(m)
      if m.id == id then got = m end
      assert(m:ack())
    end, function() return got ~= nil end)
    assert.is_userdata(got)
    assert.equal("signed", got.body)
    producer:close()
    consumer:close()
  end)

  it("keeps the secret key out of everything a message, its consumer or a producer reaches", function()
    local creds = { access_key = ADMIN.access_key, secret_key = ADMIN.secret_key, security_token = "tok-42-secret" }
    local consumer = assert(mqlease.consumer {
      endpoints = ENDPOINTS, credentials = creds, group = group, topic = topic, invisible = 10, await = 5,
    })
    local producer = assert(mqlease.producer {
      endpoints = ENDPOINTS, credentials = { access_key = ADMIN.access_key, secret_key = ADMIN.secret_key },
      topics = { topic },
    })
    local id = assert(producer:send(topic, "secretless", { tag = "acl" }))
    local got
    env.collect(consumer, 30, function(m)
      if m.id == id then got = m else assert(m:ack()) end
    end, function() return got ~= nil end)
    assert.is_userdata(got)
    for _, secret in ipairs({ ADMIN.secret_key, "tok-42-secret" }) do
      assert.is_nil(reach(got, secret), "from the message")
      assert.is_nil(reach(consumer, secret), "from the consumer")
      assert.is_nil(reach(producer, secret), "from the producer")
    end
    -- what stays readable: who signs, and the caller's own table as it was
    assert.equal(ADMIN.access_key, got.consumer.options.credentials.access_key)
    assert.equal(ADMIN.secret_key, creds.secret_key)
    assert(got:ack())
    producer:close()
    consumer:close()
  end)

  it("signs the command's calls with --access-key and the secret key from MQLEASE_SECRET_KEY or --secret-key-file", function()
    local function command(prefix, args)
      local p = assert(io.popen(("%s env -u LD_PRELOAD lua5.4 bin/mqlease %s 2>&1; echo \"rc=$?\""):format(prefix, args)))
      local out = p:read("a")
      p:close()
      return tonumber(out:match("rc=(%d+)\n$")), (out:gsub("rc=%d+\n$", ""))
    end
    local send = ("send --quiet --endpoints %s --topic %s --access-key %s signed-by-cli")
      :format(ENDPOINTS, topic, ADMIN.access_key)
    local rc, out = command("MQLEASE_SECRET_KEY=" .. ADMIN.secret_key, send)
    assert.equal(0, rc, out)
    assert.matches("^%x+\n$", out)
    local file = os.tmpname()
    local f = assert(io.open(file, "w"))
    f:write(ADMIN.secret_key, "\n")
    f:close()
    rc, out = command("", send .. " --secret-key-file " .. file)
    os.remove(file)
    assert.equal(0, rc, out)
    assert.matches("^%x+\n$", out)
    rc, out = command("MQLEASE_SECRET_KEY=" .. WRONG_SECRET, send)
    assert.equal(1, rc, out)
    assert.matches("(PERMISSION_DENIED)", out, 1, true)
    assert.is_nil(out:find(WRONG_SECRET, 1, true))
  end)

  it("fails the start with PERMISSION_DENIED on a wrong secret or an unknown key, and never shows the secret", function()
    local bad = { access_key = ADMIN.access_key, secret_key = WRONG_SECRET }
    local unknown = { access_key = "nobody-at-all", secret_key = WRONG_SECRET }
    for _, cr in ipairs({ bad, unknown }) do
      local t0 = mqlease.now()
      local p, err, code = mqlease.producer { endpoints = ENDPOINTS, credentials = cr, start_timeout = 5 }
      assert.is_nil(p)
      assert.equal("PERMISSION_DENIED", code)
      assert.matches("ACL", err)
      assert.is_nil(err:find(WRONG_SECRET, 1, true))
      local c, cerr, ccode = mqlease.consumer {
        endpoints = ENDPOINTS, credentials = cr, start_timeout = 5, group = group, topic = topic,
      }
      assert.is_nil(c)
      assert.equal("PERMISSION_DENIED", ccode)
      assert.is_nil(cerr:find(WRONG_SECRET, 1, true))
      -- denied at once: no retries until start_timeout
      assert.is_true(mqlease.now() - t0 < 5)
    end
  end)

  it("cannot start without credentials", function()
    -- the 5.2.0 proxy fails on the missing header (INTERNAL, its own NPE text)
    local p, err, code = mqlease.producer { endpoints = ENDPOINTS, start_timeout = 5 }
    assert.is_nil(p)
    assert.is_string(err)
    assert.is_string(code)
  end)

  it("fails a call the account may not make, counts each failure once and does not retry it", function()
    -- the read-only account may subscribe but not publish
    local consumer = assert(mqlease.consumer {
      endpoints = ENDPOINTS, credentials = READONLY, group = group, topic = topic, invisible = 10, await = 5,
    })
    assert(consumer:receive(1, { await = 0 }))
    local producer = assert(mqlease.producer { endpoints = ENDPOINTS, credentials = READONLY })
    for _ = 1, 3 do
      local id, err, code = producer:send(topic, "not allowed")
      assert.is_nil(id)
      assert.equal("PERMISSION_DENIED", code)
      assert.matches("SendMessage", err)
    end
    assert.equal(3, producer:metrics().sent_fail)
    assert.equal(3, error_count(producer, "send", "PERMISSION_DENIED"))
    mqlease.sleep(3)
    assert.equal(3, error_count(producer, "send", "PERMISSION_DENIED"), "a denied call must not be retried")
    assert.equal(0, producer:metrics().sent_ok)
    for _, c in ipairs({ producer, consumer }) do
      local text = mqlease.metrics.text(c)
      assert.is_nil(text:find(READONLY.secret_key, 1, true))
      assert.is_nil(text:find(READONLY.access_key, 1, true))
    end
    assert.truthy(mqlease.metrics.text(producer):find('mqlease_errors_total{op="send",code="PERMISSION_DENIED"} 3', 1, true))
    producer:close()
    consumer:close()
  end)
end)

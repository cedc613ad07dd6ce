-- Wire faults a real broker cannot be told to make, served by the dev broker's control port:
-- compressed bodies in both framings, CRC32/SHA1 digests, wrong digests, a decompression bomb,
-- messages without id / handle / topic, frames cut in half, and a message carrying every field.
-- What must hold: no handler (no Lua code) ever sees a bad message, nothing bad is acked, the
-- counters say what happened, the good messages around a bad frame are not lost, and the
-- process lives.
local mqlease = require "mqlease"
local devbroker = require "support.devbroker"

local TOPIC = "wire_faults"

local function consumer(dv, extra)
  local o = { endpoints = dv.endpoints, group = "g_wire_faults", topic = TOPIC, invisible = 10, await = 1 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return assert(mqlease.consumer(o))
end

local function produce(dv, bodies)
  local p = assert(mqlease.producer { endpoints = dv.endpoints, topics = { TOPIC } })
  local ids = {}
  for i, body in ipairs(bodies) do ids[assert(p:send(TOPIC, body, { tag = "t" .. i }))] = body end
  p:close()
  return ids
end

-- Receives for up to seconds; every message goes through on_message. Returns all of them
-- and the error codes of the receives that failed.
local function receive_for(c, seconds, on_message, enough)
  local all, codes = {}, {}
  local deadline = mqlease.now() + seconds
  while mqlease.now() < deadline and not (enough and enough(all)) do
    local msgs, _, code = c:receive(32, { await = 1 })
    if msgs then
      for _, m in ipairs(msgs) do
        all[#all + 1] = m
        if on_message then on_message(m) end
      end
    else
      codes[#codes + 1] = code
    end
  end
  return all, codes
end

local function ok(answer)
  assert.is_string(answer)
  assert.matches("^ok", answer)
end

local function binary(n)
  local t = {}
  for i = 1, n do t[i] = string.char((i * 7 + (i >> 3)) % 256) end
  return table.concat(t)
end

describe("mqlease on the dev broker's wire faults", function()
  local dv

  after_each(function()
    if dv then dv.stop() end
    dv = nil
  end)

  it("inflates GZIP bodies in the zlib and the gzip framing, byte for byte", function()
    dv = devbroker.start({ TOPIC })
    local c = consumer(dv)
    for _, framing in ipairs { "zlib", "gzip" } do
      ok(dv.control("set gzip 1"))
      ok(dv.control("set gzip_framing " .. framing))
      local sent = produce(dv, { ("compressible text "):rep(600), binary(70000), "x", "" })
      local got = receive_for(c, 10, function(m) assert(m:ack()) end, function(all) return #all >= 4 end)
      assert.equal(4, #got, framing)
      for _, m in ipairs(got) do assert.equal(sent[m.id], m.body, framing) end
    end
    assert.matches("gzip=[1-9]", dv.control("stats"))
    assert.same({}, c:metrics().corrupted)
    c:close()
  end)

  it("checks CRC32 and SHA1 digests as the Java client writes them, and passes the right ones", function()
    dv = devbroker.start({ TOPIC })
    local c = consumer(dv)
    for _, digest in ipairs { "crc32", "sha1", "md5" } do
      ok(dv.control("set digest " .. digest))
      local sent = produce(dv, { "digest " .. digest, binary(3000) })
      local got = receive_for(c, 10, function(m) assert(m:ack()) end, function(all) return #all >= 2 end)
      assert.equal(2, #got, digest)
      for _, m in ipairs(got) do assert.equal(sent[m.id], m.body) end
    end
    assert.same({}, c:metrics().corrupted)
    c:close()
  end)

  it("never hands a message with a wrong digest to Lua: counted, nacked by the core, never acked", function()
    dv = devbroker.start({ TOPIC })
    -- a 1 s delay: a faster loop would reach the broker's 17 attempts and its own DLQ
    local c = consumer(dv, { on_corrupt = "nack", corrupt_delay = 1 })
    ok(dv.control("set corrupt_digest 1"))
    local sent = produce(dv, { "one", "two" })
    local got = receive_for(c, 3)
    assert.equal(0, #got)
    local m = c:metrics()
    assert.is_true((m.corrupted.digest_mismatch or 0) >= 2)
    assert.equal(0, m.acks_ok)
    assert.is_true(m.nacks_ok >= 2)
    -- given back, not lost: once the digests are right again both arrive intact
    ok(dv.control("set corrupt_digest 0"))
    got = receive_for(c, 10, function(msg) assert(msg:ack()) end, function(all) return #all >= 2 end)
    assert.equal(2, #got)
    for _, msg in ipairs(got) do assert.equal(sent[msg.id], msg.body) end
    c:close()
  end)

  it("stops a decompression bomb at max_body; a failed dead-letter forward leaves it to expire", function()
    dv = devbroker.start({ TOPIC })
    local c = consumer(dv)   -- on_corrupt = "dlq": the dev broker has no ForwardMessageToDeadLetterQueue
    ok(dv.control("set bomb 1"))
    produce(dv, { "soon a bomb" })
    local got = receive_for(c, 4)
    assert.equal(0, #got)
    local m = c:metrics()
    assert.equal(1, m.corrupted.body_too_large)
    assert.equal(0, m.acks_ok)
    assert.equal(1, m.dead_letter_fail)
    local unimplemented = false
    for _, e in ipairs(m.errors) do
      if e.op == "dead_letter" and e.code == "UNIMPLEMENTED" then unimplemented = true end
    end
    assert.is_true(unimplemented)
    assert.equal(1, m.inflight)          -- held, not renewed, until it runs out
    assert.equal(0, m.renew_success)
    assert.matches("bomb=1", dv.control("stats"))
    c:close()
  end)

  it("drops messages without id, handle or topic, reports PROTOCOL and counts each reason", function()
    dv = devbroker.start({ TOPIC })
    local c = consumer(dv)
    local reasons = { id = "no_message_id", handle = "no_receipt_handle", topic = "no_topic" }
    for kind, reason in pairs(reasons) do
      ok(dv.control("set malformed 1"))
      ok(dv.control("set malformed_kind " .. kind))
      produce(dv, { "malformed " .. kind })
      local got, codes = receive_for(c, 10, nil, function() return (c:metrics().malformed[reason] or 0) > 0 end)
      assert.equal(0, #got, kind)
      assert.equal(1, c:metrics().malformed[reason], kind)
      ok(dv.control("set malformed 0"))
      -- the receive that got only a malformed frame failed with PROTOCOL (or a later one is empty)
      local protocol = 0
      for _, e in ipairs(c:metrics().errors) do
        if e.op == "receive" and e.code == "PROTOCOL" then protocol = e.n end
      end
      assert.is_true(protocol >= 1, kind)
      assert.is_true(#codes == 0 or codes[1] == "PROTOCOL", kind)
    end
    assert.equal(0, c:metrics().acks_ok)
    c:close()
  end)

  it("keeps the good messages of a stream with frames cut in half; the cut ones come back", function()
    dv = devbroker.start({ TOPIC }, { "--time-scale", "0.2" })
    local c = consumer(dv)
    ok(dv.control("set truncated_frame 0.5"))
    local bodies = {}
    for i = 1, 12 do bodies[i] = "message " .. i end
    local sent = produce(dv, bodies)
    local seen, n = {}, 0
    receive_for(c, 20, function(m)
      assert.equal(sent[m.id], m.body)
      if not seen[m.id] then seen[m.id] = true; n = n + 1 end
      assert(m:ack())
    end, function() return n >= 12 end)
    assert.equal(12, n)
    assert.is_true((c:metrics().malformed.undecodable or 0) >= 1)
    assert.matches("truncated_frame=[1-9]", dv.control("stats"))
    c:close()
  end)

  it("hands over every field of a message that carries them all", function()
    dv = devbroker.start({ TOPIC })
    local c = consumer(dv)
    local answer = dv.control("publish " .. TOPIC .. " 0")
    ok(answer)
    local id = answer:match("id=(%S+)")
    local got = receive_for(c, 10, nil, function(all) return #all >= 1 end)
    assert.equal(1, #got)
    local m = got[1]
    assert.equal(id, m.id)
    assert.equal(TOPIC, m.topic)
    assert.equal("dv publish body", m.body)
    assert.equal("dv-tag", m.tag)
    assert.same({ "dv-key-1", "dv-key-2" }, m.keys)
    assert.equal("dv-group", m.message_group)
    assert.equal("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", m.trace_context)
    assert.equal("dv-born-host", m.born_host)
    assert.is_string(m.store_host)
    assert.is_number(m.delivery_timestamp)
    assert.is_true(math.abs(m.store_at - m.born_at - 1) < 0.01)
    assert.equal("héllo ✓", m.properties["dv-utf8"])
    assert.equal("\xff\xfe not utf-8 \xc3\x28", m.properties["dv-bytes"])
    assert.equal(1, m.delivery_attempt)
    assert(m:ack())
    c:close()
  end)
end)

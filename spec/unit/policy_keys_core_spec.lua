-- The exactly-once policy's keys, which the core writes (core.eo_key, for
-- mqlease.policy.key_base and keys, the batches' eval_ids commands and
-- keepalive_of), follow the documented layout for every kind of id:
-- prefix{<id>}: and the suffix, or prefix{%<hex of the id>}%: for an empty
-- id and one that starts with '}' (whose hash tag would be empty). A lock
-- taken under one form would not be seen under another, and the handler
-- would run twice, so the layout is held here against a writer of its own.
local core = require "mqlease.core"
local policy = require "mqlease.policy"

-- The layout, written independently of the core.
local function layout(prefix, id, suffix)
  local first = id:byte(1)
  if first ~= nil and first ~= 0x7d then return prefix .. "{" .. id .. "}:" .. suffix end
  return prefix .. "{%" .. (id:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) .. "}%:" .. suffix
end

describe("the policy's keys written by the core", function()
  it("follow the layout for plain, empty, brace, binary and long ids, under any prefix", function()
    local ids = { "7F00000100002A9F0000000A", "", "}", "}x", "{a}", "a}b{", "%", "\0", "\0\255\1",
      ("x"):rep(300), ("}"):rep(70), "id with spaces", "ünïcödé" }
    for i = 0, 255 do ids[#ids + 1] = string.char(i) .. "tail" end
    for _, prefix in ipairs({ "mqlease:", "", "{tag}", ("p"):rep(200) }) do
      for _, id in ipairs(ids) do
        for _, suffix in ipairs({ "lock", "fence", "done" }) do
          local want = layout(prefix, id, suffix)
          assert.equal(want, core.eo_key(prefix, id, suffix), ("id %q prefix %q"):format(id, prefix))
          assert.equal(want, policy.key_base(id, prefix) .. suffix, ("id %q prefix %q"):format(id, prefix))
        end
      end
    end
  end)

  it("are the strings docs/exactly-once.md \"Key layout\" shows", function()
    assert.equal("mqlease:{7F0001}:lock", policy.keys("7F0001").lock)
    assert.equal("mqlease:{%}%:done", policy.keys("").done)
    assert.equal("p:{%7d78}%:fence", policy.keys("}x", "p:").fence)
    assert.equal("mqlease:{{a}}:lock", policy.keys("{a}").lock)
    assert.equal("mqlease:{%7d61}%:lock", policy.keys("}a").lock)
  end)

  it("write a number id as its string and refuse any other id by name", function()
    assert.equal("mqlease:{42}:", policy.key_base(42, "mqlease:"))
    assert.equal(policy.key_base("1.5", "p:"), policy.key_base(1.5, "p:"))
    for _, bad in ipairs({ true, {}, function() end }) do
      local ok, err = pcall(policy.key_base, bad, "p:")
      assert.is_false(ok)
      assert.matches("a message id must be a string %(got " .. type(bad) .. "%)", err)
    end
    local ok, err = pcall(policy.keys, nil)
    assert.is_false(ok)
    assert.matches("a message id must be a string %(got nil%)", err)
  end)

  -- Redis hashes the whole key when its first '{' has a '}' right after it
  -- (keyHashSlot, src/cluster.c): under such a prefix a message's lock, fence
  -- and done marker fall in three slots, and under Cluster every script over
  -- them fails CROSSSLOT, for every message.
  it("are refused under a prefix that would give them an empty hash tag", function()
    for _, prefix in ipairs({ "a{}:", "{}", "x{}{y}:" }) do
      local ok, err = pcall(policy.exactly_once, { prefix = prefix })
      assert.is_false(ok, prefix)
      assert.matches("option 'prefix' must not have '}' right after its first '{'", err, 1, true)
      ok, err = pcall(policy.transaction_checker, { prefix = prefix })
      assert.is_false(ok, prefix)
      assert.matches("option 'prefix' must not have '}' right after its first '{'", err, 1, true)
    end
    -- a tag of its own in the prefix, or a '{' the id's tag then extends: one slot a message
    for _, prefix in ipairs({ "mqlease:", "{tag}", "a{", "a}{", "" }) do
      assert.is_truthy(policy.exactly_once({ prefix = prefix }), prefix)
      assert.is_truthy(policy.transaction_checker({ prefix = prefix }), prefix)
    end
  end)

  it("match policy.keys, the keys users and specs look a message up by", function()
    local k = policy.keys("}odd")
    assert.equal(k.lock, core.eo_key("mqlease:", "}odd", "lock"))
    assert.equal(k.fence, core.eo_key("mqlease:", "}odd", "fence"))
    assert.equal(k.done, core.eo_key("mqlease:", "}odd", "done"))
  end)
  -- Checked before anything is built or sent (no server needed: nothing is).
  it("are refused whole, before anything is sent, for an entry that is not well formed", function()
    local c = core.redis { host = "127.0.0.1", port = 1, timeout_ms = 100 }
    finally(function() c:close() end)
    local bad = {
      { { "eval_ids", "return 1", "p:", "lock", 2, "a", 5, "x" }, "ids must be strings" },
      { { "eval_ids", "return 1", "p:", "lock", 3, "a", "b" }, "ids must be strings" },
      { { "eval_ids", "return 1", 7, "lock", 1, "a" }, "prefix and suffixes (strings)" },
      { { "eval_ids", "return 1", "p:", "", 1, "a" }, "prefix and suffixes (strings)" },
      { { "eval_ids", "return 1", "p:", "a b c d e", 1, "a" }, "at most 4 suffixes" },
      { { "eval_ids", "return 1", "p:", "a  b", 1, "a" }, "at most 4 suffixes" },
      { { "eval_ids", "return 1", "p:", "lock", 0 }, "a count of ids expected" },
    }
    for _, case in ipairs(bad) do
      local ok, err = pcall(c.pipeline, c, { { "command", "PING" }, case[1] })
      assert.is_false(ok)
      assert.matches(case[2], err, 1, true)
    end
    assert.is_number(c:pipeline({ { "eval_ids", "return 1", "p:", "lock fence", 2, "a", "}b", "arg" } }))
  end)
end)

-- The exactly-once policy's keys as the core writes them (for the batches'
-- eval_ids commands and keepalive_of) are the keys mqlease.policy.key_base
-- writes in Lua, for every kind of id: the two must never name different
-- keys for one message, or a lock taken in one form would not be seen in the
-- other (and the handler would run twice).
local core = require "mqlease.core"
local policy = require "mqlease.policy"

describe("the policy's keys written by the core", function()
  it("are key_base's for plain, empty, brace, binary and long ids, under any prefix", function()
    local ids = { "7F00000100002A9F0000000A", "", "}", "}x", "{a}", "a}b{", "%", "\0", "\0\255\1",
      ("x"):rep(300), ("}"):rep(70), "id with spaces", "ünïcödé" }
    for i = 0, 255 do ids[#ids + 1] = string.char(i) .. "tail" end
    for _, prefix in ipairs({ "mqlease:", "", "{tag}", ("p"):rep(200) }) do
      for _, id in ipairs(ids) do
        for _, suffix in ipairs({ "lock", "fence", "done" }) do
          assert.equal(policy.key_base(id, prefix) .. suffix, core.eo_key(prefix, id, suffix),
            ("id %q prefix %q"):format(id, prefix))
        end
      end
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

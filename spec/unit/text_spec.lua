local text = require "mqlease.text"

describe("mqlease.text.escape", function()
  it("keeps printable ASCII and escapes control bytes, quotes, backslashes and non-ASCII", function()
    assert.equal("plain text 123", text.escape("plain text 123"))
    assert.equal('a\\nb\\tc\\rd\\"e\\\\f', text.escape('a\nb\tc\rd"e\\f'))
    assert.equal("\\x00\\x1b[31m\\x7f\\xc3\\xa9", text.escape("\0\27[31m\127é"))
  end)
end)

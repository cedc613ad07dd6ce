-- mqlease.text: untrusted strings (a message's id, tag, keys, properties and
-- body are all chosen by its producer) made safe to print on one line of a
-- terminal or a log: escape(s) writes control bytes, quotes, backslashes and
-- non-ASCII bytes as escapes, so no value can end a line, forge the next one
-- or send a terminal escape sequence.

local _M = {}

local NAMED = { ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r", ['"'] = '\\"', ["\\"] = "\\\\" }

local function one(c)
  return NAMED[c] or ("\\x%02x"):format(c:byte())
end

-- s with every byte that is not printable ASCII (and " and \) escaped.
function _M.escape(s)
  return (s:gsub('[%c"\\\128-\255]', one))
end

return _M

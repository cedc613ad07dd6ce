-- mqlease.handler: loads a handler file -- what `mqlease run HANDLER.lua` and
-- the lab's workers (mqlease.lab.worker) both run under mqlease.run. The file
-- returns a function, or a table { handler =, policy =, on_error = }.
--
--   local loaded = assert(require("mqlease.handler").load("handler.lua"))
--   mqlease.run(c, loaded.handler, { policy = loaded.policy, on_error = loaded.on_error })

local type, pairs, pcall, tostring, loadfile = type, pairs, pcall, tostring, loadfile

local _M = {}

local FIELDS = { handler = "function", policy = "function", on_error = "function" }

-- Returns { handler =, policy =, on_error = } or nil, message.
function _M.load(path)
  local chunk, err = loadfile(path)
  if not chunk then return nil, err end
  local ok, v = pcall(chunk)
  if not ok then return nil, ("%s: %s"):format(path, tostring(v)) end
  if type(v) == "function" then return { handler = v } end
  if type(v) ~= "table" then
    return nil, ("%s must return a function or a table {handler=, policy=, on_error=} (got %s)"):format(path, type(v))
  end
  for k, val in pairs(v) do
    local want = FIELDS[k]
    if not want then
      return nil, ("%s: unknown field '%s' in the returned table (known: handler, on_error, policy)"):format(path, tostring(k))
    end
    if type(val) ~= want then
      return nil, ("%s: field '%s' must be a %s (got %s)"):format(path, k, want, type(val))
    end
  end
  if not v.handler then return nil, ("%s: the returned table has no 'handler' function"):format(path) end
  return { handler = v.handler, policy = v.policy, on_error = v.on_error }
end

return _M

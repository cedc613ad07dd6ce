-- mqlease.lab.workload: what a lab message carries and how long its handler
-- takes.
--
-- Handler times are drawn once per message at send time and travel in the
-- body, so a slow job stays slow when it comes back. The heavy-tailed shape is
-- the one of the incidents mqlease was born from (bench/replay.lua uses it too):
--
--   99 %   exponential with the given mean, cut at p99
--   1 %    Pareto from p99, P(T > t) = 1 % (p99/t)^a, a = ln 10 / ln(p999/p99),
--          cut at max
--
-- so p99 and p999 are what the table says ({ mean = 1, p99 = 6, p999 = 252,
-- max = 300 } is the incident: the slowest thousandth 42 times the p99).
-- { fixed = s } is a constant time.
--
-- A body is "SEQ MS POISON " then padding to the body size: SEQ the business
-- key (a retry copy keeps it), MS the handler time in real milliseconds,
-- POISON 1 for a message whose handler always fails.

local exp, log, floor, min = math.exp, math.log, math.floor, math.min
local tonumber = tonumber

local _M = {}

-- Seconds for a uniform draw u in [0, 1) under the distribution d.
function _M.handler_seconds(u, d)
  if d.fixed then return d.fixed end
  if u < 0.99 then
    return min(-d.mean * log(1 - (u / 0.99) * (1 - exp(-d.p99 / d.mean))), d.p99)
  end
  local alpha = log(10) / log(d.p999 / d.p99)
  return min(d.p99 * ((1 - u) / 0.01) ^ (-1 / alpha), d.max)
end

-- The body of message seq: handler time ms (real), poison flag, padded to bytes.
function _M.body(seq, ms, poison, bytes)
  local head = ("%d %d %d "):format(seq, floor(ms + 0.5), poison and 1 or 0)
  if #head >= bytes then return head end
  return head .. ("x"):rep(bytes - #head)
end

-- { seq =, ms =, poison = } of a lab body, or nil for any other body.
function _M.parse(body)
  local seq, ms, poison = body:match("^(%d+) (%d+) ([01]) ")
  if not seq then return nil end
  return { seq = tonumber(seq), ms = tonumber(ms), poison = poison == "1" }
end

return _M

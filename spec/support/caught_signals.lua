-- The signals this process has a handler for, from /proc/self/status
-- (SigCgt): { [signo] = true }, the low 32 of them (LuaJIT's numbers hold no
-- 64-bit mask exactly).
return function()
  local f = assert(io.open("/proc/self/status"))
  local status = f:read("a")
  f:close()
  local mask = tonumber(assert(status:match("\nSigCgt:%s*(%x+)")):sub(-8), 16)
  local set = {}
  for signo = 1, 32 do
    if math.floor(mask / 2 ^ (signo - 1)) % 2 == 1 then set[signo] = true end
  end
  return set
end

-- examples/nginx/mqlease_app.lua -- the handler module nginx.conf starts.
--
-- A handler runs as a light thread inside an nginx worker: use the
-- non-blocking APIs (ngx.sleep, cosockets: lua-resty-http, lua-resty-mysql,
-- ...; mqlease.redis) and never a blocking call such as os.execute or
-- io.popen, which would stall every request of the worker.

if not ngx then
  io.stderr:write("examples/nginx/mqlease_app.lua is a module that nginx loads: "
    .. "start nginx with examples/nginx/nginx.conf (docs/openresty.md)\n")
  os.exit(1)
end

local mqlease = require "mqlease"
local mqlease_ngx = require "mqlease.ngx"

local _M = {}

local ENDPOINTS = os.getenv("MQLEASE_ENDPOINTS") or "127.0.0.1:8081"
local REDIS = os.getenv("MQLEASE_REDIS") or "127.0.0.1:6379"

-- The business: true on success; false/nil, err (or an error) to retry later.
function _M.handle(m, lease)
  ngx.log(ngx.INFO, "order ", m.id, " (attempt ", m.delivery_attempt, "): ", m.body)
  ngx.sleep(0.5)                      -- stands for real work (an HTTP call, a query)
  -- under the exactly-once policy, a write to another system takes
  -- lease.fence, so that a stale owner's late write can be refused there;
  -- read it only where a write takes it (its first read asks Redis for it)
  return true
end

function _M.start()
  mqlease_ngx.start {
    consumers = {
      { endpoints = ENDPOINTS, group = "orders-nginx", topic = "orders", invisible = 30 },
    },
    handler = _M.handle,
    concurrency = 32,                 -- handlers at once, per consumer and worker
    grace = 20,                       -- on quit/reload: seconds running handlers get to finish
    policy = mqlease.policy.exactly_once { redis = REDIS },
  }
end

return _M

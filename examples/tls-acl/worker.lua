-- examples/tls-acl/worker.lua -- a consumer of a proxy that speaks TLS and
-- checks ACL signatures.
--
--   MQLEASE_ACCESS_KEY=ak MQLEASE_SECRET_KEY=sk \
--     lua5.4 worker.lua [ENDPOINTS [GROUP [TOPIC [CA_FILE|system [SERVER_NAME]]]]]
--
-- (defaults: 127.0.0.1:8081 worker tasks, and no TLS: bare, it runs against
-- `mqlease devbroker --topic tasks`, which speaks plaintext and takes any
-- signature; CA_FILE checks the proxy against that file, "system" against the
-- system CAs.)
--
-- The secret key comes from the environment, never from the command line (a
-- flag shows in ps). mqlease signs every call with it (HMAC-SHA1, the official
-- clients' MQv2 signature); the consumer keeps only the access key in
-- consumer.options, so no message reaches the secret. tls = true checks the
-- proxy's certificate against the system CAs; a table names a CA file, a
-- client certificate (cert_file + key_file) or the name to check.
local mqlease = require "mqlease"

local endpoints, group, topic = arg[1] or "127.0.0.1:8081", arg[2] or "worker", arg[3] or "tasks"
local ca_file, server_name = arg[4], arg[5]

local access_key, secret_key = os.getenv("MQLEASE_ACCESS_KEY"), os.getenv("MQLEASE_SECRET_KEY")
local credentials
if access_key and secret_key then
  credentials = { access_key = access_key, secret_key = secret_key }
end

local tls = false
if ca_file == "system" then
  tls = server_name and { server_name = server_name } or true
elseif ca_file then
  tls = { ca_file = ca_file, server_name = server_name }
else
  io.stderr:write("no CA_FILE: plaintext (give a CA file, or 'system' for the system CAs, for TLS)\n")
end

local consumer, err, code = mqlease.consumer {
  endpoints = endpoints, group = group, topic = topic,
  tls = tls, credentials = credentials,
}
-- a wrong key fails the start with PERMISSION_DENIED, a certificate that does
-- not check out with TLS_HANDSHAKE
if not consumer then error(("cannot start: %s (%s)"):format(err, code)) end

local summary = mqlease.run(consumer, function(m)
  print("handling", m.id, m.body)
  return true
end, { concurrency = 8, signals = true, run_for = tonumber(os.getenv("RUN_FOR") or "") })
print(("received %d, acked %d"):format(summary.received, summary.acked))
consumer:close()

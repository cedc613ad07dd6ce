-- The development rockspec: builds whatever is checked out.
--
--   luarocks --lua-version=5.4 make rockspec/mqlease-scm-1.rockspec            (from a checkout)
--   luarocks --lua-version=5.4 install rockspec/mqlease-scm-1.rockspec         (clones main)
--
-- Builds mqlease.core from src/ and the committed protobuf-c code in proto/gen
-- (regenerate it with `make proto`), and installs the Lua modules and the
-- `mqlease` command. LuaJIT / OpenResty: README "Install".
-- A release copies this file to mqlease-X.Y.Z-1.rockspec with a tag (see
-- mqlease-0.1.0-1.rockspec); keep the build tables of both identical.
package = "mqlease"
version = "scm-1"
source = {
  url = "git+https://github.com/mqlease/mqlease.git",
  branch = "main",
}
description = {
  summary = "RocketMQ 5 SimpleConsumer whose in-flight messages are renewed leases",
  detailed = [[
A Lua module with a C core (grpc C core + protobuf-c) that consumes Apache RocketMQ 5.x
over gRPC and keeps every received message alive as a lease, renewed from a C thread,
until the handler acks, nacks or lets it go.]],
  homepage = "https://github.com/mqlease/mqlease",
  license = "Apache-2.0",
}
dependencies = {
  "lua >= 5.1, < 5.5",
  "argparse >= 0.7",     -- the command's flags (Debian: lua-argparse)
  "luasocket >= 3.0",    -- the command's /metrics listener (Debian: lua-socket)
}
external_dependencies = {
  GRPC = { header = "grpc/grpc.h", library = "grpc" },
  PROTOBUFC = { header = "protobuf-c/protobuf-c.h", library = "protobuf-c" },
  OPENSSL = { header = "openssl/evp.h", library = "crypto" },
  HIREDIS = { header = "hiredis/hiredis.h", library = "hiredis" },
  ZLIB = { header = "zlib.h", library = "z" },
}
build = {
  type = "builtin",
  modules = {
    ["mqlease.core"] = {
      sources = {
        "src/core/mql_backoff.c", "src/core/mql_events.c", "src/core/mql_metrics.c",
        "src/core/mql_util.c", "src/lease/mql_auto.c", "src/lease/mql_body.c",
        "src/lease/mql_codec.c", "src/lease/mql_inbound.c", "src/lease/mql_lease.c",
        "src/lease/mql_pace.c", "src/rocketmq/mql_call.c", "src/rocketmq/mql_client.c",
        "src/rocketmq/mql_producer.c", "src/rocketmq/mql_receive.c", "src/rocketmq/mql_release.c",
        "src/rocketmq/mql_renew.c", "src/rocketmq/mql_session.c", "src/rocketmq/mql_shutdown.c",
        "src/redis/mql_redis.c", "src/redis/mql_redis_cluster.c", "src/redis/mql_redis_link.c",
        "src/lua/lmql_push.c", "src/lua/lmql_redis.c", "src/lua/lmql_signals.c",
        "src/lua/lmqlease.c",
        "proto/gen/apache/rocketmq/v2/definition.pb-c.c",
        "proto/gen/apache/rocketmq/v2/service.pb-c.c", "proto/gen/google/protobuf/duration.pb-c.c",
        "proto/gen/google/protobuf/timestamp.pb-c.c",
      },
      incdirs = { "src/core", "src/lease", "src/rocketmq", "src/redis", "src/lua", "proto/gen", "$(GRPC_INCDIR)", "$(PROTOBUFC_INCDIR)", "$(OPENSSL_INCDIR)", "$(HIREDIS_INCDIR)", "$(ZLIB_INCDIR)" },
      libdirs = { "$(GRPC_LIBDIR)", "$(PROTOBUFC_LIBDIR)", "$(OPENSSL_LIBDIR)", "$(HIREDIS_LIBDIR)", "$(ZLIB_LIBDIR)" },
      libraries = { "grpc", "gpr", "protobuf-c", "hiredis", "crypto", "z", "pthread" },
      defines = { "_GNU_SOURCE" },
    },
    ["mqlease"] = "lua/mqlease/init.lua",
    ["mqlease.cli"] = "lua/mqlease/cli/init.lua",
    ["mqlease.cli.devbroker"] = "lua/mqlease/cli/devbroker.lua",
    ["mqlease.cli.http"] = "lua/mqlease/cli/http.lua",
    ["mqlease.cli.options"] = "lua/mqlease/cli/options.lua",
    ["mqlease.cli.peek"] = "lua/mqlease/cli/peek.lua",
    ["mqlease.cli.run"] = "lua/mqlease/cli/run.lua",
    ["mqlease.cli.send"] = "lua/mqlease/cli/send.lua",
    ["mqlease.config"] = "lua/mqlease/config.lua",
    ["mqlease.consumer"] = "lua/mqlease/consumer.lua",
    ["mqlease.loop.cqueues"] = "lua/mqlease/loop/cqueues.lua",
    ["mqlease.loop.ngx"] = "lua/mqlease/loop/ngx.lua",
    ["mqlease.loop.poll"] = "lua/mqlease/loop/poll.lua",
    ["mqlease.loop.run"] = "lua/mqlease/loop/run.lua",
    ["mqlease.metrics"] = "lua/mqlease/metrics.lua",
    ["mqlease.ngx"] = "lua/mqlease/ngx.lua",
    ["mqlease.policy"] = "lua/mqlease/policy.lua",
    ["mqlease.producer"] = "lua/mqlease/producer.lua",
    ["mqlease.redis"] = "lua/mqlease/redis.lua",
    ["mqlease.retry"] = "lua/mqlease/retry.lua",
    ["mqlease.run"] = "lua/mqlease/run.lua",
    ["mqlease.scheduler"] = "lua/mqlease/scheduler.lua",
    ["mqlease.session"] = "lua/mqlease/session.lua",
    ["mqlease.wait"] = "lua/mqlease/wait.lua",
  },
  install = {
    bin = { mqlease = "bin/mqlease" },
  },
}

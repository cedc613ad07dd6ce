-- luarocks make rockspec/mqlease-scm-1.rockspec
-- Builds mqlease.core from src/ and the committed protobuf-c code in proto/gen
-- (regenerate it with `make proto`), and installs the Lua modules.
package = "mqlease"
version = "scm-1"
source = { url = "git+file:///dev/null" } -- built from a checkout with `luarocks make`
description = {
  summary = "RocketMQ 5 SimpleConsumer whose in-flight messages are renewed leases",
  detailed = [[
A Lua module with a C core (grpc C core + protobuf-c) that consumes Apache RocketMQ 5.x
over gRPC and keeps every received message alive as a lease, renewed from a C thread,
until the handler acks, nacks or lets it go.]],
  license = "Apache-2.0",
}
dependencies = { "lua >= 5.1, < 5.5" }
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
        "src/mql_util.c", "src/mql_events.c", "src/mql_lease.c", "src/mql_codec.c",
        "src/mql_call.c", "src/mql_metrics.c", "src/mql_client.c", "src/mql_shutdown.c",
        "src/mql_redis.c", "src/lmqlease.c", "src/mql_body.c", "src/mql_inbound.c",
        "proto/gen/apache/rocketmq/v2/definition.pb-c.c",
        "proto/gen/apache/rocketmq/v2/service.pb-c.c",
        "proto/gen/google/protobuf/duration.pb-c.c",
        "proto/gen/google/protobuf/timestamp.pb-c.c",
      },
      incdirs = { "src", "proto/gen", "$(GRPC_INCDIR)", "$(PROTOBUFC_INCDIR)", "$(OPENSSL_INCDIR)", "$(HIREDIS_INCDIR)", "$(ZLIB_INCDIR)" },
      libdirs = { "$(GRPC_LIBDIR)", "$(PROTOBUFC_LIBDIR)", "$(OPENSSL_LIBDIR)", "$(HIREDIS_LIBDIR)", "$(ZLIB_LIBDIR)" },
      libraries = { "grpc", "gpr", "protobuf-c", "hiredis", "crypto", "z", "pthread" },
      defines = { "_GNU_SOURCE" },
    },
    ["mqlease"] = "lua/mqlease/init.lua",
    ["mqlease.config"] = "lua/mqlease/config.lua",
    ["mqlease.consumer"] = "lua/mqlease/consumer.lua",
    ["mqlease.producer"] = "lua/mqlease/producer.lua",
    ["mqlease.session"] = "lua/mqlease/session.lua",
    ["mqlease.wait"] = "lua/mqlease/wait.lua",
    ["mqlease.metrics"] = "lua/mqlease/metrics.lua",
    ["mqlease.policy"] = "lua/mqlease/policy.lua",
    ["mqlease.redis"] = "lua/mqlease/redis.lua",
    ["mqlease.run"] = "lua/mqlease/run.lua",
    ["mqlease.scheduler"] = "lua/mqlease/scheduler.lua",
  },
}

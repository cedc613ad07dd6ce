-- The rockspec of release 0.1.0, and the template of the next ones: copy it to
-- mqlease-X.Y.Z-1.rockspec, set version and tag (the tag vX.Y.Z must exist in
-- the repository), keep the build table identical to mqlease-scm-1.rockspec's.
--
--   luarocks --lua-version=5.4 install rockspec/mqlease-0.1.0-1.rockspec
package = "mqlease"
version = "0.1.0-1"
source = {
  url = "git+https://github.com/mqlease/mqlease.git",
  tag = "v0.1.0",
}
description = {
  summary = "RocketMQ 5 SimpleConsumer whose in-flight messages are renewed leases",
  detailed = [[
A Lua module with a C core (grpc C core + protobuf-c) that consumes Apache RocketMQ 5.x
over gRPC and keeps every received message alive as a lease, renewed from a C thread,
until the handler acks, nacks or lets it go. Installs the module, the `mqlease` command
and the `mqlease-devbroker` dev broker. Linux only; needs OpenSSL >= 3 (EVP_Q_mac signs
ACL requests), grpc, protobuf-c, hiredis and zlib.

The library needs no other rock. The command needs argparse, luasocket (its /metrics
listener) and lua-cjson (--json): install them with
`luarocks install argparse luasocket lua-cjson` (Debian: lua-argparse lua-socket
lua-cjson); the command names a missing one.]],
  homepage = "https://github.com/mqlease/mqlease",
  license = "Apache-2.0",
}
supported_platforms = { "linux" }
dependencies = {
  "lua >= 5.1, < 5.5",
}
-- OpenSSL >= 3: the core signs with EVP_Q_mac (OpenSSL 3.0's one-shot MAC).
external_dependencies = {
  GRPC = { header = "grpc/grpc.h", library = "grpc" },
  PROTOBUFC = { header = "protobuf-c/protobuf-c.h", library = "protobuf-c" },
  OPENSSL = { header = "openssl/evp.h", library = "crypto" },
  HIREDIS = { header = "hiredis/hiredis.h", library = "hiredis" },
  ZLIB = { header = "zlib.h", library = "z" },
}
-- `make core` (the Makefile; libraries from pkg-config) builds the C module and the dev
-- broker into build/rock against the Lua luarocks targets; luarocks installs the files.
build = {
  type = "make",
  build_target = "core",
  build_variables = {
    BUILD = "build/rock", LUA_INC = "$(LUA_INCDIR)", CC = "$(CC)", CFLAGS = "$(CFLAGS)",
  },
  install_pass = false,
  install = {
    lib = { ["mqlease.core"] = "build/rock/mqlease/core.so" },
    lua = {
      ["mqlease.cli.devbroker"] = "lua/mqlease/cli/devbroker.lua",
      ["mqlease.cli.http"] = "lua/mqlease/cli/http.lua",
      ["mqlease.cli"] = "lua/mqlease/cli/init.lua",
      ["mqlease.cli.lab"] = "lua/mqlease/cli/lab.lua",
      ["mqlease.cli.options"] = "lua/mqlease/cli/options.lua",
      ["mqlease.cli.peek"] = "lua/mqlease/cli/peek.lua",
      ["mqlease.cli.run"] = "lua/mqlease/cli/run.lua",
      ["mqlease.cli.send"] = "lua/mqlease/cli/send.lua",
      ["mqlease.cli.recall"] = "lua/mqlease/cli/recall.lua",
      ["mqlease.config"] = "lua/mqlease/config.lua",
      ["mqlease.consumer"] = "lua/mqlease/consumer.lua",
      ["mqlease.handler"] = "lua/mqlease/handler.lua",
      ["mqlease"] = "lua/mqlease/init.lua",
      ["mqlease.lab.analyze"] = "lua/mqlease/lab/analyze.lua",
      ["mqlease.lab"] = "lua/mqlease/lab/init.lua",
      ["mqlease.lab.logs"] = "lua/mqlease/lab/logs.lua",
      ["mqlease.lab.report"] = "lua/mqlease/lab/report.lua",
      ["mqlease.lab.experiment"] = "lua/mqlease/lab/experiment.lua",
      ["mqlease.lab.scenario"] = "lua/mqlease/lab/scenario.lua",
      ["mqlease.lab.worker"] = "lua/mqlease/lab/worker.lua",
      ["mqlease.lab.workload"] = "lua/mqlease/lab/workload.lua",
      ["mqlease.launch"] = "lua/mqlease/launch.lua",
      ["mqlease.lease"] = "lua/mqlease/lease.lua",
      ["mqlease.live"] = "lua/mqlease/live.lua",
      ["mqlease.loop.cqueues"] = "lua/mqlease/loop/cqueues.lua",
      ["mqlease.loop"] = "lua/mqlease/loop/init.lua",
      ["mqlease.loop.ngx"] = "lua/mqlease/loop/ngx.lua",
      ["mqlease.loop.poll"] = "lua/mqlease/loop/poll.lua",
      ["mqlease.loop.scheduler"] = "lua/mqlease/loop/scheduler.lua",
      ["mqlease.message"] = "lua/mqlease/message.lua",
      ["mqlease.metrics"] = "lua/mqlease/metrics.lua",
      ["mqlease.ngx"] = "lua/mqlease/ngx.lua",
      ["mqlease.policy"] = "lua/mqlease/policy.lua",
      ["mqlease.producer"] = "lua/mqlease/producer.lua",
      ["mqlease.redis"] = "lua/mqlease/redis.lua",
      ["mqlease.retry"] = "lua/mqlease/retry.lua",
      ["mqlease.router"] = "lua/mqlease/router.lua",
      ["mqlease.run"] = "lua/mqlease/run.lua",
      ["mqlease.run.drain"] = "lua/mqlease/run/drain.lua",
      ["mqlease.run.life"] = "lua/mqlease/run/life.lua",
      ["mqlease.run.receiver"] = "lua/mqlease/run/receiver.lua",
      ["mqlease.run.releaser"] = "lua/mqlease/run/releaser.lua",
      ["mqlease.run.sequencer"] = "lua/mqlease/run/sequencer.lua",
      ["mqlease.run.task"] = "lua/mqlease/run/task.lua",
      ["mqlease.run.waiter"] = "lua/mqlease/run/waiter.lua",
      ["mqlease.run.worker"] = "lua/mqlease/run/worker.lua",
      ["mqlease.scheduler"] = "lua/mqlease/scheduler.lua",
      ["mqlease.signals"] = "lua/mqlease/signals.lua",
      ["mqlease.text"] = "lua/mqlease/text.lua",
      ["mqlease.trace"] = "lua/mqlease/trace.lua",
      ["mqlease.transaction"] = "lua/mqlease/transaction.lua",
      ["mqlease.policy.batch"] = "lua/mqlease/policy/batch.lua",
      ["mqlease.policy.transaction"] = "lua/mqlease/policy/transaction.lua",
    },
    bin = { mqlease = "bin/mqlease", ["mqlease-devbroker"] = "build/rock/mqlease-devbroker" },
  },
}

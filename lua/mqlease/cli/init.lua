-- mqlease.cli: the `mqlease` command (bin/mqlease) -- parses the arguments and
-- runs one subcommand. main returns the exit code; it never calls os.exit, so
-- it can be driven from a spec.
--
--   os.exit(require("mqlease.cli").main(arg, { root = checkout_dir_or_nil }))

local options = require "mqlease.cli.options"

local _M = {}

local COMMANDS = {
  run = "mqlease.cli.run",
  send = "mqlease.cli.send",
  recall = "mqlease.cli.recall",
  peek = "mqlease.cli.peek",
  devbroker = "mqlease.cli.devbroker",
  lab = "mqlease.cli.lab",
}

-- ctx.root: the checkout bin/mqlease runs from (nil when installed);
-- ctx.env: the MQLEASE_* variables (default: the process environment).
function _M.main(argv, ctx)
  ctx = ctx or {}
  local ok, parsed = options.parse(argv or {}, ctx.env or options.environment())
  if not ok then
    local name = parsed.command and ("mqlease " .. parsed.command) or "mqlease"
    io.stderr:write(("%s: %s\nTry '%s --help'.\n"):format(name, parsed.message, name))
    return parsed.code
  end
  if parsed.help or parsed.version then
    io.stdout:write(parsed.help or parsed.version, "\n")
    return options.EXIT.ok
  end
  return require(COMMANDS[parsed.command]).main(parsed.opts, ctx.root)
end

return _M

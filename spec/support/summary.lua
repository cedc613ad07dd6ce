-- A busted output handler: busted's own terminal output, then one closing line
-- "busted: N passed, N failed, N skipped" that CI recognises.
return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.utfTerminal"(options)
  local passed, failed, skipped = 0, 0, 0
  busted.subscribe({ "test", "end" }, function(_, _, status)
    if status == "success" then passed = passed + 1
    elseif status == "pending" then skipped = skipped + 1
    else failed = failed + 1 end
    return nil, true
  end)
  -- errors outside a test (a failing setup, a file that does not load) fail the run too;
  -- errors inside a test are counted by its "test end" above
  busted.subscribe({ "error" }, function(element)
    if not (element and element.descriptor == "it") then failed = failed + 1 end
    return nil, true
  end)
  busted.subscribe({ "suite", "end" }, function()
    io.write(("\nbusted: %d passed, %d failed, %d skipped\n"):format(passed, failed, skipped))
    io.flush()
    return nil, true
  end)
  return handler
end

-- mqlease.wait: the name mqlease.loop had before 0.2, kept so that
-- `require("mqlease.wait").use(adapter)` keeps working. New code requires
-- mqlease.loop; both names give the same table.
return require "mqlease.loop"

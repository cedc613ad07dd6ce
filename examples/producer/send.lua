-- examples/producer/send.lua -- sending: a plain message, FIFO messages of one
-- message group, and a delayed message.
--
--   lua5.4 send.lua [ENDPOINTS [TOPIC [FIFO_TOPIC [DELAY_TOPIC]]]]
--   (defaults: 127.0.0.1:8081 tasks, where `mqlease devbroker` listens; no FIFO or delay topic)
--
-- RocketMQ 5 types each topic (message.type): a FIFO topic takes messages with
-- a message_group, which its consumers get in order within the group; a DELAY
-- topic takes messages with delay (seconds from now) or deliver_at (epoch
-- seconds). A message is one or the other, never both.
local mqlease = require "mqlease"

local endpoints, topic = arg[1] or "127.0.0.1:8081", arg[2] or "tasks"
local fifo_topic, delay_topic = arg[3], arg[4]

local producer = assert(mqlease.producer { endpoints = endpoints })

local id, err, code = producer:send(topic, "sleep=0.5", {
  tag = "TagA", keys = { "order-42" }, properties = { source = "example" },
})
if not id then error(("send failed: %s (%s)"):format(err, code)) end
print("sent", id)

if fifo_topic then
  -- in order within "order-42": created, paid, shipped
  for _, step in ipairs({ "created", "paid", "shipped" }) do
    print("sent", assert(producer:send(fifo_topic, step, { message_group = "order-42" })))
  end
end

if delay_topic then
  print("sent, visible in 30 s:", assert(producer:send(delay_topic, "reminder", { delay = 30 })))
end

producer:close()

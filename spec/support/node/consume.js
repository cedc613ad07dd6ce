#!/usr/bin/env node
'use strict';
// usage: node consume.js ENDPOINT GROUP TOPIC EXPECT_COUNT TIMEOUT_SECONDS
// SimpleConsumer (official RocketMQ 5 Node.js client, plaintext gRPC, subscription "*",
// awaitDuration 5 s) that repeatedly receives up to 16 messages with a 15 s invisible duration
// and acks each one, until EXPECT_COUNT messages arrived or TIMEOUT_SECONDS passed
// (EXPECT_COUNT 0 = collect until the timeout). A timeout is not an error: whatever arrived is
// printed and the caller compares.
// stdout: ONE JSON line [{id, body_hex, tag, keys, properties, delivery_attempt}] in arrival
// order; exit 0. Startup errors: message on stderr, exit 1. Env: MQLEASE_NODE_DEBUG.
// Note: a brand-new group may start at the end of the queues, so start this BEFORE producing.
const { SimpleConsumer } = require('rocketmq-client-nodejs');
const { makeLogger, fail, printAndExit, shutdownQuietly, watchdog, mapToObject } = require('./common');

const NAME = 'consume.js';
const BATCH = 16;
const INVISIBLE_MS = 15000; // the proxy rejects < 10 s
const AWAIT_MS = 5000;      // long-poll time per receive; the proxy allows 5..20 s

async function main() {
  const [ endpoint, group, topic, expectArg, timeoutArg ] = process.argv.slice(2);
  const expect = Number(expectArg);
  const timeoutS = Number(timeoutArg);
  if (!endpoint || !group || !topic || !Number.isInteger(expect) || expect < 0 || !(timeoutS > 0)) {
    throw new Error('usage: node consume.js ENDPOINT GROUP TOPIC EXPECT_COUNT TIMEOUT_SECONDS');
  }
  const deadline = Date.now() + timeoutS * 1000;
  // Startup + the last long poll may overrun the deadline; beyond this something hangs.
  watchdog(NAME, timeoutS + 30);

  const consumer = new SimpleConsumer({
    endpoints: endpoint,
    namespace: '',
    sslEnabled: false,
    consumerGroup: group,
    subscriptions: new Map([[ topic, '*' ]]),
    awaitDuration: AWAIT_MS,
    logger: makeLogger(NAME),
  });
  await consumer.startup();
  const out = [];
  try {
    while ((expect === 0 || out.length < expect) && Date.now() < deadline) {
      let msgs;
      try {
        msgs = await consumer.receive(BATCH, INVISIBLE_MS);
      } catch (err) {
        // Keep polling until the deadline (the broker may be busy); report it on stderr.
        process.stderr.write(`${NAME}: warning: receive failed: ${err && err.message}\n`);
        await new Promise(resolve => setTimeout(resolve, 500));
        continue;
      }
      for (const m of msgs) {
        try {
          await consumer.ack(m);
        } catch (err) {
          process.stderr.write(`${NAME}: warning: ack of ${m.messageId} failed: ${err && err.message}\n`);
        }
        out.push({
          id: m.messageId,
          body_hex: Buffer.from(m.body).toString('hex'),
          tag: m.tag ?? null,
          keys: m.keys,
          properties: mapToObject(m.properties),
          delivery_attempt: m.deliveryAttempt ?? null,
        });
      }
    }
  } finally {
    await shutdownQuietly(NAME, consumer);
  }
  printAndExit(out);
}

main().catch(err => fail(NAME, err));

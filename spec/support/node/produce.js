#!/usr/bin/env node
'use strict';
// usage: node produce.js ENDPOINT TOPIC COUNT [TAG]
// Sends COUNT normal messages with the official RocketMQ 5 Node.js client (plaintext gRPC):
//   body  = "node-interop-<i>-" followed by the bytes 00 ff 01 (binary-safe check)
//   tag   = TAG (default "node"), keys = ["k<i>"], properties = {idx: "<i>"}
// stdout: ONE JSON line [{id, body_hex, tag, keys, properties}] in send order; exit 0.
// Errors: message on stderr, exit 1. Env: MQLEASE_NODE_TIMEOUT (s, default 60), MQLEASE_NODE_DEBUG.
const { Producer } = require('rocketmq-client-nodejs');
const { makeLogger, fail, printAndExit, shutdownQuietly, watchdog, mapToObject } = require('./common');

const NAME = 'produce.js';

async function main() {
  const [ endpoint, topic, countArg, tagArg ] = process.argv.slice(2);
  const count = Number(countArg);
  if (!endpoint || !topic || !Number.isInteger(count) || count < 0) {
    throw new Error('usage: node produce.js ENDPOINT TOPIC COUNT [TAG]');
  }
  const tag = tagArg || 'node';
  watchdog(NAME, Number(process.env.MQLEASE_NODE_TIMEOUT || 60));

  const producer = new Producer({
    endpoints: endpoint,
    namespace: '',
    sslEnabled: false,
    topic, // prefetch the route, so a missing topic fails at startup
    logger: makeLogger(NAME),
  });
  await producer.startup();
  const out = [];
  try {
    for (let i = 0; i < count; i++) {
      const body = Buffer.concat([ Buffer.from(`node-interop-${i}-`), Buffer.from([ 0x00, 0xff, 0x01 ]) ]);
      const keys = [ `k${i}` ];
      const properties = new Map([[ 'idx', String(i) ]]);
      const receipt = await producer.send({ topic, tag, keys, properties, body });
      out.push({ id: receipt.messageId, body_hex: body.toString('hex'), tag, keys, properties: mapToObject(properties) });
    }
  } finally {
    await shutdownQuietly(NAME, producer);
  }
  printAndExit(out);
}

main().catch(err => fail(NAME, err));

'use strict';
// Shared helpers for produce.js / consume.js (the Node.js interop peer of the specs).
// Contract with the specs: stdout carries exactly ONE JSON line; everything else goes to stderr.
const util = require('node:util');

// The client's default logger (egg-logger) writes ~/logs/rocketmq/rocketmq_client_nodejs.log.
// Ours keeps the home dir clean and stdout free. The client logs every retry as an error, so
// by default nothing is printed and the distinct client error lines are remembered for fail();
// MQLEASE_NODE_DEBUG=1 prints all client log lines to stderr.
const verbose = !!process.env.MQLEASE_NODE_DEBUG;
const clientErrors = new Set();

function makeLogger(name) {
  const emit = level => (...args) => {
    const line = util.format(...args);
    if (level === 'error') clientErrors.add(line.split('\n')[0].replace(/, clientId=[^,]*/, ''));
    if (verbose) process.stderr.write(`[${name} ${level}] ${line}\n`);
  };
  return {
    info: emit('info'),
    debug: emit('debug'),
    warn: emit('warn'),
    error: emit('error'),
    close: () => {},
  };
}

function fail(name, err) {
  let msg = verbose && err && err.stack ? err.stack : (err && err.message) || String(err);
  const bare = msg.replace(/, clientId=[^,]*/, '');
  const causes = [ ...clientErrors ].filter(e => !e.includes(bare) && !bare.includes(e)).slice(-2);
  for (const e of causes) msg += `\n  client: ${e}`;
  process.stderr.write(`${name}: error: ${msg}\n`);
  process.exit(1);
}

// Prints the single JSON line, then exits once stdout has been flushed (grpc-js keeps timers
// and channels alive, so the process would otherwise linger).
function printAndExit(value) {
  process.stdout.write(JSON.stringify(value) + '\n', () => process.exit(0));
}

// client.shutdown() sends NotifyClientTermination and closes the telemetry streams; never let
// a slow or dead broker keep the process alive because of it.
async function shutdownQuietly(name, client, ms = 10000) {
  let timer;
  try {
    await Promise.race([
      client.shutdown(),
      new Promise(resolve => { timer = setTimeout(() => {
        process.stderr.write(`${name}: warning: shutdown did not finish within ${ms} ms\n`);
        resolve();
      }, ms); }),
    ]);
  } catch (err) {
    process.stderr.write(`${name}: warning: shutdown failed: ${err && err.message}\n`);
  } finally {
    clearTimeout(timer);
  }
}

// The client's startup waits for the first Settings reply with no timeout of its own.
function watchdog(name, seconds) {
  const t = setTimeout(() => fail(name, new Error(`gave up after ${seconds} s (broker unreachable or hung?)`)),
    seconds * 1000);
  t.unref();
  return t;
}

function mapToObject(m) {
  return m ? Object.fromEntries(m) : {};
}

module.exports = { makeLogger, fail, printAndExit, shutdownQuietly, watchdog, mapToObject };

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { checkServerUrl } from '../src/server-url.js';

// The agent sends its connection token when it connects: plain ws:// is allowed only to this
// machine, or to another one when the operator says --insecure.

describe("the agent's --server URL", () => {
  for (const url of ['wss://rampart.example.com/agent', 'wss://203.0.113.9:8443/agent', 'ws://127.0.0.1:8080/agent', 'ws://127.9.9.9/agent', 'ws://localhost:8080/agent', 'ws://[::1]:8080/agent']) {
    test(`${url} is accepted`, () => assert.equal(checkServerUrl(url, false), url));
  }
  for (const url of ['ws://rampart.example.com/agent', 'ws://203.0.113.9:8080/agent', 'ws://10.0.0.2/agent', 'ws://[2001:db8::1]/agent', 'ws://localhost.example.com/agent']) {
    test(`${url} is refused unless --insecure`, () => {
      assert.throws(() => checkServerUrl(url, false), /plain WebSocket to another machine.*wss:\/\/.*--insecure/);
      assert.equal(checkServerUrl(url, true), url);
    });
  }
  for (const url of ['http://127.0.0.1:8080/agent', 'rampart.example.com', 'wss://user:pw@rampart.example.com/agent']) {
    test(`${url} is refused`, () => assert.throws(() => checkServerUrl(url, true), /--server must/));
  }
});

// RequestGuard: which Host, Origin and Content-Type a lab server takes (request-guard.ts).
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { networkInterfaces } from 'node:os';
import { test } from 'node:test';
import { RequestGuard, hostHeaderName } from '../../src/capture/request-guard.js';

const req = (headers: Record<string, string>, method = 'GET') => ({ method, headers }) as unknown as IncomingMessage;

test('Host header names: ports and IPv6 brackets are stripped, case and a trailing dot ignored; malformed ones are undefined', () => {
  assert.equal(hostHeaderName('LocalHost:8000'), 'localhost');
  assert.equal(hostHeaderName('[::1]:9'), '::1');
  assert.equal(hostHeaderName('proxy.lab.svc.'), 'proxy.lab.svc');
  for (const bad of ['', 'a b', 'user@host', 'host/path', '[::1', '[::1]x', 'h:port']) assert.equal(hostHeaderName(bad), undefined, bad);
});

test('a loopback-bound server answers loopback names and the names it was given, nothing else', () => {
  const guard = new RequestGuard({ listenHost: '127.0.0.1', allowedHosts: ['Proxy.Lab.svc'] });
  for (const host of ['127.0.0.1:1', '127.8.9.10', 'localhost', '[::1]:5', 'proxy.lab.svc:8100'])
    assert.equal(guard.checkOrigin(req({ host })), undefined, host);
  for (const host of ['attacker.example', 'localhost.attacker.example', '192.0.2.77', 'proxy.lab.svc.evil', ''])
    assert.equal(guard.checkOrigin(req({ host }))?.status, 403, host);
  assert.equal(guard.checkOrigin(req({})), undefined, 'HTTP/1.0 without Host: a local tool');
});

test('a wildcard-bound server also answers on every address of this machine, not on other addresses', () => {
  const guard = new RequestGuard({ listenHost: '0.0.0.0' });
  const own = Object.values(networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal);
  assert.ok(own, 'this machine has a non-loopback IPv4 address');
  assert.equal(guard.checkOrigin(req({ host: `${own.address}:8100` })), undefined);
  assert.equal(guard.checkOrigin(req({ host: '203.0.113.9:8100' }))?.status, 403);
  assert.equal(guard.checkOrigin(req({ host: '0.0.0.0' }))?.status, 403, 'the wildcard itself is no name');
});

test("Origin: only the server's own origin", () => {
  const guard = new RequestGuard({ listenHost: '127.0.0.1' });
  assert.equal(guard.checkOrigin(req({ host: '127.0.0.1:8000', origin: 'http://127.0.0.1:8000' })), undefined);
  for (const origin of ['http://127.0.0.1:8001', 'https://127.0.0.1:8000', 'null', 'http://localhost:8000', 'file://']) {
    assert.equal(guard.checkOrigin(req({ host: '127.0.0.1:8000', origin }))?.status, 403, origin);
  }
  assert.equal(guard.checkOrigin(req({ origin: 'http://127.0.0.1:8000' }))?.status, 403, 'an Origin without a Host is never "own"');
});

test('Content-Type: POST, PUT and PATCH bodies must be application/json; GET and empty POSTs pass', () => {
  const guard = new RequestGuard({ listenHost: '127.0.0.1' });
  for (const type of ['application/json', 'application/json; charset=utf-8', 'Application/JSON;charset=UTF-8'])
    assert.equal(guard.checkContentType(req({ 'content-type': type, 'content-length': '2' }, 'POST')), undefined, type);
  for (const type of [
    'text/plain',
    'text/plain;charset=UTF-8',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/jsonx',
    'application/json-seq',
  ]) {
    const refusal = guard.checkContentType(req({ 'content-type': type, 'content-length': '2' }, 'POST'));
    assert.equal(refusal?.status, 415, type);
    assert.match(refusal!.message, /must be application\/json/);
  }
  assert.equal(guard.checkContentType(req({ 'content-length': '2' }, 'PUT'))?.status, 415, 'a body without a type');
  assert.equal(guard.checkContentType(req({ 'transfer-encoding': 'chunked' }, 'PATCH'))?.status, 415, 'a chunked body without a type');
  assert.equal(guard.checkContentType(req({ 'content-length': '0' }, 'POST')), undefined, 'no body');
  assert.equal(guard.checkContentType(req({}, 'POST')), undefined, 'no body, no length');
  assert.equal(guard.checkContentType(req({ 'content-type': 'text/plain' }, 'GET')), undefined);
});

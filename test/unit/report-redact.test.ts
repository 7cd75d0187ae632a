// A shared report names sessions by an alias, never by the session id (the session's API key).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sessionAlias, withoutSessionKey } from '../../src/report/redact-session.js';
import { decodePathSegment, parseRequestTarget } from '../../src/capture/http-util.js';

test('withoutSessionKey replaces the id in every string and key, deeply, and leaves the input alone', () => {
  const id = 's0123456789abcdef01234567';
  const data = {
    session_id: id,
    title: `x.jsonl (session ${id})`,
    turns: [{ trace_id: `${id}/n1`, ids: [1, 2] }],
    byId: { [id]: true },
    n: 3,
    none: null,
  };
  const out = withoutSessionKey(data, id);
  assert.ok(!JSON.stringify(out).includes(id));
  const alias = sessionAlias(id);
  assert.match(alias, /^session-[0-9a-f]{12}$/);
  assert.deepEqual(out, {
    session_id: alias,
    title: `x.jsonl (session ${alias})`,
    turns: [{ trace_id: `${alias}/n1`, ids: [1, 2] }],
    byId: { [alias]: true },
    n: 3,
    none: null,
  });
  assert.equal(data.session_id, id, 'the input is not mutated');
  assert.notEqual(sessionAlias('another'), alias, 'aliases still tell sessions apart');
});

test('request targets and path segments that are not URLs parse to undefined instead of throwing', () => {
  assert.equal(parseRequestTarget('//[')?.pathname, '//[', 'not a host: a path, which then matches no route');
  assert.equal(parseRequestTarget('http://[bad'), undefined);
  assert.equal(parseRequestTarget('*'), undefined);
  assert.equal(parseRequestTarget('//sessions')?.pathname, '//sessions', 'a leading // stays a path');
  assert.equal(parseRequestTarget('/v1/chat/completions?alt=sse')?.search, '?alt=sse');
  assert.equal(parseRequestTarget(undefined)?.pathname, '/');
  assert.equal(decodePathSegment('%zz'), undefined);
  assert.equal(decodePathSegment('%E0%A4%A'), undefined);
  assert.equal(decodePathSegment('a%2Fb'), 'a/b');
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OriginWatch, parseOriginStates } from '../src/origins.js';

// Origin health from HAProxy's `show stat` (origins.ts): readings, and the reports of changes.

const HEADER = '# pxname,svname,qcur,status,check_status,check_code,last_chk';
const csv = (...rows: string[]) => [HEADER, ...rows, ''].join('\n');
const domains = [
  {
    domain: 'shop.example.com',
    origins: [
      { ip: '10.0.0.1', port: 80 },
      { host: 'app.internal', port: 8080 },
    ],
  },
];

test('parseOriginStates reads originN rows: UP, DOWN and MAINT, skipping unchecked ones and other rows', () => {
  const r = parseOriginStates(
    csv(
      'be_shop_example_com,origin0,0,DOWN,L4CON,,Connection refused',
      'be_shop_example_com,origin1,0,UP 2/3,* L7OK,200,OK',
      'be_shop_example_com,BACKEND,0,UP,,,',
      'be_x_example_com,origin0,0,UP,INI,,',
      'be_y_example_com,origin0,0,MAINT (resolution),,,',
      'http_in,FRONTEND,0,OPEN,,,',
    ),
  );
  assert.deepEqual(Object.fromEntries(r), {
    'be_shop_example_com/origin0': { state: 'down', check: 'L4CON', code: undefined },
    'be_shop_example_com/origin1': { state: 'up', check: 'L7OK', code: 200 },
  });
});

test('an origin going down, then up, is reported once each; the same state again is not', () => {
  const w = new OriginWatch();
  assert.deepEqual(w.update(parseOriginStates(csv('be_shop_example_com,origin0,0,UP,L7OK,200,', 'be_shop_example_com,origin1,0,UP,L7OK,200,')), domains), [], 'up at first is no news');
  const down = w.update(parseOriginStates(csv('be_shop_example_com,origin0,0,UP,L7OK,200,', 'be_shop_example_com,origin1,0,DOWN,L7STS,503,<script>x</script>')), domains);
  assert.deepEqual(down, [
    {
      kind: 'origin_down',
      message:
        'The origin app.internal:8080 of "shop.example.com" is down (HAProxy\'s health check: it answered an error status, HTTP 503); visitors get the 503 page when no origin of the domain is up',
    },
  ]);
  assert.deepEqual(w.update(parseOriginStates(csv('be_shop_example_com,origin1,0,DOWN,L7STS,503,')), domains), [], 'still down; origin0 unread keeps its state');
  assert.deepEqual(w.update(parseOriginStates(csv('be_shop_example_com,origin1,0,UP,L7OK,200,')), domains), [
    { kind: 'origin_up', message: 'The origin app.internal:8080 of "shop.example.com" is up again' },
  ]);
});

test('an origin already down at the first reading is reported; a check code that is not one is left out', () => {
  const w = new OriginWatch();
  assert.deepEqual(w.update(parseOriginStates(csv('be_shop_example_com,origin0,0,DOWN,l4 con;x,,')), domains), [
    { kind: 'origin_down', message: 'The origin 10.0.0.1:80 of "shop.example.com" is down; visitors get the 503 page when no origin of the domain is up' },
  ]);
});

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser } from 'playwright-core';
import { CHROMIUM, freePort, skipUnless, startServe } from '../support/processes.js';

// The dashboard's sign-in page in a real Chromium against a real `rampart serve`: it says whether
// people may register (GET /api/auth/signup, the operator's RAMPART_SIGNUP) and, by invitation,
// registers with the invitation the operator issued, showing the API's refusal of a bad one.

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];
const ADMIN = 'e2e-admin-token';

describe('sign-up on the dashboard', { skip: skipUnless(CHROMIUM, 'chromium is not installed (npm run setup installs it)') }, () => {
  let browser: Browser;
  const servers: Awaited<ReturnType<typeof startServe>>[] = [];
  before(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM!, args: FLAGS });
  });
  after(async () => {
    await browser?.close();
    for (const s of servers) await s.stop();
  });
  async function serve(signup?: string) {
    const s = await startServe({ port: await freePort(), adminToken: ADMIN, env: signup ? { RAMPART_SIGNUP: signup } : {} });
    servers.push(s);
    const page = await (await browser.newContext()).newPage();
    await page.goto(s.url);
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    return { url: s.url, page };
  }

  test('closed (the default): the page says the operator creates accounts and offers no sign-up', async () => {
    const { page } = await serve();
    await page.getByText('Accounts on this server are created by its operator.').waitFor();
    assert.equal(await page.getByRole('button', { name: /Create one/ }).count(), 0);
  });

  test('invite: registering needs the invitation; a wrong one is refused with its reason, the right one signs in', async () => {
    const { url, page } = await serve('invite');
    const issued = await fetch(`${url}/admin/invitations`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: '{}' });
    const { invitation } = (await issued.json()) as { invitation: string };
    await page.getByRole('button', { name: 'Create one with an invitation' }).click();
    await page.getByRole('heading', { name: 'Create an account' }).waitFor();
    await page.getByLabel('Email').fill('invited@example.com');
    await page.getByLabel('Password').fill('a long enough password');
    await page.getByLabel('Invitation').fill('rmpi_not-the-one');
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByRole('alert').getByText('invitation: unknown, already used, expired or for another email').waitFor();
    await page.getByLabel('Invitation').fill(invitation);
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
    await page.getByText('invited@example.com').waitFor();
  });

  test('open: the page offers to create an account', async () => {
    const { page } = await serve('open');
    await page.getByRole('button', { name: 'Create one', exact: true }).click();
    assert.equal(await page.getByLabel('Invitation').count(), 0, 'no invitation field');
  });
});

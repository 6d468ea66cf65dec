import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import {
  DeliveryView,
  NotificationReadBody,
  NotificationReadResult,
  NotificationSettingsUpdate,
  NotificationSettingsView,
  NotificationView,
  PageQuery,
} from '../schemas.js';
import { listDeliveries } from '../services/notification-delivery.js';
import { getNotificationSettings, updateNotificationSettings } from '../services/notification-settings.js';
import { listNotifications, markRead } from '../services/notifications.js';
import type { Page } from '../services/paging.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

const tags = ['Notifications'];
const PAGING =
  'Newest first, `limit` per page (1 to 200, default 50). When there are more, the `Link` header names the next page: ' +
  '`<...?limit=N&before=ID>; rel="next"`, where ID is the last entry of this page.';

/** Answers a page as a JSON array, the next page (if any) in the Link header. */
function sendPage<T>(req: FastifyRequest, reply: FastifyReply, page: Page<T>, limit: string | undefined): T[] {
  if (page.next) {
    const path = req.url.split('?')[0];
    const query = new URLSearchParams({ ...(limit !== undefined ? { limit } : {}), before: page.next });
    reply.header('link', `<${path}?${query.toString()}>; rel="next"`);
  }
  return page.items;
}

export async function notificationRoutes(app: App, { ctx }: RouteDeps) {
  app.get('/api/notifications', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Notifications, newest first, in pages',
      description: PAGING,
      querystring: PageQuery,
      response: { 200: Type.Array(NotificationView), ...ERROR_RESPONSES },
    },
    handler: async (req, reply) => sendPage(req, reply, await listNotifications(ctx, req.principal.accountId, req.query), req.query.limit),
  });
  app.post('/api/notifications/read', {
    // Marking read changes no resource of the account: it works while frozen.
    config: { frozen: 'allow' },
    schema: {
      tags,
      security: SECURITY,
      summary: "Mark notifications read (at most 200 ids; other accounts' ids and unknown ids are ignored). Works while frozen.",
      body: NotificationReadBody,
      response: { 200: NotificationReadResult, ...ERROR_RESPONSES },
    },
    handler: async (req) => markRead(ctx, req.principal.accountId, req.body.ids),
  });
  app.get('/api/notifications/deliveries', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'The delivery log: one entry per notification and channel, newest first, in pages',
      description: PAGING,
      querystring: PageQuery,
      response: { 200: Type.Array(DeliveryView), ...ERROR_RESPONSES },
    },
    handler: async (req, reply) => sendPage(req, reply, await listDeliveries(ctx, req.principal.accountId, req.query), req.query.limit),
  });
  app.get('/api/settings/notifications', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Delivery channels: webhook and e-mail (the webhook secret is never shown)',
      response: { 200: NotificationSettingsView, ...ERROR_RESPONSES },
    },
    handler: async (req) => getNotificationSettings(ctx, req.principal.accountId),
  });
  app.put('/api/settings/notifications', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Set the delivery channels; a field left out keeps its value, null clears it',
      body: NotificationSettingsUpdate,
      response: { 200: NotificationSettingsView, ...ERROR_RESPONSES },
    },
    handler: async (req) => updateNotificationSettings(ctx, req.principal.accountId, req.body),
  });
}

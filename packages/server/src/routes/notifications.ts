import {
  DeliveryView,
  EmailConfirmBody,
  EmailConfirmResult,
  NotificationReadBody,
  NotificationReadResult,
  NotificationSettingsUpdate,
  NotificationSettingsView,
  NotificationView,
} from '../schemas.js';
import { listDeliveries } from '../services/notification-delivery.js';
import { confirmEmail, getNotificationSettings, requestEmailConfirmation, updateNotificationSettings } from '../services/notification-settings.js';
import { listNotifications, markRead } from '../services/notifications.js';
import { pagedListRoute } from './paging.js';
import { ERROR_RESPONSES, SECURITY, type App, type RouteDeps } from './types.js';

const tags = ['Notifications'];

export function notificationRoutes(app: App, { ctx, publicUrl }: RouteDeps): void {
  pagedListRoute(app, '/api/notifications', { tags, summary: 'Notifications, newest first, in pages' }, NotificationView, (accountId, query) => listNotifications(ctx, accountId, query));
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
  pagedListRoute(app, '/api/notifications/deliveries', { tags, summary: 'The delivery log: one entry per notification and channel, newest first, in pages' }, DeliveryView, (accountId, query) =>
    listDeliveries(ctx, accountId, query),
  );
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
    handler: async (req) => updateNotificationSettings(ctx, req.principal.accountId, req.body, publicUrl, req.principal.actor),
  });
  app.post('/api/settings/notifications/email/confirmation', {
    schema: {
      tags,
      security: SECURITY,
      summary: 'Send the address a new confirmation e-mail (at most one a minute; the previous link stops working)',
      response: { 200: NotificationSettingsView, ...ERROR_RESPONSES, 429: { $ref: 'Error#' }, 503: { $ref: 'Error#' } },
    },
    handler: async (req) => requestEmailConfirmation(ctx, req.principal.accountId, publicUrl),
  });
  app.post('/api/settings/notifications/email/confirm', {
    // The link is opened wherever the mail is read: the token alone (single-use, 24 hours) proves it.
    config: { public: true, frozen: 'allow' },
    schema: {
      tags,
      summary: 'Confirm an address with the token of its confirmation e-mail (no sign-in needed)',
      body: EmailConfirmBody,
      response: { 200: EmailConfirmResult, 400: { $ref: 'Error#' } },
    },
    handler: async (req) => confirmEmail(ctx, req.body.token),
  });
}

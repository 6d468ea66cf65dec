import * as connections from '../data/agent-connections.js';
import * as domains from '../data/domains.js';
import * as events from '../data/events.js';
import * as notifications from '../data/notifications.js';
import * as servers from '../data/servers.js';
import { queueDeliveries } from './delivery-queue.js';

/**
 * The data functions behind what an agent's messages mean (a hello, an ack, a report, an event
 * batch, a disconnect): recordAgentConnected and the other connection functions
 * (services/servers.ts), recordConfigAck (revisions.ts), storeEvents (events.ts),
 * recordStatusReport and notifyFromServer (notifications.ts). Each takes it as its last,
 * optional argument, so what they decide can be driven without a database.
 */
export const agentChannelStore = {
  findServer: servers.findServer,
  lockServer: servers.lockServer,
  markServerConnected: servers.markServerConnected,
  markServersOffline: servers.markServersOffline,
  markServersDown: servers.markServersDown,
  setProxyServing: servers.setProxyServing,
  clearServerVerdict: servers.clearServerVerdict,
  touchServersLastSeen: servers.touchServersLastSeen,
  desiredRevision: servers.desiredRevision,
  recordAppliedRevision: servers.recordAppliedRevision,
  bumpServers: servers.bumpServers,
  connectionOfServer: connections.connectionOfServer,
  upsertConnection: connections.upsertConnection,
  deleteConnection: connections.deleteConnection,
  deleteConnectionsOfProcess: connections.deleteConnectionsOfProcess,
  touchConnections: connections.touchConnections,
  staleConnections: connections.staleConnections,
  serversSharingDomains: domains.serversSharingDomains,
  domainNamesOfServer: domains.domainNamesOfServer,
  activatePlainDomainsOfServer: domains.activatePlainDomainsOfServer,
  eventRowsReceivedSince: events.eventRowsReceivedSince,
  insertEvents: events.insertEvents,
  foldableEvents: events.foldableEvents,
  foldEvent: events.foldEvent,
  requestIdCounts: events.requestIdCounts,
  insertEventRequestIds: events.insertEventRequestIds,
  insertNotification: notifications.insertNotification,
  foldNotification: notifications.foldNotification,
  countNotifications: notifications.countNotifications,
  /** The deliveries of a notification just inserted (services/delivery-queue.ts). */
  queueDeliveries,
};

export type AgentChannelStore = typeof agentChannelStore;

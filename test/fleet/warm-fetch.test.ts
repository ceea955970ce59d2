import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import type { IncomingMessage } from 'node:http'
import { describe, expect, it } from 'vitest'
import { warmFetch } from '../../src/fleet/worker/warm-fetch.js'
import { until } from '../helpers/wait.js'

// A warm child's loopback round trip (docs/fleet.md#dispatch-latency): made, and nothing of it left open.

const tcp = () => process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP'))

describe('warmFetch', () => {
  it('makes one request to a server of its own on loopback, and leaves no server or connection open', async () => {
    const before = tcp()
    const seen: string[] = []
    // Every request an HTTP server of this process receives (Node's own channel).
    const onRequest = (message: unknown) => {
      const { request } = message as { request: IncomingMessage }
      seen.push(`${request.method} ${request.url} ${request.socket.localAddress}`)
    }
    subscribe('http.server.request.start', onRequest)
    try {
      await warmFetch()
    } finally {
      unsubscribe('http.server.request.start', onRequest)
    }
    expect(seen).toEqual(['GET / 127.0.0.1'])
    await until('its server and connection closed', async () => tcp().length === before.length)
  })
})

import { describe, expect, it } from 'vitest'
import { warmFetch } from '../../src/fleet/worker/warm-fetch.js'
import { until } from '../helpers/wait.js'

// A warm child's loopback round trip (docs/fleet.md#dispatch-latency): made, and nothing of it left open.

const tcp = () => process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP'))

describe('warmFetch', () => {
  it('makes one request to a server of its own on loopback, and leaves no server or connection open', async () => {
    const before = tcp()
    const seen: string[] = []
    // What its server answered: watched through the request event of every server this process makes meanwhile.
    const { Server } = await import('node:http')
    const emit = Server.prototype.emit
    Server.prototype.emit = function (this: InstanceType<typeof Server>, event: string, ...args: unknown[]) {
      if (event === 'request') {
        const req = args[0] as { method?: string; url?: string }
        seen.push(`${req.method} ${req.url}`)
      }
      return emit.call(this, event, ...args) as boolean
    } as typeof emit
    try {
      await warmFetch()
    } finally {
      Server.prototype.emit = emit
    }
    expect(seen).toEqual(['GET /'])
    await until('its server and connection closed', async () => tcp().length === before.length)
  })
})

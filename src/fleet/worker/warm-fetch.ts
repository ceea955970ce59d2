import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * One HTTP round trip on loopback, made by a warm child before it has a job: fetch's HTTP/1
 * client (its parser is WebAssembly, compiled at the first HTTP request, not at a `data:` URL's)
 * is then ready for the task's first LLM request. Measured on a loaded 2-core host: a first
 * request ~177 ms without it, ~98 ms with it (docs/fleet.md#dispatch-latency). Nothing leaves
 * the host; a host without loopback (a network namespace with `lo` down) only skips it.
 */
export async function warmFetch(): Promise<void> {
  const server = createServer((_req, res) => res.end())
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', resolve)
    })
    const { port } = server.address() as AddressInfo
    await (await fetch(`http://127.0.0.1:${port}/`)).arrayBuffer()
  } catch {
    // No loopback, or it refused: the task's first request loads what it needs.
  } finally {
    server.closeAllConnections()
    server.close()
  }
}

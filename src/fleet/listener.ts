import type { Client } from 'pg'

/**
 * LISTEN on its own connection (a pooled one would be recycled, and LISTEN is per
 * session), reconnecting with backoff when the server goes away. After a reconnect it
 * wakes its owner too: notifications sent while it was away are gone, so the table is
 * read again.
 */
export class JobListener {
  private client: Client | null = null
  private stopped = false
  private failures = 0
  private retry: NodeJS.Timeout | null = null

  constructor(private readonly url: string, private readonly onWake: () => void) {}

  async start(): Promise<void> {
    await this.connect()
  }

  private async connect(): Promise<void> {
    if (this.stopped) return
    const { default: pg } = await import('pg')
    const client = new pg.Client({ connectionString: this.url, keepAlive: true, connectionTimeoutMillis: 5_000 })
    const lost = (): void => {
      if (this.client !== client) return
      this.client = null
      client.end().catch(() => undefined)
      this.schedule()
    }
    client.on('error', lost)
    client.on('end', lost)
    client.on('notification', () => this.onWake())
    try {
      await client.connect()
      await client.query('LISTEN ctxagent_jobs')
      if (this.stopped) {
        // Stopped while it connected: a connection kept now would hold the process open.
        client.removeAllListeners('end')
        await client.end().catch(() => undefined)
        return
      }
      this.client = client
      this.failures = 0
      this.onWake()
    } catch {
      client.removeAllListeners('end')
      client.end().catch(() => undefined)
      this.schedule()
    }
  }

  private schedule(): void {
    if (this.stopped || this.retry !== null) return
    this.failures++
    this.retry = setTimeout(() => {
      this.retry = null
      void this.connect()
    }, Math.min(50 * 2 ** this.failures, 2_000))
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.retry !== null) clearTimeout(this.retry)
    const client = this.client
    this.client = null
    await client?.end().catch(() => undefined)
  }
}

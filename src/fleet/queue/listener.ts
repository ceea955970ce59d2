import type { Client } from 'pg'
import { hostname } from '../../storage/fs/process-info.js'

/** Where a wake-up came from: the worker's own channel (a job chose it), the channel every worker hears (a job, or a running job cancelled), or a reconnect. */
export type WakeFrom = 'own' | 'all' | 'cancel' | 'connected'

/** The channel every worker LISTENs on: a job that starts waiting while no worker is idle NOTIFYs it. */
export const ALL_WORKERS_CHANNEL = 'ctxagent_jobs'
/** The payload of a NOTIFY on that channel saying a running job was cancelled (`jobs cancel`). */
export const CANCEL_PAYLOAD = 'cancel'

/**
 * LISTEN on its own connection (a pooled one would be recycled, and LISTEN is per
 * session), on the worker's own channel and on the one every worker hears, reconnecting
 * with backoff when the server goes away. After a reconnect it wakes its owner too:
 * notifications sent while it was away are gone, so the table is read again.
 */
export class JobListener {
  private client: Client | null = null
  private stopped = false
  private failures = 0
  private retry: NodeJS.Timeout | null = null

  /** `channel`: this worker's own (a name of letters, digits and underscores), which fleet_idle names while it is idle. */
  constructor(
    private readonly url: string,
    readonly channel: string,
    private readonly onWake: (from: WakeFrom) => void,
  ) {
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(channel)) throw new Error(`not a channel name: ${channel}`)
  }

  async start(): Promise<void> {
    await this.connect()
  }

  private async connect(): Promise<void> {
    if (this.stopped) return
    const { default: pg } = await import('pg')
    // Named in pg_stat_activity as the pools are (pg-pool.ts): an operator counting connections at 1,000 hosts tells the LISTEN ones apart.
    const client = new pg.Client({
      connectionString: this.url,
      keepAlive: true,
      connectionTimeoutMillis: 5_000,
      application_name: `ctxagent worker-listen ${hostname()}:${process.pid}`.slice(0, 63),
    })
    const lost = (): void => {
      if (this.client !== client) return
      this.client = null
      client.end().catch(() => undefined)
      this.schedule()
    }
    client.on('error', lost)
    client.on('end', lost)
    client.on('notification', (n) => this.onWake(n.channel === this.channel ? 'own' : n.payload === CANCEL_PAYLOAD ? 'cancel' : 'all'))
    try {
      await client.connect()
      await client.query(`LISTEN ${ALL_WORKERS_CHANNEL}; LISTEN ${this.channel}`)
      if (this.stopped) {
        // Stopped while it connected: the connection must not outlive the worker.
        client.removeAllListeners('end')
        await client.end().catch(() => undefined)
        return
      }
      this.client = client
      this.failures = 0
      this.onWake('connected')
    } catch {
      client.removeAllListeners('end')
      client.end().catch(() => undefined)
      this.schedule()
    }
  }

  private schedule(): void {
    if (this.stopped || this.retry !== null) return
    this.failures++
    this.retry = setTimeout(
      () => {
        this.retry = null
        void this.connect()
      },
      Math.min(50 * 2 ** this.failures, 2_000),
    )
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.retry !== null) clearTimeout(this.retry)
    const client = this.client
    this.client = null
    await client?.end().catch(() => undefined)
  }
}

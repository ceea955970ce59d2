import { randomUUID } from 'node:crypto'
import { readFileSync, readlinkSync } from 'node:fs'
import type { Pool } from 'pg'
import { UsageError } from '../../errors.js'
import { inTransaction } from '../../storage/index/pg-pool.js'
import { liveWorkerSql } from '../../storage/index/worker-liveness.js'

export interface WorkerRecord {
  id: string
  hostname: string
  pid: number
  concurrency: number
}

/**
 * What tells two hosts apart when they carry the same name: the kernel's boot id and
 * this process's PID namespace (one machine, or a container or namespace with pids of
 * its own, is one host: its pids mean something only there).
 */
export function hostIdentity(): string {
  const read = (f: () => string): string => {
    try {
      return f().trim()
    } catch {
      return ''
    }
  }
  return `${read(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8'))}/${read(() => readlinkSync('/proc/self/ns/pid'))}`
}

/**
 * Registers a worker. A live worker (heartbeat within `liveSeconds`) with the same host
 * name on another host refuses the start: locks name hosts by that name (docs/contract.md §4), and
 * two hosts sharing it would take each other's live agents for their own dead ones.
 */
export async function registerWorker(pool: Pool, hostname: string, concurrency: number, liveSeconds: number): Promise<WorkerRecord> {
  const id = `${hostname}:${process.pid}:${randomUUID().slice(0, 8)}`
  const host = hostIdentity()
  await inTransaction(pool, async (client) => {
    // One registration at a time per name, so that two hosts starting together cannot both pass the check.
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`ctxagent worker ${hostname}`])
    const clash = await client.query<{ id: string }>(
      `SELECT id FROM fleet_workers w WHERE hostname = $1 AND host_id <> $2 AND ${liveWorkerSql('w', '$3')} LIMIT 1`,
      [hostname, host, liveSeconds],
    )
    if (clash.rows.length > 0) {
      throw new UsageError(
        `another host named '${hostname}' has a live worker (${clash.rows[0]?.id})`,
        'give each host of the fleet its own host name: locks tell hosts apart by it',
      )
    }
    await client.query('INSERT INTO fleet_workers (id, hostname, host_id, pid, concurrency) VALUES ($1, $2, $3, $4, $5)', [
      id,
      hostname,
      host,
      process.pid,
      concurrency,
    ])
    // Idle rows of workers gone (killed, or stopped without a database): no wake-up is sent to their channels.
    await client.query(
      `DELETE FROM fleet_idle i WHERE NOT EXISTS (SELECT 1 FROM fleet_workers w WHERE w.id = i.worker_id AND ${liveWorkerSql('w', 'i.stale_seconds')})`,
    )
  })
  return { id, hostname, pid: process.pid, concurrency }
}

export async function heartbeat(pool: Pool, id: string): Promise<void> {
  await pool.query('UPDATE fleet_workers SET heartbeat_at = now() WHERE id = $1', [id])
}

export async function markStopped(pool: Pool, id: string): Promise<void> {
  await pool.query('UPDATE fleet_workers SET stopped_at = now(), heartbeat_at = now() WHERE id = $1', [id])
}

import { Command } from 'commander'
import type { CommandEnv } from '../../command-env.js'
import { formatDuration } from '../../duration.js'
import { fleetStatus } from '../../fleet/queue/status.js'
import type { FleetStatus } from '../../fleet/queue/status.js'
import { table } from '../../render.js'
import { fleetPool } from '../../actions/fleet-db.js'
import { fleetInitCommand } from './fleet-init.js'
import { withEnv } from '../../command-kit/shared.js'
import { workerLiveSeconds } from '../../storage/index/worker-liveness.js'

export function fleetCommand(): Command {
  return new Command('fleet')
    .description(
      'the fleet at a glance: live workers (host, pid, heartbeat, tasks) and a count of dead ones, jobs by state, the oldest waiting job (needs fleet.database_url); ctxagent jobs lists the jobs',
    )
    .addCommand(fleetInitCommand())
    .action(withEnv(fleet))
}

async function fleet(ctx: CommandEnv): Promise<void> {
  const { pool } = await fleetPool(ctx, 'fleet')
  try {
    const status = await fleetStatus(pool, workerLiveSeconds(ctx.config.locks))
    if (ctx.json) ctx.io.json(status)
    else ctx.io.out(render(ctx, status))
  } finally {
    await pool.end().catch(() => undefined)
  }
}

function render(ctx: CommandEnv, s: FleetStatus): string {
  const now = ctx.now().getTime()
  const ago = (iso: string) => `${formatDuration(Math.max(0, now - Date.parse(iso)))} ago`
  const lines = [
    `Workers: ${s.workers.length} live${s.dead_workers > 0 ? `, ${s.dead_workers} dead (heartbeat older than the stale time: killed, or cut off)` : ''}`,
  ]
  if (s.workers.length > 0) {
    lines.push(
      table(
        ctx.io,
        ['host', 'pid', 'started', 'heartbeat', 'tasks'],
        s.workers.map((w) => [
          w.hostname,
          String(w.pid),
          ago(w.started_at),
          ago(w.heartbeat_at),
          `${w.tasks.length}/${w.concurrency}${w.tasks.length ? ` ${w.tasks.map((t) => t.slice(0, 8)).join(', ')}` : ''}`,
        ]),
      ),
    )
  }
  lines.push(
    '',
    `Jobs: ${s.jobs.waiting} waiting, ${s.jobs.running} running, ${s.jobs.retrying} retrying, ${s.jobs.done} done, ${s.jobs.failed} failed, ${s.jobs.cancelled} cancelled${
      Object.keys(s.outcomes).length
        ? ` (${Object.entries(s.outcomes)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')})`
        : ''
    }`,
  )
  const o = s.oldest_waiting
  lines.push(o === null ? 'Oldest waiting job: none' : `Oldest waiting job: ${o.id} (task ${o.task_uuid}), waiting ${formatDuration(o.waiting_seconds * 1000)}`)
  return lines.join('\n')
}

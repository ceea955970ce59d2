import type { Pool } from 'pg'
import type { Config } from '../../config/schema.js'
import type { Layout } from '../../storage/fs/layout.js'
import type { IndexStore } from '../../storage/index/store.js'
import { refreshOutcomes } from '../../operations/outcomes-refresh.js'
import type { RefreshReport } from '../../operations/outcomes-refresh.js'

/**
 * A poll pass's refresh of the outcomes of the pull/merge requests ctxagent opened on its
 * repository (docs/contract.md §17), `source` as the tracker names it (`github:owner/repo`,
 * `gitlab:group/project`). Each request is labelled with the trigger label its issue was
 * polled under (`fleet_polled.trigger` of the task that opened it).
 */
export async function outcomesPass(
  pool: Pool,
  store: IndexStore,
  layout: Layout,
  config: Config,
  source: string,
  now: Date,
  stop?: AbortSignal,
): Promise<RefreshReport> {
  const [forge, ...rest] = source.split(':')
  const repository = rest.join(':')
  if ((forge !== 'github' && forge !== 'gitlab') || repository === '') return { refreshed: [], ended: 0, errors: [`${source}: not a forge's repository`] }
  const polled = await pool.query<{ task_uuid: string; trigger: string }>(
    'SELECT task_uuid, trigger FROM fleet_polled WHERE source = $1 AND trigger IS NOT NULL',
    [source],
  )
  const labels = new Map(polled.rows.map((r) => [r.task_uuid, r.trigger]))
  return refreshOutcomes(store, layout, config, { now, labels, only: { forge, repository }, ...(stop ? { stop } : {}) })
}

import type { Config } from '../config/schema.js'
import { ownerState } from '../storage/fs/process-info.js'
import type { Overview } from '../storage/task/reader.js'
import { costOf, requestsCost, splitOf, taskBill } from './tokens.js'

/**
 * `view --json`'s document (and the page's /api/tasks/<uuid>): the overview, whether its
 * lock's owner still runs as far as this host can tell, and the bill as providers bill
 * it: `cost_usd` the task's whole bill, the turns' split and cost, the compactions' and the final summary's apart.
 */
export function overviewDocument(overview: Overview, pricing: Config['pricing']) {
  const split = splitOf({ total_tokens_used: overview.state?.total_tokens_used ?? 0, ...(overview.state ?? {}) })
  const model = overview.metadata.config?.model
  const compactions = requestsCost(model, overview.state?.compaction_tokens, pricing)
  const final = requestsCost(model, overview.state?.final_summary_tokens, pricing)
  // cost_usd is the task's bill (taskBill: turns, compactions and final summary, rounded once), as stats and export sum it.
  const tokens = {
    ...split,
    cost_usd: overview.state ? taskBill(model, overview.state, pricing) : costOf(model, split, pricing),
    turns_cost_usd: costOf(model, split, pricing),
    ...(compactions ? { compactions } : {}),
    ...(final ? { final_summary: final } : {}),
  }
  return { ...overview, owner_state: overview.lock ? ownerState(overview.lock) : null, tokens }
}

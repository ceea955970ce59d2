import type { Delivery } from './state.js'

/**
 * state.json's `delivery` as readers show it (docs/delivery.md#what-is-recorded), or null
 * when there is none or what the file holds is not one (a hand-edited or damaged file
 * shows no delivery rather than stopping the command).
 */
export function deliveryOf(state: { delivery?: unknown } | null | undefined): Delivery | null {
  const d = state?.delivery
  if (d === null || typeof d !== 'object' || Array.isArray(d)) return null
  const r = d as Record<string, unknown>
  if (r.mode !== 'branch' && r.mode !== 'pr') return null
  const text = (v: unknown) => (typeof v === 'string' ? v : null)
  const pr =
    r.pr !== null &&
    typeof r.pr === 'object' &&
    Number.isSafeInteger((r.pr as { number?: unknown }).number) &&
    typeof (r.pr as { url?: unknown }).url === 'string'
      ? { number: (r.pr as { number: number }).number, url: (r.pr as { url: string }).url }
      : null
  return { mode: r.mode, branch: text(r.branch), commit: text(r.commit), pushed: r.pushed === true, pr, refused: text(r.refused) }
}

/** One line: the PR, else the branch and commit, else why nothing was delivered. */
export function deliveryLine(d: Delivery): string {
  const where = d.branch === null ? null : `branch ${d.branch}${d.commit ? ` (${d.commit.slice(0, 12)})` : ''}${d.pushed ? ', pushed' : ''}`
  // A refusal of the change's files already begins so (docs/delivery.md#secrets): said once.
  if (d.refused !== null) return `${where ? `${where}; ` : ''}${d.refused.startsWith('not delivered') ? '' : 'not delivered: '}${d.refused}`
  if (d.pr !== null) return `${d.mode === 'pr' ? 'PR/MR' : 'PR'} #${d.pr.number} ${d.pr.url} (${where ?? 'no branch'})`
  return where ?? 'nothing delivered'
}

/**
 * How a delivery ended (docs/delivery.md#what-is-recorded): `delivered` (all that was asked),
 * `no_changes` (nothing to deliver), `refused` (a check said no: a secret, an excluded file,
 * a branch that exists, an origin elsewhere, no forge) or `failed` (git or the forge
 * failed). Read from `refused` alone, so that every state.json written since delivery began
 * answers the same.
 */
export type DeliveryResult = 'delivered' | 'no_changes' | 'refused' | 'failed'
export const DELIVERY_RESULTS: readonly DeliveryResult[] = ['delivered', 'no_changes', 'refused', 'failed']

export function deliveryResult(d: Delivery): DeliveryResult {
  if (d.refused === null) return 'delivered'
  if (d.refused.startsWith('no changes')) return 'no_changes'
  // What deliver() caught (src/delivery/deliver.ts): git or the forge threw.
  if (d.refused.startsWith('delivery failed')) return 'failed'
  return 'refused'
}

/** A delivery asked for that did not happen: run's exit 6, a job's outcome `undelivered` (docs/contract.md §9). No changes is not one. */
export function undelivered(d: Delivery | null | undefined): boolean {
  if (d === null || d === undefined) return false
  const result = deliveryResult(d)
  return result === 'refused' || result === 'failed'
}

/** A few characters for a table: PR #N, branch, or refused. */
export function deliveryCell(d: Delivery | null): string {
  if (d === null) return '-'
  if (d.refused !== null) return { no_changes: 'no changes', failed: 'failed', refused: 'refused', delivered: '' }[deliveryResult(d)]
  if (d.pr !== null) return `#${d.pr.number}`
  return 'branch'
}

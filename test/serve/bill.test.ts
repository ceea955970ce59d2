import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cliIn } from '../helpers/in-process.js'
import { parseExposition, total } from './exposition.js'
import { configWith, reindex, startServe } from './helpers.js'

/**
 * docs/running.md#budgets: one spend ledger. A task's bill is its turns, its compactions' summaries and its final
 * summary, priced at its model's rates and rounded once; stats, view, /metrics and the page's task list and task page
 * all give that one figure.
 */
describe('a task’s bill', () => {
  it('is the same in stats --json, view --json, /metrics, the page’s list and the task’s page: the summaries included', async () => {
    const tree = makeTree()
    tree.write({
      uuid: uuidN(1),
      user: 'alice',
      createdAt: '2024-01-10T10:00:00.000Z',
      state: {
        prompt_tokens: 40_000,
        completion_tokens: 2_000,
        cached_tokens: 0,
        compaction_tokens: { requests: 2, prompt_tokens: 30_000, completion_tokens: 1_000, cached_tokens: 0 },
        final_summary_tokens: { requests: 1, prompt_tokens: 20_000, completion_tokens: 500, cached_tokens: 0 },
      },
    })
    reindex(tree)
    const config = configWith(tree, 'pricing:\n  gpt-4o:\n    prompt: 2.5\n    completion: 10\n')
    // Turns 40,000 × $2.5 + 2,000 × $10 = $0.12; summaries 50,000 × $2.5 + 1,500 × $10 = $0.14 (per million tokens).
    const bill = 0.26
    const stats = JSON.parse((await cliIn(['stats', '--json', '--home', tree.base, '--config', config])).stdout) as { tokens: { cost_usd: number } }
    expect(stats.tokens.cost_usd).toBeCloseTo(bill, 9)
    const view = JSON.parse((await cliIn(['view', uuidN(1), '--json', '--home', tree.base, '--config', config])).stdout) as { tokens: { cost_usd: number } }
    expect(view.tokens.cost_usd).toBeCloseTo(bill, 9)
    const s = await startServe(tree.base, { config })
    try {
      const metrics = parseExposition(await (await s.get('/metrics')).text())
      expect(total(metrics, 'ctxagent_cost_usd_total', { user: 'alice' })).toBeCloseTo(bill, 9)
      // The page's list and the task's page print it to 4 places under $1.
      const list = await (await s.get('/')).text()
      expect(list).toContain('<td data-label="cost" class="n">$0.2600</td>')
      const page = await (await s.get(`/tasks/${uuidN(1)}`)).text()
      expect(page).toContain('<dt>Cost</dt><dd>$0.2600</dd>')
    } finally {
      s.child.kill('SIGTERM')
    }
  })
})

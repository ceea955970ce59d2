import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { taskBill } from '../../src/operations/tokens.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cli } from '../helpers/run.js'

/**
 * docs/running.md#budgets: a task's bill is its turns, its compactions' summaries and its final summary (all
 * billed), rounded once. Each part here costs $0.0003518: rounded apart they would make $0.001056, once $0.001055.
 */
const PRICING = 'pricing:\n  gpt-4o: { prompt: 0.35, completion: 1.45 }\n'
const part = { requests: 1, prompt_tokens: 1001, completion_tokens: 1, cached_tokens: 0 }
const state = {
  total_tokens_used: 1002,
  prompt_tokens: 1001,
  completion_tokens: 1,
  cached_tokens: 0,
  compaction_tokens: part,
  final_summary_tokens: part,
}

describe("a task's bill", () => {
  it('turns, compactions and final summary, rounded once; null without a price', () => {
    const pricing = parseConfig(PRICING).pricing
    expect(taskBill('gpt-4o', state, pricing)).toBe(0.001055)
    expect(taskBill('gpt-4o', { ...state, compaction_tokens: undefined, final_summary_tokens: undefined }, pricing)).toBe(0.000352)
    expect(taskBill('other', state, pricing)).toBeNull()
  })

  it('stats --json, view --json and export give one total for a task with a final summary and a compaction', () => {
    const tree = makeTree()
    const uuid = uuidN(7)
    tree.write({ uuid, state })
    // A task without summaries beside it: priced from its index row alone.
    tree.write({ uuid: uuidN(8), state: { ...state, compaction_tokens: undefined, final_summary_tokens: undefined } })
    const config = join(tree.base, 'config.yaml')
    writeFileSync(config, PRICING)
    const run = (args: string[]) => {
      const res = cli([...args, '--home', tree.base, '--config', config])
      expect(res.code, res.stderr).toBe(0)
      return res.stdout
    }
    run(['reindex'])
    const viewed = JSON.parse(run(['view', uuid, '--json'])) as { tokens: { cost_usd: number; turns_cost_usd: number } }
    expect(viewed.tokens).toMatchObject({ cost_usd: 0.001055, turns_cost_usd: 0.000352 })
    expect(run(['export', uuid])).toContain('| cost | $0.001055 |')
    const stats = JSON.parse(run(['stats', '--json'])) as { tokens: { cost_usd: number } }
    // The two tasks' bills, 0.001055 and 0.000352: the summaries counted, as view and export count them.
    expect(stats.tokens.cost_usd).toBe(0.001407)
  })
})

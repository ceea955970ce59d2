import { appendFileSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { readOverview } from '../../../src/storage/task/reader.js'
import { makeTree, uuidN } from '../../fixtures/tree.js'

describe('the overview', () => {
  it('reads the last summaries from the end of summaries.jsonl: 5,000 summaries, three shown, all counted', async () => {
    const tree = makeTree()
    const uuid = uuidN(1)
    const dir = tree.write({ uuid, location: 'completed', status: 'completed', messages: 3, summaries: 5000 })
    const overview = await readOverview({ uuid, location: 'completed', dir })
    expect(overview.counts.summaries).toBe(5000)
    expect(overview.summaries.map((s) => s.summary_id)).toEqual([4998, 4999, 5000])
  })

  it('a torn last line is skipped and counted; a summary longer than a read chunk is read whole', async () => {
    const tree = makeTree()
    const uuid = uuidN(2)
    const dir = tree.write({ uuid, location: 'paused', status: 'paused', messages: 3, summaries: 2 })
    const file = join(dir, 'summaries.jsonl')
    const huge = { summary_id: 3, start_seq: 1, end_seq: 3, summary: 'x'.repeat(3 << 20), created_at: '2026-11-01T00:00:00Z' }
    appendFileSync(file, `${JSON.stringify(huge)}\n{"summary_id":4,"summ`)
    const overview = await readOverview({ uuid, location: 'paused', dir })
    expect(overview.summaries.map((s) => s.summary_id)).toEqual([1, 2, 3])
    expect(overview.summaries[2]?.summary.length).toBe(3 << 20)
    expect(overview.counts.bad_lines).toBe(1)
    expect(readFileSync(file, 'utf8').endsWith('"summ')).toBe(true) // a reader never repairs
    writeFileSync(file, '')
    expect((await readOverview({ uuid, location: 'paused', dir })).summaries).toEqual([])
  })
})

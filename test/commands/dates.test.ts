import { describe, expect, it } from 'vitest'
import { dateAt, dateFrom } from '../../src/command-kit/filter-args.js'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cliIn } from '../helpers/in-process.js'

// stats/list --from and --to take what cleanup's ages take: today, yesterday, 2d, 12h (issue #28).
describe('--from and --to dates', () => {
  const now = Date.parse('2026-11-26T15:30:00Z')

  it('reads today and yesterday as their day (UTC), and a duration as that long ago', async () => {
    expect(dateAt('today', now).toISOString()).toBe('2026-11-26T00:00:00.000Z')
    expect(dateAt('Yesterday', now).toISOString()).toBe('2026-11-25T00:00:00.000Z')
    expect(dateAt('2d', now).toISOString()).toBe('2026-11-24T15:30:00.000Z')
    expect(dateAt('1h30m', now).toISOString()).toBe('2026-11-26T14:00:00.000Z')
    expect(dateAt('2024-01-31', now).toISOString()).toBe('2024-01-31T00:00:00.000Z')
    for (const bad of ['soon', '1', '2024-02-30', '3 fortnights'])
      expect(() => dateAt(bad, now), bad).toThrow(/is not a date like 2024-01-31, today, yesterday, a time ago like 2d/)
    expect(() => dateFrom('tomorrow')).toThrow(/not a date/)
  })

  it('stats --from 2d counts the tasks of the last two days; a word it does not know is exit 2', async () => {
    const tree = makeTree()
    tree.write({ uuid: uuidN(1), createdAt: new Date(Date.now() - 5 * 86_400_000).toISOString() })
    tree.write({ uuid: uuidN(2), createdAt: new Date().toISOString() })
    const recent = await cliIn(['stats', '--json', '--from', '2d', '--home', tree.base, '--config', 'none'])
    expect(recent.code, recent.stderr).toBe(0)
    expect((JSON.parse(recent.stdout) as { total: number }).total).toBe(1)
    const today = await cliIn(['list', '--json', '--from', 'today', '--to', 'today', '--home', tree.base, '--config', 'none'])
    expect(today.code, today.stderr).toBe(0)
    expect(
      today.stdout
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { uuid: string }).uuid),
    ).toEqual([uuidN(2)])
    expect((await cliIn(['stats', '--from', 'soon', '--home', tree.base, '--config', 'none'])).code).toBe(2)
  })
})

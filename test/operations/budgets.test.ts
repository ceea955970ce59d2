import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { capReset, dayKey, nextDayStart, nextMonthStart, passedSharedCap, requestEstimate, sharedCaps, taskSpend } from '../../src/operations/budgets.js'
import { initialState } from '../../src/storage/task/state.js'
import { budgetCheck } from '../../src/operations/doctor.js'
import type { DoctorInput } from '../../src/operations/doctor-check.js'

describe('the windows of the shared caps, by the clock the caller gives', () => {
  it('a day and a month in UTC', () => {
    const at = new Date('2026-11-30T23:59:59.000Z')
    expect(dayKey(at, 'UTC')).toBe('2026-11-30')
    expect(nextDayStart(at, 'UTC').toISOString()).toBe('2026-12-01T00:00:00.000Z')
    expect(nextMonthStart(at, 'UTC').toISOString()).toBe('2026-12-01T00:00:00.000Z')
    expect(nextMonthStart(new Date('2026-12-15T12:00:00Z'), 'UTC').toISOString()).toBe('2027-01-01T00:00:00.000Z')
    expect(capReset('user-daily', new Date('2026-11-28T10:00:00Z'), 'UTC')?.toISOString()).toBe('2026-11-29T00:00:00.000Z')
    expect(capReset('fleet-daily', new Date('2026-11-28T10:00:00Z'), 'UTC')?.toISOString()).toBe('2026-11-29T00:00:00.000Z')
    expect(capReset('user-monthly', new Date('2026-11-28T10:00:00Z'), 'UTC')?.toISOString()).toBe('2026-12-01T00:00:00.000Z')
    expect(capReset('task', new Date('2026-11-28T10:00:00Z'), 'UTC')).toBeNull()
  })

  it('in a configured time zone, across a change of daylight saving time', () => {
    // 23:30 UTC on 28 November is already the 29th in Berlin (UTC+1).
    expect(dayKey(new Date('2026-11-28T23:30:00Z'), 'Europe/Berlin')).toBe('2026-11-29')
    expect(nextDayStart(new Date('2026-11-28T10:00:00Z'), 'Europe/Berlin').toISOString()).toBe('2026-11-28T23:00:00.000Z')
    // The night summer time begins (29 March 2026): that day starts at 23:00 UTC the day before, the next at 22:00 UTC.
    expect(nextDayStart(new Date('2026-03-29T12:00:00Z'), 'Europe/Berlin').toISOString()).toBe('2026-03-29T22:00:00.000Z')
    expect(nextMonthStart(new Date('2026-03-15T12:00:00Z'), 'Europe/Berlin').toISOString()).toBe('2026-03-31T22:00:00.000Z')
    expect(nextDayStart(new Date('2026-11-28T10:00:00Z'), 'America/New_York').toISOString()).toBe('2026-11-29T05:00:00.000Z')
  })
})

describe('caps and costs', () => {
  const config = parseConfig(
    'budgets:\n  user_daily_usd: 5\n  user_monthly_usd: 50\n  fleet_daily_usd: 100\nusers:\n  alice:\n    budgets:\n      user_daily_usd: 1\n  bob:\n    budgets:\n      user_monthly_usd: null\npricing:\n  m:\n    prompt: 3\n    completion: 15\n    cached: 0.3\n',
    'config.yaml',
  )

  it('users.<name>.budgets over budgets; null there is no cap', () => {
    expect(sharedCaps(config, 'alice')).toEqual({ userDaily: 1, userMonthly: 50, fleetDaily: 100 })
    expect(sharedCaps(config, 'bob')).toEqual({ userDaily: 5, userMonthly: null, fleetDaily: 100 })
    expect(sharedCaps(config, 'constructor')).toEqual({ userDaily: 5, userMonthly: 50, fleetDaily: 100 })
  })

  it("a request's most cost, a task's spend from its recorded tokens, and which cap a request would pass", () => {
    const price = config.pricing.m as NonNullable<typeof config.pricing.m>
    expect(requestEstimate(price, 100_000, 4096)).toBeCloseTo(0.3 + 0.06144, 10)
    const state = {
      ...initialState(new Date(0)),
      prompt_tokens: 1_000_000,
      cached_tokens: 500_000,
      completion_tokens: 100_000,
      compaction_tokens: { requests: 2, prompt_tokens: 100_000, completion_tokens: 0, cached_tokens: 0 },
    }
    expect(taskSpend(state, 'm', config.pricing)).toBeCloseTo(1.5 + 0.15 + 1.5 + 0.3, 6)
    const caps = sharedCaps(config, 'alice')
    expect(passedSharedCap(caps, { user_day: 0.9, user_month: 10, fleet_day: 10 }, 0.05)).toBeNull()
    expect(passedSharedCap(caps, { user_day: 0.9, user_month: 10, fleet_day: 10 }, 0.2)).toMatchObject({ cap: 'user-daily', limit: 1 })
    expect(passedSharedCap(caps, { user_day: 0, user_month: 49.99, fleet_day: 10 }, 0.02)).toMatchObject({ cap: 'user-monthly' })
    expect(passedSharedCap(caps, { user_day: 0, user_month: 0, fleet_day: 100 }, 0)).toMatchObject({ cap: 'fleet-daily' })
  })

  it('refuses a time zone it does not know, and a cap that is not an amount', () => {
    expect(() => parseConfig('budgets:\n  timezone: Mars/Olympus\n', 'config.yaml')).toThrow(/budgets.timezone must be an IANA time zone/)
    expect(() => parseConfig('budgets:\n  user_daily_usd: -1\n', 'config.yaml')).toThrow(/budgets.user_daily_usd must be an amount in USD/)
    expect(() => parseConfig('run:\n  max_cost_usd: lots\n', 'config.yaml')).toThrow(/run.max_cost_usd must be an amount in USD/)
  })
})

describe('doctor: which caps apply, and whether every model in use has a price', () => {
  const input = (yaml: string) => ({ config: parseConfig(yaml, 'config.yaml') }) as DoctorInput
  const llm = 'llm:\n  provider: openai\n  openai:\n    model: gpt-x\n'

  it('no cap: skipped, saying so', () => {
    expect(budgetCheck(input(llm))).toMatchObject({
      name: 'budgets',
      status: 'skip',
      message: expect.stringMatching(/^no cost caps set .*no price for gpt-x: no cost shown/),
    })
  })

  it('caps, and a model of a user without a price: a warning naming it', () => {
    const check = budgetCheck(
      input(
        `${llm}run:\n  max_cost_usd: 2\nbudgets:\n  user_daily_usd: 10\n  timezone: Europe/Berlin\nusers:\n  alice:\n    llm:\n      model: big\n    budgets:\n      user_daily_usd: null\npricing:\n  gpt-x:\n    prompt: 1\n    completion: 2\n`,
      ),
    )
    expect(check).toMatchObject({ status: 'warn', hint: expect.stringContaining('big') })
    expect(check.message).toBe(
      'run.max_cost_usd $2.00; budgets.user_daily_usd $10.00; users.alice: user_daily_usd none (days in Europe/Berlin); no price for big: not capped by money',
    )
  })

  it('caps and every model priced: ok', () => {
    expect(budgetCheck(input(`${llm}budgets:\n  fleet_daily_usd: 100\npricing:\n  gpt-x:\n    prompt: 1\n    completion: 2\n`))).toMatchObject({
      status: 'ok',
      message: 'budgets.fleet_daily_usd $100.00 (days in UTC); every model in use has a price (gpt-x)',
    })
  })
})

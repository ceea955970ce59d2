import type { Config } from '../config/schema.js'
import { noteWait } from './waits.js'
import { CAP_KEYS, priceOf, sharedCaps, taskSpend, usd } from '../operations/budgets.js'
import type { Caps } from '../operations/budgets.js'
import type { IndexStore } from '../storage/index/store.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { RunLog } from './log.js'
import type { RunSettings } from './settings.js'
import { keyHash, SpendGuard } from './spend-guard.js'

/** What the check before each request needs of the run (docs/running.md#budgets). */
export interface SpendRun {
  config: Config
  settings: RunSettings
  index: IndexStore | null
  now: () => Date
  /** Run by a fleet's worker: a usage limit pauses the task (the job waits without its slot). */
  fleetJob: boolean
}

/** The check before each request: the task's caps and price, its spend so far, and its API key's hash. */
export function spendGuard(run: SpendRun, handle: TaskHandle, model: string, log: RunLog): SpendGuard {
  const { config, settings } = run
  const user = handle.metadata.user ?? ''
  const price = priceOf(config, model)
  const caps: Caps = { task: settings.maxCostUsd, ...sharedCaps(config, user) }
  const provider = config.llm.provider
  const endpoint = provider === 'anthropic' ? config.llm.anthropic : provider === 'ollama' ? config.llm.ollama : config.llm.openai
  return new SpendGuard({
    index: run.index,
    user,
    model,
    price,
    pricing: config.pricing,
    caps,
    taskSpent: price === null ? 0 : taskSpend(handle.state, model, config.pricing),
    timezone: config.budgets.timezone,
    now: run.now,
    key: { hash: keyHash(endpoint.base_url, endpoint.api_key ?? null), provider },
    // In a fleet the job waits for the limit without holding its worker's slot: the task pauses.
    wait: settings.wait && !run.fleetJob,
    maxOutputTokens: config.llm.max_output_tokens,
    log,
    noteWait: (note) => noteWait(handle, log, note),
  })
}

/** What the start line says of money: the caps that apply and the spend so far, or that the model has no price; null when no cap is set. */
export function budgetLine(config: Config, settings: RunSettings, user: string, model: string, spent: number): string | null {
  const shared = sharedCaps(config, user)
  const caps: [string, number | null][] = [
    [CAP_KEYS.task, settings.maxCostUsd],
    ['user daily', shared.userDaily],
    ['user monthly', shared.userMonthly],
    ['fleet daily', shared.fleetDaily],
  ]
  const set = caps.filter((c): c is [string, number] => c[1] !== null)
  if (set.length === 0) return null
  if (priceOf(config, model) === null) return `model ${model} has no price in pricing: its requests are not capped by money (set pricing.${model} to cap them)`
  return `cost caps: ${set.map(([name, cap]) => `${name} ${usd(cap)}`).join(', ')}; this task has spent ${usd(spent)}`
}

import { existsSync, readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { UsageError } from '../errors.js'
import type { VariantSpec } from './store.js'

/**
 * `--variant NAME=CONFIG` or `--variant NAME=key=value,key=value` (docs/eval.md#variants):
 * a config file for the agent, and/or the `run` flags a variant changes. `config=FILE` may
 * stand among the keys; `replay=DIR` plays back `DIR/<task>.jsonl` for each task.
 */
const FLAGS: Record<string, string> = {
  provider: '--provider',
  model: '--model',
  max_turns: '--max-turns',
  max_tokens: '--max-tokens',
  timeout: '--timeout',
  max_cost: '--max-cost',
}
const KEYS = [...Object.keys(FLAGS), 'config', 'replay', 'allow_shell']
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/
const HINT = 'give --variant NAME=config.yaml or --variant NAME=model=gpt-4o-mini,max_turns=30 (keys: ' + KEYS.join(', ') + ')'

export function parseVariant(text: string, cwd: string): VariantSpec {
  const eq = text.indexOf('=')
  const name = eq < 0 ? text : text.slice(0, eq)
  if (!NAME.test(name)) throw new UsageError(`--variant ${JSON.stringify(text.slice(0, 60))} has no name of letters, digits, . _ - before =`, HINT)
  const value = eq < 0 ? '' : text.slice(eq + 1)
  const spec: VariantSpec = { name, config: null, flags: [], replay: null }
  if (value === '') return spec
  if (!value.includes('=')) return { ...spec, config: configFile(value, cwd, name) }
  for (const pair of value.split(',')) {
    const at = pair.indexOf('=')
    const key = pair.slice(0, at).trim()
    const v = pair.slice(at + 1).trim()
    if (at < 0 || v === '') throw new UsageError(`--variant ${name}: ${JSON.stringify(pair)} is not key=value`, HINT)
    if (key === 'config') spec.config = configFile(v, cwd, name)
    else if (key === 'replay') spec.replay = directory(v, cwd, name)
    else if (key === 'allow_shell') {
      if (v !== 'true' && v !== 'false') throw new UsageError(`--variant ${name}: allow_shell must be true or false`, HINT)
      if (v === 'true') spec.flags.push('--allow-shell')
    } else {
      const flag = FLAGS[key]
      if (flag === undefined) throw new UsageError(`--variant ${name}: ${key} is not a variant key`, HINT)
      spec.flags.push(flag, v)
    }
  }
  return spec
}

/** Variants must be named apart: their trials are told apart by name. */
export function checkVariants(variants: readonly VariantSpec[]): void {
  const seen = new Set<string>()
  for (const v of variants) {
    if (seen.has(v.name)) throw new UsageError(`two variants are named ${v.name}`, 'give each --variant a name of its own')
    seen.add(v.name)
  }
}

/** What each variant's config file says, for the eval's id (a changed file is another eval). */
export function configTexts(variants: readonly VariantSpec[]): string[] {
  return variants.map((v) => (v.config === null ? '' : readFileSync(v.config, 'utf8')))
}

function configFile(path: string, cwd: string, name: string): string {
  const full = resolve(cwd, path)
  if (!existsSync(full)) throw new UsageError(`--variant ${name}: no config file ${full}`, HINT)
  return full
}

function directory(path: string, cwd: string, name: string): string {
  const full = resolve(cwd, path)
  if (!existsSync(full)) throw new UsageError(`--variant ${name}: no directory ${full}`, HINT)
  return full
}

import type * as z from 'zod/mini'
import { CONFIG_SECTIONS, configSchemaOf } from './schema.js'
import type { Config } from './schema.js'

/*
 * A config file's data validated against the schema, building only what the file sets
 * (docs/development.md#start-up). A file sets a few of its 25 sections; the rest parse
 * from nothing to their defaults, which are known: so the sections the file names are
 * validated by their own schemas and the others are their defaults. A file that zod
 * would refuse is validated again by the whole schema, so that every message is the
 * whole schema's.
 */

/**
 * configSchema's defaults (what `{}` parses to) as JSON, put into the bundle by
 * scripts/bundle.mjs, which computes them from this schema when it builds; undefined
 * when running from dist/ (the tests), where zod computes them once.
 */
declare const CTXAGENT_DEFAULT_CONFIG: string | undefined

let defaultsJson: string | null = null

/** A fresh copy of the defaults: the caller changes its config (the environment's keys). */
export function configDefaults(): Config {
  defaultsJson ??= typeof CTXAGENT_DEFAULT_CONFIG === 'string' ? CTXAGENT_DEFAULT_CONFIG : JSON.stringify(configSchemaOf().parse({}))
  return JSON.parse(defaultsJson) as Config
}

const known = new Set<string>(CONFIG_SECTIONS)

/** The whole schema's safeParse of `data` (reportInput: its messages say "is empty" for a null). */
export function validateConfig(data: unknown): z.core.util.SafeParseResult<Config> {
  const named = data !== null && typeof data === 'object' && !Array.isArray(data) ? Object.keys(data) : null
  // Not a mapping, or a key that is no section: the whole schema says what is wrong.
  if (named === null || !named.every((key) => known.has(key))) return configSchemaOf().safeParse(data, { reportInput: true })
  const set = CONFIG_SECTIONS.filter((name) => named.includes(name))
  // jitless: zod would compile a fast path for each object schema on its first parse, which a
  // command that parses its config once never gets back; the result is the same.
  const result = configSchemaOf(set).safeParse(data, { reportInput: true, jitless: true })
  if (!result.success) return configSchemaOf().safeParse(data, { reportInput: true })
  const defaults = configDefaults()
  const parsed = result.data as Partial<Config>
  // The keys in the schema's order, as the whole schema's parse gives them.
  const config = Object.fromEntries(CONFIG_SECTIONS.map((name) => [name, set.includes(name) ? parsed[name] : defaults[name]])) as Config
  return { success: true, data: config }
}

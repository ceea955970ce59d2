import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { readRegularFile } from '../input-file.js'
import { CWD_CONFIG_NAMES, givenUrlKeys, readConfigText, shownConfigPath, withEnvironment } from './locate.js'
import type { ConfigLocation, LoadedConfig } from './locate.js'
import type { Config } from './schema.js'
import { MIN_SECRET_LENGTH, secretValues } from './secrets.js'
import { xdgDirectory } from '../xdg.js'

/*
 * A command's config without YAML or zod when its file was validated before
 * (docs/configuration.md#the-validation-cache). Loading the parser and the schema is
 * about 60 ms of a command's start-up on Node 20 (docs/development.md#start-up), more
 * than `list` spends on everything else. So the config a file validated to is kept,
 * under the hash of the file's whole text and the build that validated it, in
 * `$XDG_CACHE_HOME/ctxagent/config-cache.json`; a command whose file hashes the same
 * takes it from there. A file changed by one byte, another ctxagent build or another
 * Node is validated again. Only a file that validated is kept, and only once its command
 * ended well. The cache holds no secret: every value holding one is kept as where it
 * stands in the file's text, and read from the file itself.
 */

export interface CommandConfig extends LoadedConfig {
  /** Keeps this config's validation for the next command (once this one has ended well); nothing to keep when null. */
  remember: (() => void) | null
}

/**
 * What loadConfig (load.ts) gives, with the validation of an unchanged file taken from
 * the cache. Parsing and validating are imported only when needed.
 */
export async function loadCommandConfig(where: ConfigLocation): Promise<CommandConfig> {
  const { file, text, explicit } = readConfigText(where)
  const notice = explicit ? {} : await cwdNotice(where.cwd)
  if (text === '') return { config: withEnvironment(await defaults(), [], where.env), source: file, remember: null, ...notice }
  const cache = cacheFile(where.env)
  const key = cache === null ? null : cacheKey(BUILD_ID as string, text)
  const hit = cache === null || key === null ? null : readCached(cache, key, text)
  if (hit !== null) return { config: withEnvironment(hit.config, hit.given, where.env), source: file, remember: null, ...notice }
  const { parseConfigData } = await import('./load.js')
  const { config, data } = parseConfigData(text, file === null ? 'config' : shownConfigPath(file))
  const given = givenUrlKeys(data)
  // Taken before the environment's keys are added to it: only what the file says is kept.
  const entry = cache === null || key === null ? null : entryOf(key, text, config, given)
  return {
    config: withEnvironment(config, given, where.env),
    source: file,
    remember: cache === null || entry === null ? null : () => writeCached(cache, entry),
    ...notice,
  }
}

/** The build's identity, put into the bundle by scripts/bundle.mjs; undefined from dist/ (the tests), where nothing is cached. */
declare const CTXAGENT_BUILD_ID: string | undefined
const BUILD_ID = typeof CTXAGENT_BUILD_ID === 'string' ? CTXAGENT_BUILD_ID : undefined

/** configSchema's defaults as JSON, put into the bundle by scripts/bundle.mjs (validate.ts computes them from dist/). */
declare const CTXAGENT_DEFAULT_CONFIG: string | undefined

async function defaults(): Promise<Config> {
  if (typeof CTXAGENT_DEFAULT_CONFIG === 'string') return JSON.parse(CTXAGENT_DEFAULT_CONFIG) as Config
  return (await import('./validate.js')).configDefaults()
}

/** The notice about a ./config.yaml: the YAML parser is loaded only when there is such a file to look at. */
async function cwdNotice(cwd: string): Promise<{ notice?: string }> {
  if (!CWD_CONFIG_NAMES.some((name) => existsSync(join(cwd, name)))) return {}
  return (await import('./load.js')).cwdNotice(cwd)
}

/** `$XDG_CACHE_HOME/ctxagent/config-cache.json` (else ~/.cache/…), or null when nothing is cached: CTXAGENT_CONFIG_CACHE=off, or a build from dist/. */
export function cacheFile(env: NodeJS.ProcessEnv): string | null {
  if (BUILD_ID === undefined || env.CTXAGENT_CONFIG_CACHE === 'off') return null
  return join(cacheDirectory(env), 'config-cache.json')
}

/**
 * ctxagent's cache directory, `$XDG_CACHE_HOME/ctxagent` (else ~/.cache/ctxagent): this
 * cache and Node's compile cache (bin/ctxagent). What is there is taken as ctxagent's own, so
 * it is one of the places no tool may reach (src/run/sandbox-setup.ts).
 */
export function cacheDirectory(env: NodeJS.ProcessEnv): string {
  return join(xdgDirectory(env, 'XDG_CACHE_HOME'), 'ctxagent')
}

/** The validation of a file's text by one build on one Node: both change what validates (the schema; Intl's time zones). */
export function cacheKey(build: string, text: string): string {
  return `${build}:${process.version}:${text.length}:${textHash(text)}`
}

/**
 * 64 bits of the text (two 32-bit FNV-1a lanes, each seeded apart): no node:crypto at
 * start-up. Whoever could write a colliding file could write the cache itself (both are
 * the user's), so this guards against chance, which at 64 bits it does.
 */
function textHash(text: string): string {
  let a = 0x811c9dc5
  let b = 0x01000193 ^ text.length
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    a = Math.imul(a ^ c, 0x01000193)
    b = Math.imul(b ^ c, 0x5bd1e995) ^ (b >>> 15)
  }
  return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0')
}

/** One validated file: its config with each secret-holding value null, and where each stands in the text. */
export interface CacheEntry {
  key: string
  config: Config
  /** [the value's path in config, its start and end in the file's text] */
  secrets: [(string | number)[], number, number][]
  /** givenUrlKeys of the file's data */
  given: string[]
}

/** The entry to keep, or null when a secret-holding value is not written out as it is in the text (then nothing is kept). */
export function entryOf(key: string, text: string, config: Config, given: string[]): CacheEntry | null {
  const secrets = secretValues(config, {}).map((s) => s.value)
  /**
   * A value the file does not write as it is, holding only secrets too short to be masked ("k", "none") and none of
   * them whole: a default that has that letter or word in it by chance ("markdown", deliver mode "none"), kept. Else
   * every such file stayed out of the cache; a value the file writes is still taken out whatever it holds.
   */
  const byChance = (value: string) => secrets.every((secret) => !value.includes(secret) || (secret.length < MIN_SECRET_LENGTH && value !== secret))
  const copy = JSON.parse(JSON.stringify(config)) as Config
  const places: CacheEntry['secrets'] = []
  let ok = true
  const walk = (node: unknown, path: (string | number)[]): void => {
    if (node === null || typeof node !== 'object') return
    for (const [name, value] of Object.entries(node)) {
      const at = [...path, Array.isArray(node) ? Number(name) : name]
      if (typeof value !== 'string') {
        walk(value, at)
        continue
      }
      if (!secrets.some((secret) => value.includes(secret))) continue
      const start = text.indexOf(value)
      if (start < 0 && byChance(value)) continue
      if (start < 0) ok = false
      places.push([at, start, start + value.length])
      ;(node as Record<string, unknown>)[name] = null
    }
  }
  walk(copy, [])
  return ok ? { key, config: copy, secrets: places, given } : null
}

const MAX_ENTRIES = 8
const MAX_CACHE_BYTES = 1 << 20

/**
 * The entry for `key`, with its secrets read back from `text`; null on any doubt: no
 * file, not a regular file of this user that only they may write, not JSON of this shape.
 */
export function readCached(path: string, key: string, text: string): { config: Config; given: string[] } | null {
  const entry = entries(path).find((e) => e.key === key)
  if (entry === undefined) return null
  const config = entry.config
  for (const [at, start, end] of entry.secrets) {
    if (!Array.isArray(at) || at.length === 0 || !Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end > text.length) return null
    let node: unknown = config
    for (const step of at.slice(0, -1)) node = node !== null && typeof node === 'object' ? (node as Record<string, unknown>)[step] : undefined
    const last = at[at.length - 1] as string | number
    if (node === null || typeof node !== 'object' || (node as Record<string, unknown>)[last] !== null) return null
    ;(node as Record<string, unknown>)[last] = text.slice(start, end)
  }
  return { config, given: entry.given }
}

function entries(path: string): CacheEntry[] {
  const read = readRegularFile(path, MAX_CACHE_BYTES)
  if (!read.ok) return []
  // Written by this user and by no one else: the same rule as the config file's own (trust.ts).
  if (read.stat.uid !== (process.getuid?.() ?? 0) || (read.stat.mode & 0o022) !== 0) return []
  try {
    const data = JSON.parse(read.text) as { entries?: unknown }
    if (!Array.isArray(data.entries)) return []
    return data.entries.filter(
      (e): e is CacheEntry =>
        e !== null &&
        typeof e === 'object' &&
        typeof e.key === 'string' &&
        e.config !== null &&
        typeof e.config === 'object' &&
        Array.isArray(e.secrets) &&
        Array.isArray(e.given) &&
        e.given.every((g: unknown) => typeof g === 'string'),
    )
  } catch {
    return []
  }
}

/**
 * Puts `entry` first, keeping up to 7 others (a host's few config files; a test suite's
 * thousands of temporary ones cannot grow it). Written whole and renamed into place, so a
 * reader sees the old file or the new one; two commands writing at once keep one of theirs.
 * A cache is no record: when it cannot be written (a read-only home), nothing is said.
 * The file is read again here rather than kept from the miss: a command that ran meanwhile may
 * have added its own entry, which a stale copy would drop.
 */
export function writeCached(path: string, entry: CacheEntry): void {
  const kept = [entry, ...entries(path).filter((e) => e.key !== entry.key)].slice(0, MAX_ENTRIES)
  const tmp = `${path}.${process.pid}.tmp`
  try {
    mkdirSync(join(path, '..'), { recursive: true, mode: 0o700 })
    writeFileSync(tmp, `${JSON.stringify({ entries: kept })}\n`, { mode: 0o600, flag: 'wx' })
    renameSync(tmp, path)
  } catch {
    try {
      rmSync(tmp, { force: true })
    } catch {}
  }
}

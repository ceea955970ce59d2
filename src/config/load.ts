import { join } from 'node:path'
import { isCollection, isMap, isPair, isScalar, isSeq, parseDocument } from 'yaml'
import type { Node as YamlNode, YAMLError } from 'yaml'
import type * as z from 'zod/mini'
import { UsageError } from '../errors.js'
import { readRegularFile } from '../input-file.js'
import { CONFIG_SECTIONS } from './schema.js'
import { crossCheck } from './cross-check.js'
import { formatPath, shown } from './shown.js'
import type { Config } from './schema.js'
import { CWD_CONFIG_NAMES, givenUrlKeys, MAX_CONFIG_BYTES, readConfigText, shownConfigPath, withEnvironment } from './locate.js'
import type { ConfigLocation, LoadedConfig } from './locate.js'
import { configDefaults, validateConfig } from './validate.js'

// Reading a config file: YAML to data, validation against the schema, and every problem
// as one line that names the key and what it expects. Where the file is and what the
// environment adds: locate.ts.

/**
 * The config in force (docs/contract.md §1): the file readConfigText finds, parsed and
 * validated, then the environment's part. A `./config.yaml` or `./ctxagent.yaml` holding
 * ctxagent's keys gets a notice saying where the config goes. Commands load it through
 * config-cache.ts, which skips parsing a file already validated.
 */
export function loadConfig(where: ConfigLocation): LoadedConfig {
  const { file, text, explicit } = readConfigText(where)
  const { config, data } = parseConfigData(text, file === null ? 'config' : shownConfigPath(file))
  return { config: withEnvironment(config, givenUrlKeys(data), where.env), source: file, ...(explicit ? {} : cwdNotice(where.cwd)) }
}

/**
 * A `./config.yaml` or `./ctxagent.yaml` that looks like ctxagent's (one of its top-level
 * sections and no key it does not know): worth one line saying it is not read and where
 * the config goes. Another tool's file there gets no word at all.
 */
export function cwdNotice(cwd: string): { notice?: string } {
  for (const name of CWD_CONFIG_NAMES) {
    if (!looksLikeOurs(join(cwd, name))) continue
    return {
      notice: `./${name} is not read: nothing in the current directory is configuration, since a model working there could write it (docs/contract.md §8); move it to ~/.config/ctxagent/config.yaml or /etc/ctxagent/config.yaml, or name it with --config`,
    }
  }
  return {}
}

function looksLikeOurs(path: string): boolean {
  const read = readRegularFile(path, MAX_CONFIG_BYTES)
  if (!read.ok) return false
  let data: unknown
  try {
    data = parseDocument(read.text, { logLevel: 'silent' }).toJS()
  } catch {
    return false
  }
  if (data === null || typeof data !== 'object' || Array.isArray(data)) return false
  const keys = Object.keys(data)
  return keys.length > 0 && keys.every((k) => (CONFIG_SECTIONS as string[]).includes(k))
}

const SEE_EXAMPLE = 'see config.example.yaml for every key and its default'

/** Parses YAML text into a validated config; `file` only names the source in errors. */
export function parseConfig(yamlText: string, file = 'config.yaml'): Config {
  return parseConfigData(yamlText, file).config
}

/**
 * Another YAML file ctxagent reads with a schema (a repository's environment file): the
 * config's own rules (plain YAML, one document, no `__proto__`) and its one-line messages.
 */
export function parseYamlWith<T>(schema: z.ZodMiniType<T>, yamlText: string, file: string): T {
  const data = readYaml(yamlText, file)
  const reserved = findProtoKey(data, [])
  if (reserved) throw new UsageError(`${file}: ${formatPath(reserved)} cannot be used as a name (__proto__ is reserved)`, 'fix the file')
  const result = schema.safeParse(data, { reportInput: true })
  if (!result.success) throw new UsageError(`${file}: ${describeIssues(result.error.issues)}`, 'fix the file')
  return result.data
}

/** A config file's text to its validated config and the data as written (which keys it sets). */
export function parseConfigData(yamlText: string, file: string): { config: Config; data: unknown } {
  // No file, or an empty one (most commands on most hosts): the defaults, without zod,
  // whose first validation of {} costs ~0.9 ms of every command's start-up.
  if (yamlText === '') return { config: configDefaults(), data: {} }
  const data = readYaml(yamlText, file)
  const reserved = findProtoKey(data, [])
  // zod drops a `__proto__` key without a word: a user or server of that name would silently vanish.
  if (reserved) throw new UsageError(`${file}: ${formatPath(reserved)} cannot be used as a name (__proto__ is reserved)`, SEE_EXAMPLE)
  // reportInput: the messages say "is empty" for a null; the input itself is never printed.
  const result = validateConfig(data)
  if (!result.success) throw new UsageError(`${file}: ${describeIssues(result.error.issues)}`, SEE_EXAMPLE)
  const problem = crossCheck(result.data)
  if (problem) throw new UsageError(`${file}: ${problem}`, SEE_EXAMPLE)
  return { config: result.data, data }
}

/**
 * Plain YAML to data. The yaml package's warnings (an unknown tag such as
 * `!!js/function`, an unsupported %YAML version) are errors here, and nothing is ever
 * handed to process.emitWarning (logLevel 'error'), so stderr keeps its one line.
 */
function readYaml(yamlText: string, file: string): unknown {
  // No file, or an empty one (what most commands start with): nothing to parse, and the
  // yaml parser's first run costs ~0.6 ms of every command's start-up.
  if (yamlText === '') return {}
  const doc = parseDocument(yamlText, { logLevel: 'error', prettyErrors: true })
  const error = doc.errors[0]
  if (error) {
    const why = error.code === 'MULTIPLE_DOCS' ? 'a second document starts here; a config file is one document' : yamlReason(error)
    throw new UsageError(`${file}:${yamlLine(error)} is not valid YAML (${why})`, 'fix the file')
  }
  const warning = doc.warnings[0]
  if (warning) {
    if (warning.code === 'TAG_RESOLVE_FAILED') {
      const tag = yamlText.slice(warning.pos[0], warning.pos[1]).split(/\s/)[0] || 'tag'
      const key = keyAt(doc.contents, warning.pos[0], [])
      const where = key === null || key.length === 0 ? 'the document' : formatPath(key)
      throw new UsageError(`${file}:${yamlLine(warning)}: ${where} has the unknown tag ${shown(tag, 60)}`, 'remove the tag: a config file is plain YAML')
    }
    throw new UsageError(`${file}:${yamlLine(warning)} is not valid YAML (${yamlReason(warning)})`, 'fix the file')
  }
  try {
    return doc.toJS() ?? {}
  } catch (err) {
    // yaml refuses alias expansions past maxAliasCount (a billion-laughs file).
    if (err instanceof ReferenceError)
      throw new UsageError(`${file}: expands YAML aliases (*name) too many times`, 'write the values out instead of repeating aliases')
    if (err instanceof RangeError) throw new UsageError(`${file}: is not valid YAML (nested too deeply)`, 'fix the file')
    throw err
  }
}

function yamlLine(error: YAMLError): string {
  return error.linePos ? ` line ${error.linePos[0].line}` : ''
}

/** The library's message, without its " at line 3, column 5:" and the source excerpt after it. */
function yamlReason(error: YAMLError): string {
  if (error.message.includes('Maximum call stack size exceeded')) return 'nested too deeply'
  return shown(firstLine(error.message).replace(/ at line \d+, column \d+:?$/, ''), 160)
}

/** The key path of the node at `pos` (a tag's position), or null when none holds it. */
function keyAt(node: unknown, pos: number, path: (string | number)[]): (string | number)[] | null {
  if (isMap(node)) {
    for (const pair of node.items) {
      if (!isPair(pair)) continue
      const start = (pair.key as YamlNode | null)?.range?.[0] ?? (pair.value as YamlNode | null)?.range?.[0]
      const end = (pair.value as YamlNode | null)?.range?.[2] ?? (pair.key as YamlNode | null)?.range?.[2]
      if (start === undefined || end === undefined || pos < start || pos >= end) continue
      const key = isScalar(pair.key) ? String(pair.key.value) : '?'
      const inner = isCollection(pair.value) ? keyAt(pair.value, pos, [...path, key]) : null
      return inner ?? [...path, key]
    }
    return path
  }
  if (isSeq(node)) {
    // A tag comes just before its item: the first item that ends after it is the one.
    const index = node.items.findIndex((item) => {
      const end = (item as YamlNode | null)?.range?.[2]
      return end !== undefined && pos < end
    })
    if (index < 0) return path
    const item = node.items[index]
    return (isCollection(item) ? keyAt(item, pos, [...path, index]) : null) ?? [...path, index]
  }
  return path
}

function findProtoKey(value: unknown, path: (string | number)[]): (string | number)[] | null {
  if (value === null || typeof value !== 'object') return null
  for (const [key, inner] of Object.entries(value)) {
    const found = findProtoKey(inner, [...path, Array.isArray(value) ? Number(key) : key])
    if (found) return found
  }
  return Object.hasOwn(value, '__proto__') ? [...path, '__proto__'] : null
}

/** The issue to tell of: a misspelt key is two issues, the unknown key and the required one it was meant to be, and the typo is what to say. */
function describeIssues(issues: readonly z.core.$ZodIssue[]): string {
  const issue = issues.find((i) => i.code === 'unrecognized_keys') ?? (issues[0] as z.core.$ZodIssue)
  return describeIssue(issue, issues)
}

/** A zod issue as `<key path> <what it expects>`: every schema above carries its own words. */
function describeIssue(issue: z.core.$ZodIssue, all: readonly z.core.$ZodIssue[]): string {
  const path = formatPath(issue.path)
  if (issue.code === 'unrecognized_keys') {
    const missing = all.find(
      (i) => i.code === 'invalid_type' && i.input === undefined && i.path.length === issue.path.length + 1 && sameStart(i.path, issue.path),
    )
    const meant = missing === undefined ? '' : ` (did you mean ${String(missing.path.at(-1))}?)`
    return `${formatPath([...issue.path, issue.keys[0] as string])} is not a known setting${meant}`
  }
  const subject = path || 'the file'
  const expects = issue.message.startsWith('must ') || issue.message.startsWith('is ') ? issue.message : fallbackMessage(issue)
  if (issue.code === 'invalid_type' && issue.input === null && expects.startsWith('must ')) return `${subject} is empty; it ${expects}`
  return `${subject} ${expects}`
}

function sameStart(path: readonly PropertyKey[], prefix: readonly PropertyKey[]): boolean {
  return prefix.every((key, i) => path[i] === key)
}

/** Words for an issue a schema gave none for (none should reach here; this keeps zod's "Invalid input" out). */
function fallbackMessage(issue: z.core.$ZodIssue): string {
  if (issue.code === 'invalid_type') {
    const words: Record<string, string> = {
      string: 'a string',
      number: 'a number',
      int: 'a whole number',
      boolean: 'true or false',
      object: 'a mapping of keys',
      record: 'a mapping of keys',
      array: 'a list',
      map: 'a mapping of keys',
    }
    return `must be ${words[issue.expected] ?? issue.expected}`
  }
  if (issue.code === 'invalid_value') return `must be ${issue.values.map(String).join(' or ')}`
  return 'has a value ctxagent cannot use'
}

function firstLine(message: string): string {
  return message.split('\n')[0] ?? message
}

import { isCollection, isMap, isPair, isScalar, isSeq, parseDocument } from 'yaml'
import type { Node as YamlNode, YAMLError } from 'yaml'
import type * as z from 'zod/mini'
import { isErrno, UsageError } from '../errors.js'
import { describeErrno, readRegularFile } from '../input-file.js'
import { shortPath } from '../text.js'
import { configSchema, crossCheck, formatPath, shown } from './schema.js'
import type { Config } from './schema.js'
import { urlWithCredentials } from './secrets.js'

// Reading a config file: where it is, YAML to data, validation against the schema,
// and every problem as one line that names the key and what it expects.

export interface LoadedConfig {
  config: Config
  /** The file it came from, or null when only defaults (and the environment) apply. */
  source: string | null
}

export interface ConfigLocation {
  /** --config */
  flag?: string | undefined
  env: NodeJS.ProcessEnv
  cwd: string
}

/** `--config` > `CTXAGENT_CONFIG` > `./config.yaml` > defaults (SPEC §10). */
export function loadConfig(where: ConfigLocation): LoadedConfig {
  if (where.flag === '') throw new UsageError('--config: the path is empty', 'give the config file to use, or leave --config out')
  const explicit = where.flag ?? (nonEmpty(where.env.CTXAGENT_CONFIG) ?? undefined)
  const file = explicit ?? 'config.yaml'
  const raw = readConfigFile(resolveFrom(where.cwd, file), shownPath(file), explicit !== undefined)
  const config = parseConfig(raw ?? '', shownPath(file))
  applyEnvironment(config, where.env)
  const withUser = urlWithCredentials(config)
  if (withUser !== null) {
    throw new UsageError(`${withUser} carries a user name or password (scheme://user:password@host); ctxagent refuses credentials in URLs, which would be printed and stored`, 'give the URL without user:password@ and the key in its own setting (api_key, token) or variable')
  }
  return { config, source: raw === null ? null : file }
}

const MAX_CONFIG_BYTES = 1 << 20

/**
 * A config file: a regular file of at most 1 MB (readRegularFile), so `--config
 * /dev/zero` cannot read forever nor a FIFO hang the command. Null when the implicit ./config.yaml does not exist. Errors
 * keep the shape `<file>: cannot read config (<why>)`, errno in words.
 */
function readConfigFile(path: string, shown: string, explicit: boolean): string | null {
  const read = readRegularFile(path, MAX_CONFIG_BYTES)
  if (read.ok) return read.text
  if (read.problem === 'unreadable' && isErrno(read.err, 'ENOENT') && !explicit) return null
  const why =
    read.problem === 'unreadable' ? describeErrno(read.err)
    : read.problem === 'directory' ? 'it is a directory'
    : read.problem === 'size' ? `${read.size.toLocaleString('en-US')} bytes; the limit is 1 MB`
    : 'not a regular file'
  throw new UsageError(`${shown}: cannot read config (${why})`, explicit ? 'check the --config path or CTXAGENT_CONFIG' : 'ctxagent reads ./config.yaml when no --config or CTXAGENT_CONFIG is given: fix or rename it')
}

const SEE_EXAMPLE = 'see config.example.yaml for every key and its default'

/** Parses YAML text into a validated config; `file` only names the source in errors. */
export function parseConfig(yamlText: string, file = 'config.yaml'): Config {
  const data = readYaml(yamlText, file)
  const reserved = findProtoKey(data, [])
  // zod drops a `__proto__` key without a word: a user or server of that name would silently vanish.
  if (reserved) throw new UsageError(`${file}: ${formatPath(reserved)} cannot be used as a name (__proto__ is reserved)`, SEE_EXAMPLE)
  // reportInput: the messages say "is empty" for a null; the input itself is never printed.
  const result = configSchema.safeParse(data, { reportInput: true })
  if (!result.success) {
    const issue = result.error.issues[0] as z.core.$ZodIssue
    throw new UsageError(`${file}: ${describeIssue(issue)}`, SEE_EXAMPLE)
  }
  const problem = crossCheck(result.data)
  if (problem) throw new UsageError(`${file}: ${problem}`, SEE_EXAMPLE)
  return result.data
}

/**
 * Plain YAML to data. The yaml package's warnings (an unknown tag such as
 * `!!js/function`, an unsupported %YAML version) are errors here, and nothing is ever
 * handed to process.emitWarning (logLevel 'error'), so stderr keeps its one line.
 */
function readYaml(yamlText: string, file: string): unknown {
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
    if (err instanceof ReferenceError) throw new UsageError(`${file}: expands YAML aliases (*name) too many times`, 'write the values out instead of repeating aliases')
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
    const index = node.items.findIndex((item) => { const end = (item as YamlNode | null)?.range?.[2]; return end !== undefined && pos < end })
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
  return Object.prototype.hasOwnProperty.call(value, '__proto__') ? [...path, '__proto__'] : null
}

/** A zod issue as `<key path> <what it expects>`: every schema above carries its own words. */
function describeIssue(issue: z.core.$ZodIssue): string {
  const path = formatPath(issue.path)
  if (issue.code === 'unrecognized_keys') {
    return `${formatPath([...issue.path, issue.keys[0] as string])} is not a known setting`
  }
  const subject = path || 'the file'
  const expects = issue.message.startsWith('must ') || issue.message.startsWith('is ') ? issue.message : fallbackMessage(issue)
  if (issue.code === 'invalid_type' && issue.input === null && expects.startsWith('must ')) return `${subject} is empty; it ${expects}`
  return `${subject} ${expects}`
}

/** Words for an issue a schema gave none for (none should reach here; this keeps zod's "Invalid input" out). */
function fallbackMessage(issue: z.core.$ZodIssue): string {
  if (issue.code === 'invalid_type') {
    const words: Record<string, string> = { string: 'a string', number: 'a number', int: 'a whole number', boolean: 'true or false', object: 'a mapping of keys', record: 'a mapping of keys', array: 'a list', map: 'a mapping of keys' }
    return `must be ${words[issue.expected] ?? issue.expected}`
  }
  if (issue.code === 'invalid_value') return `must be ${issue.values.map(String).join(' or ')}`
  return 'has a value ctxagent cannot use'
}

function shownPath(file: string): string {
  return shortPath(shown(file, 4096))
}

function applyEnvironment(config: Config, env: NodeJS.ProcessEnv): void {
  // The file wins; the environment fills in secrets the file leaves out.
  config.llm.openai.api_key ??= nonEmpty(env.OPENAI_API_KEY)
  config.github.token ??= nonEmpty(env.GITHUB_TOKEN)
  config.gitlab.token ??= nonEmpty(env.GITLAB_TOKEN)
}

function nonEmpty(value: string | undefined): string | null {
  return value === undefined || value === '' ? null : value
}

function firstLine(message: string): string {
  return message.split('\n')[0] ?? message
}

function resolveFrom(cwd: string, file: string): string {
  return file.startsWith('/') ? file : `${cwd}/${file}`
}

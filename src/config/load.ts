import { homedir } from 'node:os'
import { isAbsolute, join } from 'node:path'
import { isCollection, isMap, isPair, isScalar, isSeq, parseDocument } from 'yaml'
import type { Node as YamlNode, YAMLError } from 'yaml'
import type * as z from 'zod/mini'
import { isErrno, UsageError } from '../errors.js'
import { describeErrno, readRegularFile } from '../input-file.js'
import { grouped, shortPath } from '../text.js'
import { CONFIG_SECTIONS, isHttpUrl } from './schema.js'
import { crossCheck } from './cross-check.js'
import { formatPath, shown } from './shown.js'
import type { Config } from './schema.js'
import { urlWithCredentials } from './secrets.js'
import { whyUntrusted } from './trust.js'
import { configDefaults, validateConfig } from './validate.js'

// Reading a config file: where it is, YAML to data, validation against the schema,
// and every problem as one line that names the key and what it expects.

export interface LoadedConfig {
  config: Config
  /** The file it came from, or null when only defaults (and the environment) apply. */
  source: string | null
  /** One line for the operator (a ./config.yaml that is no longer read), printed once by the caller. */
  notice?: string
}

export interface ConfigLocation {
  /** --config */
  flag?: string | undefined
  env: NodeJS.ProcessEnv
  cwd: string
}

/** What `--config none` (or CTXAGENT_CONFIG=none) means: no file at all, only defaults and the environment. */
export const NO_CONFIG = 'none'

/**
 * `--config` > `CTXAGENT_CONFIG` > `$XDG_CONFIG_HOME/ctxagent/config.yaml` (else
 * ~/.config/…) > `/etc/ctxagent/config.yaml`, the first found (docs/contract.md §1). Nothing in the
 * current directory is read: it is `run`'s default workspace, where a model writes files
 * (docs/contract.md §8). A `./config.yaml` or `./ctxagent.yaml` holding ctxagent's keys gets a notice
 * saying where the config goes. A file anyone but its owner could change, or owned by
 * someone other than root or this user, is refused (as sshd's StrictModes does).
 */
export function loadConfig(where: ConfigLocation): LoadedConfig {
  if (where.flag === '') throw new UsageError('--config: the path is empty', `give the config file to use, ${NO_CONFIG} for no file, or leave --config out`)
  const explicit = where.flag ?? nonEmpty(where.env.CTXAGENT_CONFIG) ?? undefined
  let file: string | null
  let raw: string | null
  if (explicit === NO_CONFIG) [file, raw] = [null, null]
  else if (explicit !== undefined) [file, raw] = [explicit, readConfigFile(resolveFrom(where.cwd, explicit), shownPath(explicit), true)]
  else [file, raw] = findConfig(where)
  if (raw === null) file = null
  const { config, data } = parseConfigData(raw ?? '', file === null ? 'config' : shownPath(file))
  applyEnvironment(config, data, where.env)
  const withUser = urlWithCredentials(config, where.env)
  if (withUser !== null) {
    throw new UsageError(
      `${withUser} carries a user name or password (scheme://user:password@host); ctxagent refuses credentials in URLs, which would be printed and stored`,
      'give the URL without user:password@ and the key in its own setting (api_key, token, telemetry.headers) or variable',
    )
  }
  return { config, source: file, ...(explicit === undefined ? notice(where) : {}) }
}

/**
 * The config files looked for, in order, when neither --config nor CTXAGENT_CONFIG names
 * one: the user's (XDG_CONFIG_HOME, else ~/.config) and the system's. Never one in the
 * current directory.
 */
export function configCandidates(env: NodeJS.ProcessEnv): string[] {
  const xdg = env.XDG_CONFIG_HOME
  const home = env.HOME !== undefined && isAbsolute(env.HOME) ? env.HOME : homedir()
  const userDir = xdg !== undefined && isAbsolute(xdg) ? xdg : join(home, '.config')
  return [join(userDir, 'ctxagent', 'config.yaml'), SYSTEM_CONFIG]
}

const SYSTEM_CONFIG = '/etc/ctxagent/config.yaml'

function findConfig(where: ConfigLocation): [string | null, string | null] {
  for (const path of configCandidates(where.env)) {
    const raw = readConfigFile(path, shownPath(path), false)
    if (raw !== null) return [path, raw]
  }
  return [null, null]
}

/**
 * A `./config.yaml` or `./ctxagent.yaml` that looks like ctxagent's (one of its top-level
 * sections and no key it does not know): worth one line saying it is not read and where
 * the config goes. Another tool's file there gets no word at all.
 */
function notice(where: ConfigLocation): { notice?: string } {
  for (const name of ['ctxagent.yaml', 'config.yaml']) {
    if (!looksLikeOurs(join(where.cwd, name))) continue
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

const MAX_CONFIG_BYTES = 1 << 20

/**
 * A config file: a regular file of at most 1 MB (readRegularFile), so `--config
 * /dev/zero` cannot read forever nor a FIFO hang the command. Null when a looked-for file
 * (not one named by --config or CTXAGENT_CONFIG) does not exist. Errors keep the shape
 * `<file>: cannot read config (<why>)`, errno in words.
 */
function readConfigFile(path: string, shown: string, explicit: boolean): string | null {
  const read = readRegularFile(path, MAX_CONFIG_BYTES)
  if (read.ok) {
    const untrusted = whyUntrusted(path, read.stat)
    if (untrusted !== null)
      throw new UsageError(
        `${shown}: refused as config: ${untrusted.why}`,
        `${untrusted.fix}; ctxagent reads a config file only when no one but its owner (root or you) can change it`,
      )
    return read.text
  }
  if (read.problem === 'unreadable' && (isErrno(read.err, 'ENOENT') || isErrno(read.err, 'ENOTDIR')) && !explicit) return null
  const why =
    read.problem === 'unreadable'
      ? describeErrno(read.err)
      : read.problem === 'directory'
        ? 'it is a directory'
        : read.problem === 'size'
          ? `${grouped(read.size)} bytes; the limit is 1 MB`
          : 'not a regular file'
  throw new UsageError(
    `${shown}: cannot read config (${why})`,
    explicit
      ? 'check the --config path or CTXAGENT_CONFIG'
      : `ctxagent reads the first of ~/.config/ctxagent/config.yaml, /etc/ctxagent/config.yaml: fix this one, or pass --config ${NO_CONFIG}`,
  )
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

function parseConfigData(yamlText: string, file: string): { config: Config; data: unknown } {
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

function shownPath(file: string): string {
  return shortPath(shown(file, 4096))
}

/**
 * The ecosystem's variables, each below the file (documented in docs/configuration.md):
 * the OpenAI SDK's OPENAI_API_KEY, OPENAI_BASE_URL (only when the file sets no
 * llm.openai.base_url), the Anthropic SDK's ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL
 * (the same way), Ollama's OLLAMA_HOST, gh's GH_TOKEN before GITHUB_TOKEN, and
 * GITLAB_TOKEN. A URL from the environment is checked as strictly as one from the file.
 */
function applyEnvironment(config: Config, data: unknown, env: NodeJS.ProcessEnv): void {
  config.llm.openai.api_key ??= nonEmpty(env.OPENAI_API_KEY)
  config.llm.anthropic.api_key ??= nonEmpty(env.ANTHROPIC_API_KEY)
  config.github.token ??= nonEmpty(env.GH_TOKEN) ?? nonEmpty(env.GITHUB_TOKEN)
  config.gitlab.token ??= nonEmpty(env.GITLAB_TOKEN)
  const openaiUrl = nonEmpty(env.OPENAI_BASE_URL)
  if (openaiUrl !== null && !given(data, ['llm', 'openai', 'base_url'])) config.llm.openai.base_url = envUrl('OPENAI_BASE_URL', openaiUrl)
  const anthropicUrl = nonEmpty(env.ANTHROPIC_BASE_URL)
  if (anthropicUrl !== null && !given(data, ['llm', 'anthropic', 'base_url'])) config.llm.anthropic.base_url = envUrl('ANTHROPIC_BASE_URL', anthropicUrl)
  const ollamaHost = nonEmpty(env.OLLAMA_HOST)
  if (ollamaHost !== null && !given(data, ['llm', 'ollama', 'base_url'])) {
    // Ollama's own form is host:port (http assumed); its OpenAI-compatible API is under /v1.
    const url = /^https?:\/\//i.test(ollamaHost) ? ollamaHost : `http://${ollamaHost}`
    config.llm.ollama.base_url = `${envUrl('OLLAMA_HOST', url).replace(/\/+$/, '')}/v1`
  }
}

function envUrl(name: string, value: string): string {
  if (!isHttpUrl(value))
    throw new UsageError(
      `${name} must be an http(s) URL, like http://127.0.0.1:8080/v1 (got '${shown(value.replace(/\/\/[^/@\s]*@/, '//…@'), 80)}')`,
      `fix or unset ${name}`,
    )
  return value
}

function given(data: unknown, path: string[]): boolean {
  let node = data
  for (const key of path) {
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, key)) return false
    node = (node as Record<string, unknown>)[key]
  }
  return node !== undefined && node !== null
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

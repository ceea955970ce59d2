import { isCollection, isMap, isPair, isScalar, isSeq, parseDocument } from 'yaml'
import type { Node as YamlNode, YAMLError } from 'yaml'
// zod/mini: the same validation as zod's classic API through functions instead of
// methods, so that the bundle keeps only what is used (a command parses less code).
import * as z from 'zod/mini'
import { isDuration } from '../duration.js'
import { isErrno, UsageError } from '../errors.js'
import { describeErrno, readRegularFile } from '../input-file.js'
import { clip, shortPath } from '../text.js'

/** The task tree when neither --home, CTXAGENT_HOME nor the file names one. */
export const DEFAULT_BASE_DIR = './logs/contexts'

const POSITIVE_INT = 'must be a positive integer'
const NON_NEGATIVE_INT = 'must be a whole number of 0 or more'
const POSITIVE_NUMBER = 'must be a positive number'
const RATIO = 'must be a number greater than 0 and at most 1'
const DURATION = 'must be a duration such as 90s, 30m or 1h30m'
const COMMAND_TIMEOUT = 'must be a whole number of seconds from 1 to 600'

const positiveInt = () => z.int({ error: POSITIVE_INT }).check(z.positive({ error: POSITIVE_INT }))
const nonNegativeInt = () => z.int({ error: NON_NEGATIVE_INT }).check(z.gte(0, { error: NON_NEGATIVE_INT }))
const positiveNumber = () => z.number({ error: POSITIVE_NUMBER }).check(z.positive({ error: POSITIVE_NUMBER }))
const PERCENT = 'must be a percentage from 0 to 100'
const percent = () => z.number({ error: PERCENT }).check(z.gte(0, { error: PERCENT }), z.lte(100, { error: PERCENT }))
const ratio = () => z.number({ error: RATIO }).check(z.gt(0, { error: RATIO }), z.lte(1, { error: RATIO }))
const text = () => z.string({ error: 'must be a string' })
const MAPPING = 'must be a mapping of keys'
const flag = () => z.boolean({ error: 'must be true or false' })
const oneOf = <const T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: `must be ${values.slice(0, -1).join(', ')} or ${values.at(-1)}` })

const withDefault = z._default
const orNull = <T extends z.core.SomeType>(schema: T) => z._default(z.nullable(schema), null)
// Every key has a default, so an absent section parses as {} (typed loosely: zod cannot see that generically).
const section = <T extends z.core.$ZodLooseShape>(shape: T) => z.prefault(z.strictObject(shape, { error: MAPPING }), {} as never)

/** An http(s) URL with a host: what a client can be pointed at (never `javascript:…` or `localhost:11434`). */
export function isHttpUrl(value: string): boolean {
  if (/\s/.test(value) || !/^https?:\/\//i.test(value)) return false
  try {
    const url = new URL(value)
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== ''
  } catch {
    return false
  }
}
/** The URL keys: each says what it expected, with an example, and what it got (user:password cut out). */
const httpUrl = (example: string) => {
  const error = (iss: { input?: unknown }) =>
    `must be an http(s) URL, like ${example}${typeof iss.input === 'string' ? ` (got '${shown(iss.input.replace(/\/\/[^/@\s]*@/, '//…@'), 80)}')` : ''}`
  return z.string({ error }).check(z.refine(isHttpUrl, { error }))
}

/** A duration as in the CLI (`90s`, `30m`, `1h30m`, or a number of seconds), kept as text and parsed where used. */
const duration = () =>
  z.string({ error: DURATION }).check(z.refine((value: string) => isDuration(value), { error: DURATION }))

export const PROVIDERS = ['openai', 'ollama', 'replay', 'none'] as const
export type Provider = (typeof PROVIDERS)[number]

/** `users.<name>` (SPEC §12.7): what one user's tasks change of the defaults. */
const userSettings = z.strictObject(
  {
    llm: z.optional(
      z.strictObject(
        {
          provider: z.optional(oneOf(PROVIDERS)),
          model: z.optional(text()),
          context_length: z.optional(positiveInt()),
        },
        { error: 'must be a mapping of keys: provider, model, context_length' },
      ),
    ),
    run: z.optional(z.strictObject({ max_turns: z.optional(positiveInt()), max_tokens: z.optional(positiveInt()) }, { error: 'must be a mapping of keys: max_turns, max_tokens' })),
    system_prompt_append: z.optional(text()),
  },
  { error: 'must be a mapping of settings: llm, run, system_prompt_append' },
)

const mcpServer = z.strictObject(
  {
    command: z.string({ error: (iss) => (iss.input === undefined ? 'is missing: the program that starts the server, like npx' : 'must be a string') }),
    args: withDefault(z.array(text(), { error: 'must be a list of strings, like [-y, some-package]' }), []),
    env: withDefault(z.record(z.string(), z.string({ error: 'must be a string (put numbers and true/false in quotes)' }), { error: 'must be a mapping of variable names to values' }), {}),
    cwd: orNull(text()),
    enabled: withDefault(flag(), true),
    timeout_seconds: withDefault(positiveNumber(), 60),
  },
  { error: 'must be a mapping of settings with at least command (and args, env, cwd, enabled, timeout_seconds)' },
)

const endpoint = (baseUrl: string, model: string, contextLength: number) =>
  section({
    base_url: withDefault(httpUrl(baseUrl), baseUrl),
    api_key: orNull(text()),
    model: withDefault(text(), model),
    context_length: withDefault(positiveInt(), contextLength),
    timeout_seconds: withDefault(positiveNumber(), 120),
    max_retries: withDefault(nonNegativeInt(), 3),
  })

export const configSchema = z.strictObject(
  {
    context: section({
      base_dir: withDefault(text(), DEFAULT_BASE_DIR),
      durability: withDefault(oneOf(['flush', 'fsync']), 'flush'),
      max_memory_messages: withDefault(positiveInt(), 20),
      compression: section({
        threshold: withDefault(ratio(), 0.7),
        token_threshold: orNull(positiveInt()),
        keep_recent: withDefault(positiveInt(), 10),
        min_to_compress: withDefault(positiveInt(), 5),
      }),
      prune: section({ protected_turns: withDefault(nonNegativeInt(), 3) }),
      inheritance: section({ enabled: withDefault(flag(), true), max_summary_tokens: withDefault(positiveInt(), 4000) }),
      retention: section({ compress_after_days: withDefault(positiveNumber(), 7), delete_after_days: withDefault(positiveNumber(), 30) }),
    }),
    locks: section({
      heartbeat_seconds: withDefault(positiveNumber(), 30),
      stale_after_seconds: withDefault(positiveNumber(), 60),
      stale_after_remote_seconds: orNull(positiveNumber()),
    }),
    llm: section({
      provider: withDefault(oneOf(PROVIDERS), 'openai'),
      openai: endpoint('https://api.openai.com/v1', 'gpt-4o', 128_000),
      ollama: endpoint('http://localhost:11434/v1', 'llama3.1', 8_192),
      replay: section({
        // A recorded task to play back: its uuid (or prefix) or a messages.jsonl path.
        from: orNull(text()),
        context_length: withDefault(positiveInt(), 8_192),
      }),
    }),
    run: section({
      max_turns: withDefault(positiveInt(), 100),
      max_tokens: orNull(positiveInt()),
      timeout: orNull(duration()),
      system_prompt_append: orNull(text()),
    }),
    tools: section({
      shell: withDefault(flag(), false),
      command_timeout_seconds: withDefault(z.int({ error: COMMAND_TIMEOUT }).check(z.positive({ error: COMMAND_TIMEOUT }), z.lte(600, { error: COMMAND_TIMEOUT })), 120),
    }),
    users: withDefault(z.record(z.string(), userSettings, { error: 'must be a mapping of user names to settings (llm, run, system_prompt_append)' }), {}),
    mcp: section({
      servers: withDefault(
        z.record(z.string(), mcpServer, { error: 'must be a mapping of server names to settings (command, args, env, cwd, enabled, timeout_seconds)' }),
        {},
      ),
    }),
    github: section({ api_url: withDefault(httpUrl('https://github.example.com/api/v3'), 'https://api.github.com'), token: orNull(text()), bot_name: orNull(text()) }),
    gitlab: section({ url: withDefault(httpUrl('https://gitlab.example.com'), 'https://gitlab.com'), token: orNull(text()), bot_name: orNull(text()) }),
    comments: section({ min_interval_seconds: withDefault(positiveNumber(), 30) }),
    chat: section({
      wait_interval_seconds: withDefault(positiveNumber(), 5),
      soft_timeout_minutes: withDefault(positiveNumber(), 10),
      hard_timeout_minutes: withDefault(positiveNumber(), 15),
      end_grace_seconds: withDefault(positiveNumber(), 60),
    }),
    alerts: section({
      disk_warning_gb: withDefault(positiveNumber(), 10),
      disk_critical_gb: withDefault(positiveNumber(), 50),
      failure_rate: withDefault(ratio(), 0.1),
      max_running_tasks: withDefault(positiveInt(), 100),
      long_running_hours: withDefault(positiveNumber(), 6),
      free_warning_percent: withDefault(percent(), 10),
      free_critical_percent: withDefault(percent(), 2),
    }),
  },
  { error: MAPPING },
)

export type Config = z.infer<typeof configSchema>

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

/** Rules that span keys, or that a type alone cannot say. */
function crossCheck(config: Config): string | null {
  const locks = config.locks
  if (locks.heartbeat_seconds >= locks.stale_after_seconds) {
    return `locks.heartbeat_seconds (${locks.heartbeat_seconds}) must be less than locks.stale_after_seconds (${locks.stale_after_seconds}), or every live agent would look dead`
  }
  if (locks.stale_after_remote_seconds !== null && locks.heartbeat_seconds >= locks.stale_after_remote_seconds) {
    return `locks.heartbeat_seconds (${locks.heartbeat_seconds}) must be less than locks.stale_after_remote_seconds (${locks.stale_after_remote_seconds}), or every live agent on another host would look dead`
  }
  if (config.context.base_dir.trim() === '') return 'context.base_dir must not be empty (leave it out for ./logs/contexts)'
  const retention = config.context.retention
  if (retention.compress_after_days >= retention.delete_after_days) {
    return `context.retention.compress_after_days (${retention.compress_after_days}) must be less than context.retention.delete_after_days (${retention.delete_after_days}), or tasks would be deleted before they are ever gzipped`
  }
  const alerts = config.alerts
  if (alerts.disk_warning_gb >= alerts.disk_critical_gb) {
    return `alerts.disk_warning_gb (${alerts.disk_warning_gb}) must be less than alerts.disk_critical_gb (${alerts.disk_critical_gb}), or the warning could never be raised`
  }
  // 0 % free is never undercut: 0 turns that alert off, and both may be off.
  if (alerts.free_warning_percent !== 0 && alerts.free_warning_percent <= alerts.free_critical_percent) {
    return `alerts.free_warning_percent (${alerts.free_warning_percent}) must be more than alerts.free_critical_percent (${alerts.free_critical_percent}), or the warning could never be raised (0 turns the warning off)`
  }
  for (const name of Object.keys(config.users)) {
    const bad = badName(name)
    if (bad) return `users has a user name that ${bad} (${shown(JSON.stringify(name), 60)}); name each user as given to --user (default: the OS user)`
  }
  for (const [name, server] of Object.entries(config.mcp.servers)) {
    const bad = badName(name)
    if (bad) return `mcp.servers has a server name that ${bad} (${shown(JSON.stringify(name), 60)}); name each server: its tools are called <name>__<tool>`
    for (const variable of Object.keys(server.env)) {
      if (variable === '' || /[=\u0000]/.test(variable)) {
        return `mcp.servers.${shownKey(name)}.env has a variable name that is empty or holds '=' (${shown(JSON.stringify(variable), 60)}); give each variable a name like API_TOKEN`
      }
    }
  }
  return null
}

/** Why a user or server name can never be used, or null: `--user` is trimmed, printable and at most 200 characters. */
function badName(name: string): string | null {
  if (name.trim() === '') return 'is empty'
  if (/[\u0000-\u001f\u007f]/.test(name)) return 'holds control characters'
  if (name !== name.trim()) return 'starts or ends with spaces'
  if (name.length > 200) return 'is longer than 200 characters'
  return null
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

/** A key path as `a.b[0].c`, each key printable (control characters escaped) and cut to a sane length. */
function formatPath(path: readonly PropertyKey[]): string {
  return path.map((key, i) => (typeof key === 'number' ? `[${key}]` : `${i === 0 ? '' : '.'}${shownKey(String(key))}`)).join('')
}

/** A key as written, or JSON-quoted when it is empty, has outer spaces, or holds a quote or whitespace other than a space. */
function shownKey(key: string): string {
  const plain = key !== '' && key === key.trim() && !/[^\S ]|"/.test(key)
  return shown(plain ? key : JSON.stringify(key), 60)
}

/** Text for a one-line message: control characters escaped, cut to `max` characters. */
function shown(value: string, max: number): string {
  const printable = value.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
  return clip(printable, max)
}

function shownPath(file: string): string {
  return shortPath(shown(file, 4096))
}

/** Where the secrets live in a Config: shown by `ctxagent config` as set or not, never by value. */
export const SECRET_KEYS: readonly (readonly string[])[] = [
  ['llm', 'openai', 'api_key'],
  ['llm', 'ollama', 'api_key'],
  ['github', 'token'],
  ['gitlab', 'token'],
]

/** A copy of the config with every secret replaced by null, and the dotted keys of those that are set. */
export function withoutSecrets(config: Config): { config: Config; secretsSet: string[] } {
  const copy = structuredClone(config)
  const secretsSet: string[] = []
  for (const path of SECRET_KEYS) {
    const parent = path.slice(0, -1).reduce<Record<string, unknown>>((node, key) => node[key] as Record<string, unknown>, copy as unknown as Record<string, unknown>)
    const key = path.at(-1) as string
    if (parent[key] !== null) secretsSet.push(path.join('.'))
    parent[key] = null
  }
  // MCP servers' environments usually carry tokens: names are shown, values never.
  for (const [name, server] of Object.entries(copy.mcp.servers)) {
    for (const key of Object.keys(server.env)) {
      secretsSet.push(`mcp.servers.${name}.env.${key}`)
      ;(server.env as Record<string, string | null>)[key] = null
    }
  }
  return { config: copy, secretsSet }
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

/** The model and context length of the configured provider (replay and none have no server). */
export function activeEndpoint(config: Config): { model: string; context_length: number } {
  const llm = config.llm
  if (llm.provider === 'replay') return { model: 'replay', context_length: llm.replay.context_length }
  return llm.provider === 'ollama' ? llm.ollama : llm.openai
}

/** True when the OpenAI provider points at api.openai.com with no key: every request would be refused. */
export function lacksOpenAiKey(config: Config): boolean {
  const openai = config.llm.openai
  return config.llm.provider === 'openai' && openai.api_key === null && /^https:\/\/api\.openai\.com\b/.test(openai.base_url)
}

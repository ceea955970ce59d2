import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs'
import { parse as parseYaml, YAMLParseError } from 'yaml'
// zod/mini: the same validation as zod's classic API through functions instead of
// methods, so that the bundle keeps only what is used (a command parses less code).
import * as z from 'zod/mini'
import { isDuration } from './duration.js'
import { isErrno, UsageError } from './errors.js'

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
const flag = () => z.boolean({ error: 'must be true or false' })
const oneOf = <const T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: `must be ${values.slice(0, -1).join(', ')} or ${values.at(-1)}` })

const withDefault = z._default
const orNull = <T extends z.core.SomeType>(schema: T) => z._default(z.nullable(schema), null)
// Every key has a default, so an absent section parses as {} (typed loosely: zod cannot see that generically).
const section = <T extends z.core.$ZodLooseShape>(shape: T) => z.prefault(z.strictObject(shape), {} as never)

/** A duration as in the CLI (`90s`, `30m`, `1h30m`, or a number of seconds), kept as text and parsed where used. */
const duration = () =>
  z.string({ error: DURATION }).check(z.refine((value: string) => isDuration(value), { error: DURATION }))

export const PROVIDERS = ['openai', 'ollama', 'replay', 'none'] as const
export type Provider = (typeof PROVIDERS)[number]

/** `users.<name>` (SPEC §12.7): what one user's tasks change of the defaults. */
const userSettings = z.strictObject({
  llm: z.optional(
    z.strictObject({
      provider: z.optional(oneOf(PROVIDERS)),
      model: z.optional(text()),
      context_length: z.optional(positiveInt()),
    }),
  ),
  run: z.optional(z.strictObject({ max_turns: z.optional(positiveInt()), max_tokens: z.optional(positiveInt()) })),
  system_prompt_append: z.optional(text()),
})

const endpoint = (baseUrl: string, model: string, contextLength: number) =>
  section({
    base_url: withDefault(text(), baseUrl),
    api_key: orNull(text()),
    model: withDefault(text(), model),
    context_length: withDefault(positiveInt(), contextLength),
    timeout_seconds: withDefault(positiveNumber(), 120),
    max_retries: withDefault(nonNegativeInt(), 3),
  })

export const configSchema = z.strictObject({
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
  users: withDefault(z.record(z.string(), userSettings), {}),
  mcp: section({
    servers: withDefault(
      z.record(
        z.string(),
        z.strictObject({
          command: text(),
          args: withDefault(z.array(text()), []),
          env: withDefault(z.record(z.string(), text()), {}),
          cwd: orNull(text()),
          enabled: withDefault(flag(), true),
          timeout_seconds: withDefault(positiveNumber(), 60),
        }),
      ),
      {},
    ),
  }),
  github: section({ api_url: withDefault(text(), 'https://api.github.com'), token: orNull(text()), bot_name: orNull(text()) }),
  gitlab: section({ url: withDefault(text(), 'https://gitlab.com'), token: orNull(text()), bot_name: orNull(text()) }),
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
})

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
  const explicit = where.flag ?? (nonEmpty(where.env.CTXAGENT_CONFIG) ?? undefined)
  const file = explicit ?? 'config.yaml'
  let raw: string | null = null
  try {
    raw = readConfigFile(resolveFrom(where.cwd, file), file)
  } catch (err) {
    if (err instanceof UsageError) throw err
    if (!isErrno(err, 'ENOENT') || explicit !== undefined) {
      const why = isErrno(err, 'ENOENT') ? 'no such file' : (err as Error).message
      throw new UsageError(`${file}: cannot read config (${why})`, 'check the --config path or CTXAGENT_CONFIG')
    }
  }
  const config = parseConfig(raw ?? '', file)
  applyEnvironment(config, where.env)
  return { config, source: raw === null ? null : file }
}

const MAX_CONFIG_BYTES = 1 << 20

/** A config file: a regular file of at most 1 MB (`--config /dev/zero` must not read forever). */
function readConfigFile(path: string, shown: string): string {
  const fd = openSync(path, 'r')
  try {
    const stat = fstatSync(fd)
    if (!stat.isFile()) throw new UsageError(`${shown}: cannot read config (not a regular file)`, 'check the --config path or CTXAGENT_CONFIG')
    if (stat.size > MAX_CONFIG_BYTES) throw new UsageError(`${shown}: cannot read config (${stat.size.toLocaleString('en-US')} bytes; the limit is 1 MB)`, 'check the --config path or CTXAGENT_CONFIG')
    return readFileSync(fd, 'utf8')
  } finally {
    closeSync(fd)
  }
}

/** Parses YAML text into a validated config; `file` only names the source in errors. */
export function parseConfig(yamlText: string, file = 'config.yaml'): Config {
  let data: unknown
  try {
    data = parseYaml(yamlText) ?? {}
  } catch (err) {
    const where = err instanceof YAMLParseError && err.linePos ? ` line ${err.linePos[0].line}` : ''
    throw new UsageError(`${file}:${where} is not valid YAML (${firstLine((err as Error).message)})`, 'fix the file')
  }
  const result = configSchema.safeParse(data)
  if (!result.success) {
    const issue = result.error.issues[0] as z.core.$ZodIssue
    throw new UsageError(`${file}: ${describeIssue(issue)}`, 'see config.example.yaml for every key and its default')
  }
  const problem = crossCheck(result.data)
  if (problem) throw new UsageError(`${file}: ${problem}`, 'see config.example.yaml for every key and its default')
  return result.data
}

/** Rules that span keys, or that a type alone cannot say. */
function crossCheck(config: Config): string | null {
  const locks = config.locks
  if (locks.heartbeat_seconds >= locks.stale_after_seconds) {
    return `locks.heartbeat_seconds (${locks.heartbeat_seconds}) must be less than locks.stale_after_seconds (${locks.stale_after_seconds}), or every live agent would look dead`
  }
  if (config.context.base_dir.trim() === '') return 'context.base_dir must not be empty (leave it out for ./logs/contexts)'
  for (const provider of ['openai', 'ollama'] as const) {
    const url = config.llm[provider].base_url
    if (!/^https?:\/\/[^\s/]+/.test(url)) return `llm.${provider}.base_url must be an http(s) URL, like http://localhost:11434/v1 (got '${url.slice(0, 80)}')`
  }
  return null
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const path = issue.path.join('.')
  if (issue.code === 'unrecognized_keys') {
    const key = [...issue.path, issue.keys[0]].join('.')
    return `${key} is not a known setting`
  }
  if (issue.code === 'invalid_type' && issue.expected === 'object') return `${path || 'the file'} must be a mapping of keys`
  return `${path} ${issue.message}`
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

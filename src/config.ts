import { readFileSync } from 'node:fs'
import { parse as parseYaml, YAMLParseError } from 'yaml'
import { z } from 'zod'
import { isErrno, UsageError } from './errors.js'

const POSITIVE_INT = 'must be a positive integer'
const NON_NEGATIVE_INT = 'must be a whole number of 0 or more'
const RATIO = 'must be a number greater than 0 and at most 1'

const positiveInt = () => z.number({ error: POSITIVE_INT }).int({ error: POSITIVE_INT }).positive({ error: POSITIVE_INT })
const nonNegativeInt = () =>
  z.number({ error: NON_NEGATIVE_INT }).int({ error: NON_NEGATIVE_INT }).min(0, { error: NON_NEGATIVE_INT })
const positiveNumber = () =>
  z.number({ error: 'must be a positive number' }).positive({ error: 'must be a positive number' })
const text = () => z.string({ error: 'must be a string' })
const optionalText = () => text().nullable().default(null)
const flag = () => z.boolean({ error: 'must be true or false' })
// Every key has a default, so an absent section parses as {} (typed loosely: zod cannot see that generically).
const section = <T extends z.ZodRawShape>(shape: T) => z.strictObject(shape).prefault({} as never)

const endpoint = (baseUrl: string, model: string, contextLength: number) =>
  section({
    base_url: text().default(baseUrl),
    api_key: optionalText(),
    model: text().default(model),
    context_length: positiveInt().default(contextLength),
    timeout_seconds: positiveNumber().default(120),
    max_retries: nonNegativeInt().default(3),
  })

export const configSchema = z.strictObject({
  context: section({
    base_dir: text().default('./logs/contexts'),
    durability: z.enum(['flush', 'fsync'], { error: 'must be flush or fsync' }).default('flush'),
    max_memory_messages: positiveInt().default(20),
    compression: section({
      threshold: z.number({ error: RATIO }).gt(0, { error: RATIO }).max(1, { error: RATIO }).default(0.7),
      token_threshold: positiveInt().nullable().default(null),
      keep_recent: positiveInt().default(10),
      min_to_compress: positiveInt().default(5),
    }),
    prune: section({ protected_turns: nonNegativeInt().default(3) }),
    inheritance: section({ enabled: flag().default(true), max_summary_tokens: positiveInt().default(4000) }),
    retention: section({ compress_after_days: positiveNumber().default(7), delete_after_days: positiveNumber().default(30) }),
  }),
  locks: section({
    heartbeat_seconds: positiveNumber().default(30),
    stale_after_seconds: positiveNumber().default(60),
    stale_after_remote_seconds: positiveNumber().nullable().default(null),
  }),
  llm: section({
    provider: z.enum(['openai', 'ollama', 'none'], { error: 'must be openai, ollama or none' }).default('openai'),
    openai: endpoint('https://api.openai.com/v1', 'gpt-4o', 128_000),
    ollama: endpoint('http://localhost:11434/v1', 'llama3.1', 8_192),
  }),
  github: section({ token: optionalText(), bot_name: optionalText() }),
  gitlab: section({ url: text().default('https://gitlab.com'), token: optionalText(), bot_name: optionalText() }),
  chat: section({
    wait_interval_seconds: positiveNumber().default(5),
    soft_timeout_minutes: positiveNumber().default(10),
    hard_timeout_minutes: positiveNumber().default(15),
  }),
  alerts: section({
    disk_warning_gb: positiveNumber().default(10),
    disk_critical_gb: positiveNumber().default(50),
    failure_rate: z.number({ error: RATIO }).gt(0, { error: RATIO }).max(1, { error: RATIO }).default(0.1),
    max_running_tasks: positiveInt().default(100),
    long_running_hours: positiveNumber().default(6),
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
    raw = readFileSync(resolveFrom(where.cwd, file), 'utf8')
  } catch (err) {
    if (!isErrno(err, 'ENOENT') || explicit !== undefined) {
      const why = isErrno(err, 'ENOENT') ? 'no such file' : (err as Error).message
      throw new UsageError(`${file}: cannot read config (${why})`, 'check the --config path or CTXAGENT_CONFIG')
    }
  }
  const config = parseConfig(raw ?? '', file)
  applyEnvironment(config, where.env)
  return { config, source: raw === null ? null : file }
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
  if (result.success) return result.data
  const issue = result.error.issues[0] as z.core.$ZodIssue
  throw new UsageError(`${file}: ${describeIssue(issue)}`, 'see config.example.yaml for every key and its default')
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

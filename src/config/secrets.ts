import type { Config } from './schema.js'

/** A secret value in force, and the setting (or variable) that holds it: the name is what masking shows instead. */
export interface SecretValue {
  name: string
  value: string
}

/** Credentials a process of ctxagent may hold in its environment, whether or not the config reads them. */
const KNOWN_VARIABLES = [
  'OPENAI_API_KEY',
  'GITHUB_TOKEN',
  'GH_TOKEN',
  'GITLAB_TOKEN',
  'ANTHROPIC_API_KEY',
  'OLLAMA_API_KEY',
  'AWS_SECRET_ACCESS_KEY',
  'AWS_SESSION_TOKEN',
  'NPM_TOKEN',
  'CTXAGENT_SERVE_TOKEN',
]

/** Any other variable whose name says it holds a secret (API_KEY, …_TOKEN, …_SECRET, …PASSWORD). */
const SECRET_NAME = /(?:^|_)(?:API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|ACCESS_KEY|PRIVATE_KEY)(?:$|_)/i

/**
 * Secret values shorter than this are too likely to be ordinary words ("ollama", "test") to be cut out of every
 * text (storage/format/mask.ts), or to be taken for the secret where they turn up inside a default (config-cache.ts).
 */
export const MIN_SECRET_LENGTH = 8

/**
 * Every secret value in force: the config's keys and tokens, MCP servers' env values,
 * and the environment's credentials (the known names, and any variable named like a
 * secret). Masking replaces each wherever it would leave the process.
 */
export function secretValues(config: Config, env: NodeJS.ProcessEnv): SecretValue[] {
  const out: SecretValue[] = []
  const add = (name: string, value: string | null | undefined) => {
    if (typeof value === 'string' && value.trim() !== '') out.push({ name, value })
  }
  add('llm.openai.api_key', config.llm.openai.api_key)
  add('llm.ollama.api_key', config.llm.ollama.api_key)
  add('llm.anthropic.api_key', config.llm.anthropic.api_key)
  add('github.token', config.github.token)
  add('gitlab.token', config.gitlab.token)
  // The fleet's database (and the direct connection a worker listens on): the whole URL, and its password alone (as
  // written in the URL and decoded), each under one name.
  for (const [name, url] of [
    [DATABASE_URL, config.fleet.database_url],
    [DATABASE_URL, env.CTXAGENT_DATABASE_URL],
    ['fleet.listen_url', config.fleet.listen_url],
  ] as const) {
    add(name, url)
    for (const password of urlPasswords(url)) {
      add(name, password)
      add(name, safeDecode(password))
    }
  }
  add('serve.token', config.serve.token)
  // A header's value, and its credentials alone when it is `<scheme> <credentials>` (Bearer, Basic…).
  for (const [key, value] of Object.entries(config.telemetry.headers)) {
    add(`telemetry.headers.${key}`, value)
    add(`telemetry.headers.${key}`, /^[A-Za-z][A-Za-z0-9-]* +(\S+)$/.exec(value)?.[1])
  }
  for (const [server, settings] of Object.entries(config.mcp.servers)) {
    for (const [key, value] of Object.entries(settings.env)) add(`mcp.servers.${server}.env.${key}`, value)
  }
  // Names first, values only of the matching ones: each read of process.env is a call into C++.
  for (const key of Object.keys(env)) {
    if (KNOWN_VARIABLES.includes(key) || SECRET_NAME.test(key)) add(key, env[key])
  }
  return out
}

/** What a masked database URL or password shows, whichever of the file or CTXAGENT_DATABASE_URL gave it. */
const DATABASE_URL = 'fleet.database_url'

/** The passwords of `scheme://user:password@host/db?password=…`, as written (URL-encoded). */
function urlPasswords(value: string | null | undefined): string[] {
  if (typeof value !== 'string' || value === '') return []
  try {
    const url = new URL(value)
    return [url.password, ...url.searchParams.getAll('password').map(encodeURIComponent)].filter((p) => p !== '')
  } catch {
    // libpq's key=value form is no URL; ctxagent refuses it at use (isPostgresUrl).
    return []
  }
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text)
  } catch {
    return text
  }
}

/** The config's URL keys, by their dotted names. */
function urlKeys(config: Config): [string, string][] {
  return [
    ['llm.openai.base_url', config.llm.openai.base_url],
    ['llm.ollama.base_url', config.llm.ollama.base_url],
    ['llm.anthropic.base_url', config.llm.anthropic.base_url],
    ['github.api_url', config.github.api_url],
    ['gitlab.url', config.gitlab.url],
    ...(config.telemetry.otlp_endpoint === null ? [] : [['telemetry.otlp_endpoint', config.telemetry.otlp_endpoint] as [string, string]]),
  ]
}

/**
 * The first URL key that carries a user name or password (`https://user:pass@host`),
 * or null. Such a URL would be printed by `config`, recorded in state.json and logs,
 * and posted in comments; ctxagent refuses it instead of guessing where it may go.
 */
export function urlWithCredentials(config: Config, env: NodeJS.ProcessEnv = {}): string | null {
  // The OpenTelemetry variables stand for telemetry.otlp_endpoint (read where traces start): refused alike.
  const variables = (['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] as const).flatMap((name): [string, string][] =>
    env[name] ? [[name, env[name]]] : [],
  )
  for (const [key, value] of [...urlKeys(config), ...variables]) {
    try {
      const url = new URL(value)
      if (url.username !== '' || url.password !== '') return key
    } catch {
      // Not a URL: the schema says so in its own words.
    }
  }
  return null
}

/** Where the secrets live in a Config: shown by `ctxagent config` as set or not, never by value. */
export const SECRET_KEYS: readonly (readonly string[])[] = [
  ['fleet', 'listen_url'],
  ['llm', 'openai', 'api_key'],
  ['llm', 'ollama', 'api_key'],
  ['llm', 'anthropic', 'api_key'],
  ['github', 'token'],
  ['gitlab', 'token'],
  ['fleet', 'database_url'],
  ['serve', 'token'],
]

/** A copy of the config with every secret replaced by null, and the dotted keys of those that are set. */
export function withoutSecrets(config: Config): { config: Config; secretsSet: string[] } {
  const copy = structuredClone(config)
  const secretsSet: string[] = []
  for (const path of SECRET_KEYS) {
    const parent = path
      .slice(0, -1)
      .reduce<Record<string, unknown>>((node, key) => node[key] as Record<string, unknown>, copy as unknown as Record<string, unknown>)
    const key = path.at(-1) as string
    if (parent[key] !== null) secretsSet.push(path.join('.'))
    parent[key] = null
  }
  // OTLP auth headers likewise: names shown, values never.
  for (const key of Object.keys(copy.telemetry.headers)) {
    secretsSet.push(`telemetry.headers.${key}`)
    ;(copy.telemetry.headers as Record<string, string | null>)[key] = null
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

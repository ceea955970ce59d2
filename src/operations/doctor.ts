import { accessSync, constants, existsSync, mkdtempSync, rmSync, statfsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import type { Config } from '../config/schema.js'
import { missingApiKey } from '../config/endpoint.js'
import { formatBytes } from '../duration.js'
import type { Layout } from '../storage/fs/layout.js'
import { describeSandbox } from '../tools/sandbox.js'
import { giveWorkspace, sandboxIdentity } from '../tools/sandbox/identity.js'
import type { McpSandbox } from '../tools/sandbox/mcp-launch.js'

/** One line of `ctxagent doctor`: ok, a warning, or a failure with what to do. */
export interface Check {
  name: string
  status: 'ok' | 'warn' | 'fail' | 'skip'
  message: string
  /** What to do, when not ok. */
  hint?: string
}

export interface DoctorInput {
  config: Config
  configSource: string | null
  layout: Layout
  /** How long each network check may take. */
  timeoutMs: number
  /** The fleet's database (docs/contract.md §14.5), or null/absent outside a fleet: no fleet line then. */
  databaseUrl?: string | null
  /** The sandbox a run would start MCP servers in, around a workspace: doctor starts them as a run does (docs/contract.md §8). */
  mcpSandbox?: (workspace: string) => McpSandbox
  /** The workspace to start them in (a run's --workspace); absent: an empty one of the sandbox's user, removed after. */
  workspace?: string
  /** Whether serve has a token (serve.token or CTXAGENT_SERVE_TOKEN), and serves on loopback (serve.host); absent: no serve line. */
  serve?: { token: boolean; loopback: boolean; problem?: string }
}

/**
 * Every check, in the order an operator fixes things: the config file, the tree, the
 * LLM (reachable and answering a tool call), each MCP server, the GitHub and GitLab
 * tokens. Each is independent: one failing never stops the others.
 */
export async function runDoctor(input: DoctorInput): Promise<Check[]> {
  const checks: Check[] = [configCheck(input), treeCheck(input)]
  checks.push(await guarded('llm', () => llmCheck(input)))
  checks.push(...(await mcpChecks(input)))
  checks.push(await guarded('github', () => githubCheck(input)))
  checks.push(await guarded('gitlab', () => gitlabCheck(input)))
  checks.push(sandboxCheck(input))
  if (input.serve) checks.push(serveCheck(input.config.serve.host, input.serve))
  const network = networkCheck(input)
  if (network !== null) checks.push(network)
  checks.push(budgetCheck(input))
  if (input.databaseUrl) checks.push(await guarded('fleet', () => fleetCheck(input, input.databaseUrl as string)))
  return checks
}

/**
 * The fleet line (docs/contract.md §14.5): the database reachable, its schema version, the live
 * workers, and fleet.workspaces_dir present and writable (--repo jobs are cloned there).
 */
async function fleetCheck({ config, timeoutMs }: DoctorInput, url: string): Promise<Check> {
  const { connectPool, pgReason } = await import('../storage/index/pg-pool.js')
  const { SCHEMA_VERSION } = await import('../storage/index/pg-schema.js')
  const hint = 'ctxagent fleet init creates the schema and checks the role (docs/fleet-operations.md)'
  const pool = await connectPool(url, 'doctor', 1, Math.min(timeoutMs, 10_000))
  try {
    let version: number | null
    try {
      version = Number((await pool.query<{ version: number }>('SELECT max(version) AS version FROM ctxagent_schema')).rows[0]?.version ?? 0)
    } catch (err) {
      const code = (err as { code?: string }).code
      if (code === '42P01') return { name: 'fleet', status: 'fail', message: 'the database is reachable, but has no ctxagent schema', hint }
      return {
        name: 'fleet',
        status: 'fail',
        message: `the fleet's database cannot be reached (${pgReason(err)})`,
        hint: 'check fleet.database_url or CTXAGENT_DATABASE_URL and that the server is up',
      }
    }
    const stale = config.locks.stale_after_remote_seconds ?? 2 * config.locks.stale_after_seconds
    const live = Number(
      (
        await pool.query<{ n: string }>(
          'SELECT count(*) AS n FROM fleet_workers WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => $1)',
          [stale],
        )
      ).rows[0]?.n ?? 0,
    )
    const parts = [
      `database reachable, schema version ${version}${version < SCHEMA_VERSION ? ` of ${SCHEMA_VERSION} (the next worker or fleet init migrates it)` : ''}`,
      `${live} live worker(s)`,
    ]
    const dir = config.fleet.workspaces_dir
    const dirProblem = dir === null ? null : writableDirProblem(dir)
    parts.push(
      dir === null
        ? 'no fleet.workspaces_dir (--repo jobs are refused)'
        : dirProblem === null
          ? `workspaces_dir ${dir} writable`
          : `workspaces_dir ${dir} ${dirProblem}`,
    )
    const message = parts.join(', ')
    if (dirProblem !== null)
      return { name: 'fleet', status: 'fail', message, hint: "create fleet.workspaces_dir on the shared mount, writable by the workers' user" }
    if (live === 0) return { name: 'fleet', status: 'warn', message, hint: 'start ctxagent worker on a host (docs/fleet-operations.md)' }
    return { name: 'fleet', status: version < SCHEMA_VERSION ? 'warn' : 'ok', message, ...(version < SCHEMA_VERSION ? { hint } : {}) }
  } finally {
    await pool.end().catch(() => undefined)
  }
}

function writableDirProblem(dir: string): string | null {
  if (!existsSync(dir)) return 'does not exist'
  try {
    accessSync(dir, constants.W_OK | constants.X_OK)
    return null
  } catch {
    return 'is not writable'
  }
}

/**
 * Who can read through `serve` (docs/serve.md#security): with a token, every read needs it;
 * without one, reads are open on loopback to anything on this host (a sandboxed command with
 * the host's network included), and any other host is refused.
 */
function serveCheck(host: string, serve: NonNullable<DoctorInput['serve']>): Check {
  if (serve.problem !== undefined) return { name: 'serve', status: 'fail', message: serve.problem, hint: 'use a long random token: openssl rand -hex 32' }
  if (serve.token) return { name: 'serve', status: 'ok', message: `serve.token set: the page, /api and /metrics need it on ${host} as on every address` }
  if (!serve.loopback)
    return {
      name: 'serve',
      status: 'warn',
      message: `serve.host ${host} is not loopback and serve has no token: serve refuses to start`,
      hint: 'set serve.token (or CTXAGENT_SERVE_TOKEN), or serve.host: 127.0.0.1',
    }
  return {
    name: 'serve',
    status: 'warn',
    message: `no serve.token: on ${host} serve's reads (task pages, /api, /metrics) are open to every process of this host, sandboxed commands with the network included; actions are refused`,
    hint: 'set serve.token (or CTXAGENT_SERVE_TOKEN) for every read to need it',
  }
}

/** Which sandbox run_command gets, and whether it works here (a shell is refused without one). */
function sandboxCheck({ config }: DoctorInput): Check {
  const sandbox = describeSandbox(config.tools)
  if (sandbox.mode === 'none')
    return {
      name: 'sandbox',
      status: 'warn',
      message: sandbox.detail,
      hint: 'commands can read whatever this user can; set tools.sandbox: bwrap where bubblewrap works',
    }
  if (!sandbox.ok)
    return {
      name: 'sandbox',
      status: config.tools.shell ? 'fail' : 'warn',
      message: sandbox.detail,
      hint: 'apt-get install bubblewrap (run --allow-shell is refused until it works)',
    }
  return { name: 'sandbox', status: 'ok', message: sandbox.detail }
}

/**
 * A warning when a sandboxed command or MCP server shares the host's network (network:
 * host): it reaches serve, PostgreSQL, /metrics and whatever else listens here. (The
 * proxy never connects to this host, whatever tools.allowed_networks says.)
 */
function networkCheck({ config }: DoctorInput): Check | null {
  const host: string[] = []
  if (config.tools.sandbox === 'bwrap' && config.tools.network === 'host') host.push('tools.network')
  for (const [name, server] of Object.entries(config.mcp.servers))
    if (server.enabled && server.sandbox === 'bwrap' && server.network === 'host') host.push(`mcp.servers.${name}.network`)
  if (host.length === 0) return null
  const message = `${host.join(', ')}: host — commands share this host's network and reach its local services (serve, PostgreSQL, the metrics endpoint, anything listening on 127.0.0.1)`
  return {
    name: 'network',
    status: 'warn',
    message,
    hint: 'use network: proxy (with tools.allowed_hosts) for package registries; see docs/security.md#the-network',
  }
}

/** The cost caps that apply (docs/running.md#budgets), and whether every model in use has a price (one without is not capped by money). */
export function budgetCheck({ config }: DoctorInput): Check {
  const b = config.budgets
  const caps = [
    ['run.max_cost_usd', config.run.max_cost_usd],
    ['budgets.user_daily_usd', b.user_daily_usd],
    ['budgets.user_monthly_usd', b.user_monthly_usd],
    ['budgets.fleet_daily_usd', b.fleet_daily_usd],
  ]
    .filter((c): c is [string, number] => c[1] !== null)
    .map(([key, usd]) => `${key} $${usd.toFixed(2)}`)
  for (const [user, own] of Object.entries(config.users)) {
    const mine = Object.entries({ ...own.run, ...own.budgets }).filter(([key]) => ['max_cost_usd', 'user_daily_usd', 'user_monthly_usd'].includes(key))
    if (mine.length > 0) caps.push(`users.${user}: ${mine.map(([key, usd]) => `${key} ${typeof usd === 'number' ? `$${usd.toFixed(2)}` : 'none'}`).join(', ')}`)
  }
  const provider = config.llm.provider
  const models = new Set<string>()
  if (provider !== 'none' && provider !== 'replay')
    models.add(provider === 'anthropic' ? config.llm.anthropic.model : provider === 'ollama' ? config.llm.ollama.model : config.llm.openai.model)
  for (const own of Object.values(config.users)) if (own.llm?.model !== undefined) models.add(own.llm.model)
  const unpriced = [...models].filter((m) => m.trim() !== '' && !Object.hasOwn(config.pricing, m))
  const prices =
    unpriced.length === 0
      ? models.size > 0
        ? `every model in use has a price (${[...models].join(', ')})`
        : 'no model in use'
      : `no price for ${unpriced.join(', ')}: ${caps.length > 0 ? 'not capped by money' : 'no cost shown'}`
  if (caps.length === 0) return { name: 'budgets', status: 'skip', message: `no cost caps set (run.max_cost_usd, budgets.*); ${prices}` }
  const message = `${caps.join('; ')} (days in ${b.timezone}); ${prices}`
  return unpriced.length > 0
    ? { name: 'budgets', status: 'warn', message, hint: `add pricing.<model> (USD per million tokens) for ${unpriced.join(', ')}` }
    : { name: 'budgets', status: 'ok', message }
}

async function guarded(name: string, check: () => Promise<Check>): Promise<Check> {
  try {
    return await check()
  } catch (err) {
    return { name, status: 'fail', message: (err as Error).message.split('\n')[0] ?? 'failed' }
  }
}

function configCheck({ configSource }: DoctorInput): Check {
  if (configSource === null)
    return {
      name: 'config',
      status: 'ok',
      message:
        'no config file (defaults and the environment); looked for ~/.config/ctxagent/config.yaml (or under XDG_CONFIG_HOME), /etc/ctxagent/config.yaml; nothing in the current directory is read',
    }
  return { name: 'config', status: 'ok', message: `${configSource} (valid)` }
}

function treeCheck({ layout, config }: DoctorInput): Check {
  const base = layout.base
  // A tree not created yet: its nearest existing parent must be writable.
  const at = existsSync(base) ? base : nearestExisting(base)
  try {
    accessSync(at, constants.W_OK | constants.X_OK)
  } catch {
    return {
      name: 'tree',
      status: 'fail',
      message: `${base}: ${at === base ? '' : `${at} `}is not writable by this user`,
      hint: 'pass --home (or CTXAGENT_HOME) a directory you can write',
    }
  }
  const where = existsSync(base) ? base : `${base} (created at the first run, in ${at})`
  try {
    const s = statfsSync(at)
    const free = s.bavail * s.bsize
    const percent = s.blocks === 0 ? 100 : (100 * s.bavail) / s.blocks
    const text = `${where}: ${formatBytes(free)} free (${percent.toFixed(1)}%)`
    if (percent < config.alerts.free_critical_percent) return { name: 'tree', status: 'fail', message: text, hint: 'free some space, or run ctxagent cleanup' }
    if (percent < config.alerts.free_warning_percent) return { name: 'tree', status: 'warn', message: text, hint: 'free some space, or run ctxagent cleanup' }
    return { name: 'tree', status: 'ok', message: text }
  } catch {
    return { name: 'tree', status: 'ok', message: where }
  }
}

function nearestExisting(path: string): string {
  let at = path
  while (!existsSync(at) && dirname(at) !== at) at = dirname(at)
  return at
}

const PING_TOOL = {
  type: 'function' as const,
  function: {
    name: 'report_ready',
    description: 'Report that you are ready. Always call this tool.',
    parameters: { type: 'object', properties: { ready: { type: 'boolean' } }, required: ['ready'] },
  },
}

/** The LLM answers, and answers with a tool call: what an agent needs of it, not just a reachable port. */
async function llmCheck({ config, timeoutMs }: DoctorInput): Promise<Check> {
  const provider = config.llm.provider
  if (provider === 'none')
    return {
      name: 'llm',
      status: 'fail',
      message: 'no LLM is configured (llm.provider: none)',
      hint: 'set llm.provider and llm.<provider>.model in the config',
    }
  if (provider === 'replay') return { name: 'llm', status: 'ok', message: `replay of ${config.llm.replay.from ?? '(no recording set)'}: no LLM is asked` }
  const missing = missingApiKey(config)
  if (missing !== null) return { name: 'llm', status: 'fail', ...missing }
  const endpoint = provider === 'ollama' ? config.llm.ollama : provider === 'anthropic' ? config.llm.anthropic : config.llm.openai
  // One attempt, bounded: a doctor that retries for minutes helps no one.
  const once = { max_retries: 0, timeout_seconds: Math.min(endpoint.timeout_seconds, timeoutMs / 1000) }
  const limits = { maxOutputTokens: config.llm.max_output_tokens, maxResponseBytes: config.llm.max_response_bytes, maxRetryWait: config.llm.max_retry_wait }
  const client =
    provider === 'anthropic'
      ? // A tool call needs few tokens: the check asks for no more (Anthropic requires max_tokens).
        new (await import('../llm/anthropic.js')).AnthropicClient(
          { ...config.llm.anthropic, ...once },
          { ...limits, maxOutputTokens: Math.min(limits.maxOutputTokens, 256) },
        )
      : new (await import('../llm/openai-compatible.js')).OpenAiCompatibleClient(
          { ...(provider === 'ollama' ? config.llm.ollama : config.llm.openai), ...once },
          provider,
          limits,
        )
  const where = `${endpoint.base_url} (${provider}, model ${endpoint.model})`
  const reply = await client.chat(
    [
      { role: 'system', content: 'You are checking a tool-calling setup.' },
      { role: 'user', content: 'Call the report_ready tool with ready set to true. Do not answer in text.' },
    ],
    { tools: [PING_TOOL], signal: AbortSignal.timeout(timeoutMs) },
  )
  const called = reply.message.tool_calls?.some((c) => c.function.name === PING_TOOL.function.name) === true
  if (!called)
    return {
      name: 'llm',
      status: 'fail',
      message: `${where} answers, but not with a tool call`,
      hint: 'use a model (and server settings) that support tool calls: an agent cannot work without them',
    }
  return { name: 'llm', status: 'ok', message: `${where} answers with a tool call` }
}

async function mcpChecks({ config, mcpSandbox, workspace: given }: DoctorInput): Promise<Check[]> {
  const enabled = Object.entries(config.mcp.servers).filter(([, s]) => s.enabled)
  if (enabled.length === 0) return [{ name: 'mcp', status: 'skip', message: 'no MCP server configured' }]
  const checks: Check[] = []
  // Given, the workspace is used as it is (a run does not hand its workspace over either); else an empty one of
  // the sandbox's user, as a run's would be: a server that works only outside the sandbox fails here as in a run.
  const workspace = given ?? mkdtempSync(join(tmpdir(), 'ctxagent-doctor-'))
  try {
    if (mcpSandbox && given === undefined) {
      try {
        giveWorkspace(workspace, sandboxIdentity(config.tools, workspace))
      } catch (err) {
        return [{ name: 'mcp', status: 'fail', message: `no sandbox to start MCP servers in: ${(err as Error).message}`, hint: 'check tools.sandbox_user' }]
      }
    }
    for (const [name, server] of enabled) checks.push(await mcpCheck(config, name, server, mcpSandbox?.(workspace) ?? null))
  } finally {
    if (given === undefined) rmSync(workspace, { recursive: true, force: true })
  }
  return checks
}

async function mcpCheck(config: Config, name: string, server: Config['mcp']['servers'][string], sandbox: McpSandbox | null): Promise<Check> {
  const { McpServers } = await import('../tools/mcp.js')
  const warnings: string[] = []
  const started = await McpServers.start(
    { ...config.mcp, servers: { [name]: server } },
    (m) => warnings.push(m),
    AbortSignal.timeout(Math.max(1, server.timeout_seconds) * 1000 + 5000),
    sandbox,
  )
  try {
    if (warnings.length > 0 || Object.keys(started.servers.pids()).length === 0) {
      return { name: `mcp ${name}`, status: 'fail', message: warnings[0] ?? 'did not start', hint: `check mcp.servers.${name}.command and args` }
    }
    const names = started.tools.map((t) => t.name)
    const where = sandbox === null || server.sandbox === 'none' ? '' : ' in the sandbox'
    return {
      name: `mcp ${name}`,
      status: 'ok',
      message: `started${where}, ${names.length} tool(s)${names.length ? `: ${names.slice(0, 5).join(', ')}${names.length > 5 ? ', …' : ''}` : ''}`,
    }
  } finally {
    await started.servers.close()
  }
}

/** Who the GitHub token is, and its scopes (classic tokens list them; fine-grained ones do not). */
async function githubCheck({ config, timeoutMs }: DoctorInput): Promise<Check> {
  const token = config.github.token
  if (!token) return { name: 'github', status: 'skip', message: 'no token (GH_TOKEN, GITHUB_TOKEN or github.token); --github tasks need one' }
  const res = await fetch(`${config.github.api_url.replace(/\/+$/, '')}/user`, {
    headers: { authorization: `token ${token}`, accept: 'application/vnd.github+json', 'user-agent': 'ctxagent-doctor' },
    signal: AbortSignal.timeout(timeoutMs),
  })
  if (res.status === 401)
    return {
      name: 'github',
      status: 'fail',
      message: `${config.github.api_url} refuses the token (401)`,
      hint: 'the token is wrong or expired: make a new one',
    }
  if (!res.ok) return { name: 'github', status: 'fail', message: `${config.github.api_url}/user answered ${res.status}`, hint: 'check github.api_url' }
  const login = ((await res.json()) as { login?: string }).login ?? '?'
  const scopes = res.headers.get('x-oauth-scopes')
  const scopeText = scopes === null ? 'fine-grained (no scope list: it needs Issues and Pull requests read/write)' : `scopes: ${scopes || '(none)'}`
  const bot = config.github.bot_name && config.github.bot_name !== login ? `; github.bot_name is ${config.github.bot_name}, not ${login}` : ''
  return {
    name: 'github',
    status: bot ? 'warn' : 'ok',
    message: `token of ${login}, ${scopeText}${bot}`,
    ...(bot ? { hint: `set github.bot_name: ${login}, or its own comments count as new` } : {}),
  }
}

async function gitlabCheck({ config, timeoutMs }: DoctorInput): Promise<Check> {
  const token = config.gitlab.token
  if (!token) return { name: 'gitlab', status: 'skip', message: 'no token (GITLAB_TOKEN or gitlab.token); --gitlab tasks need one' }
  const api = `${config.gitlab.url.replace(/\/+$/, '')}/api/v4`
  const get = (path: string) => fetch(`${api}${path}`, { headers: { 'private-token': token }, signal: AbortSignal.timeout(timeoutMs) })
  const user = await get('/user')
  if (user.status === 401)
    return { name: 'gitlab', status: 'fail', message: `${config.gitlab.url} refuses the token (401)`, hint: 'the token is wrong or expired: make a new one' }
  if (!user.ok) return { name: 'gitlab', status: 'fail', message: `${api}/user answered ${user.status}`, hint: 'check gitlab.url' }
  const username = ((await user.json()) as { username?: string }).username ?? '?'
  const self = await get('/personal_access_tokens/self')
  const scopes = self.ok ? (((await self.json()) as { scopes?: string[] }).scopes ?? []) : null
  const needsApi = scopes !== null && !scopes.includes('api')
  return {
    name: 'gitlab',
    status: needsApi ? 'warn' : 'ok',
    message: `token of ${username}, scopes: ${scopes === null ? 'unknown' : scopes.join(', ') || '(none)'}`,
    ...(needsApi ? { hint: 'posting notes needs the api scope' } : {}),
  }
}

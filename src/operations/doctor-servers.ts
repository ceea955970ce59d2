import { accessSync, constants, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { missingApiKey } from '../config/endpoint.js'
import type { Config } from '../config/schema.js'
import { giveWorkspace, sandboxIdentity } from '../tools/sandbox/identity.js'
import type { McpSandbox } from '../tools/sandbox/mcp-launch.js'
import type { Check, DoctorInput } from './doctor-check.js'
import { liveWorkerSql, workerLiveSeconds } from '../storage/index/worker-liveness.js'

// doctor's checks that reach a server: the fleet's database, the LLM, each MCP server, GitHub and GitLab.

/**
 * The fleet line (docs/contract.md §14.5): the database reachable, its schema version, the live
 * workers, and fleet.workspaces_dir present and writable (--repo jobs are cloned there).
 */
export async function fleetCheck({ config, timeoutMs }: DoctorInput, url: string): Promise<Check> {
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
    const stale = workerLiveSeconds(config.locks)
    const live = Number(
      (await pool.query<{ n: string }>(`SELECT count(*) AS n FROM fleet_workers w WHERE ${liveWorkerSql('w', '$1')}`, [stale])).rows[0]?.n ?? 0,
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

const PING_TOOL = {
  type: 'function' as const,
  function: {
    name: 'report_ready',
    description: 'Report that you are ready. Always call this tool.',
    parameters: { type: 'object', properties: { ready: { type: 'boolean' } }, required: ['ready'] },
  },
}

/** The LLM answers, and answers with a tool call: what an agent needs of it, not just a reachable port. */
export async function llmCheck({ config, timeoutMs }: DoctorInput): Promise<Check> {
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

export async function mcpChecks({ config, mcpSandbox, workspace: given }: DoctorInput): Promise<Check[]> {
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
export async function githubCheck({ config, timeoutMs }: DoctorInput): Promise<Check> {
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

export async function gitlabCheck({ config, timeoutMs }: DoctorInput): Promise<Check> {
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

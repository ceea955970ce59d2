import { accessSync, constants, existsSync, statfsSync } from 'node:fs'
import { dirname } from 'node:path'
import { formatBytes } from '../duration.js'
import { describeSandbox } from '../tools/sandbox.js'
import type { Check, DoctorInput } from './doctor-check.js'
import { fleetCheck, githubCheck, gitlabCheck, llmCheck, mcpChecks } from './doctor-servers.js'

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

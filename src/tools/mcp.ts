import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { Ajv } from 'ajv'
import type { ValidateFunction } from 'ajv'
import type { Config } from '../config/schema.js'
import { clip, grouped, sampleOf } from '../text.js'
import { maskCredentials, maskValue } from '../storage/format/mask.js'
import { networkMode } from './sandbox/egress-policy.js'
import { startEgressProxy } from './sandbox/egress-proxy.js'
import type { EgressProxy } from './sandbox/egress-proxy.js'
import { sandboxIdentity } from './sandbox/identity.js'
import { maskedHead } from '../storage/format/mask-stream.js'
import { sandboxedServer } from './sandbox/mcp-launch.js'
import type { McpSandbox } from './sandbox/mcp-launch.js'
import type { Tool, ToolOutcome } from './types.js'

export type McpServerConfig = Config['mcp']['servers'][string]

const ajv = new Ajv({ coerceTypes: true, useDefaults: true, strict: false, allErrors: false })
const STDERR_KEEP = 4096
/** Pages of one `tools/list` read at most: a server that always returns another page (or an empty one) stops here. */
const MAX_LIST_PAGES = 100
/** A tool's description as offered to the model, at most (it goes into every request). */
const MAX_DESCRIPTION = 2_000
/** A tool whose input schema is longer than this as JSON is left out: it would fill every request. */
const MAX_SCHEMA_CHARS = 20_000

/** `<server>__<tool>`, with characters outside [A-Za-z0-9_-] as `_`, at most 64 characters (docs/contract.md §13.3). */
export function mcpToolName(server: string, tool: string): string {
  const clean = (s: string) => s.replace(/[^A-Za-z0-9_-]/g, '_')
  return `${clean(server)}__${clean(tool)}`.slice(0, 64)
}

interface Listed {
  name: string
  description?: string | undefined
  inputSchema: Record<string, unknown>
}

/**
 * One MCP server over stdio (`@modelcontextprotocol/sdk`), started once per `run` and
 * kept for every call. A server that dies is started again once; after that its tools
 * answer with errors. Its stderr is kept (the last few KB) to say why it failed.
 */
class McpServer {
  private client: Client | null = null
  private transport: StdioClientTransport | null = null
  private stderr = ''
  private restarts = 0
  private proxy: EgressProxy | null = null
  private closing = false
  private dead = false
  /** How many tools its listing keeps (set by the first start, used by a restart). */
  keep = Number.MAX_SAFE_INTEGER

  constructor(
    readonly name: string,
    private readonly config: McpServerConfig,
    private readonly warn: (message: string) => void,
    private readonly maxChars: number,
    private readonly sandbox: McpSandbox | null,
  ) {}

  /**
   * How the server is started: in the run's sandbox (unless its sandbox: none, or no run
   * gave one), else as configured. With network: proxy, behind an egress proxy of its own
   * (its allowed_hosts, else tools.allowed_hosts), closed with it.
   */
  private async launch(): Promise<{ command: string; args: string[] }> {
    const sandbox = this.sandbox
    if (sandbox === null || this.config.sandbox === 'none') return { command: this.config.command, args: this.config.args }
    if (networkMode(this.config.network) === 'proxy' && this.proxy === null) {
      const settings = { allowedHosts: this.config.allowed_hosts ?? sandbox.tools.allowed_hosts ?? null, allowedNetworks: sandbox.tools.allowed_networks ?? [] }
      const owner = sandboxIdentity({ sandbox_user: sandbox.tools.sandbox_user ?? null }, sandbox.workspace)
      this.proxy = await startEgressProxy({ settings, by: `mcp:${this.name}`, log: (record) => sandbox.network?.(record), owner })
    }
    const planned = sandboxedServer(this.config, sandbox, this.proxy?.socket)
    if (!planned.ok) throw new Error(`its sandbox cannot be set up: ${planned.why}; set mcp.servers.${this.name}.sandbox: none to start it without one`)
    return planned
  }

  /**
   * Starts the server and lists its tools: every page, but no more than `keep` tools
   * (one more tells that some were left out), MAX_LIST_PAGES pages, and timeout_seconds
   * for all of it. `signal` (the task's stop) aborts it at any point.
   */
  async start(keep: number, signal: AbortSignal): Promise<Listed[]> {
    const { command, args } = await this.launch()
    const transport = new StdioClientTransport({
      command,
      args,
      env: { ...getDefaultEnvironment(), ...this.config.env },
      ...(this.config.cwd ? { cwd: this.config.cwd } : {}),
      stderr: 'pipe',
    })
    transport.stderr?.on('data', (d: Buffer) => {
      this.stderr = (this.stderr + d.toString()).slice(-STDERR_KEEP)
    })
    const client = new Client({ name: 'ctxagent', version: '0.1.0' })
    transport.onclose = () => {
      if (!this.closing) this.dead = true
    }
    // The client and transport are ours from here: an abort midway closes them with the server.
    this.client = client
    this.transport = transport
    const within = AbortSignal.any([signal, AbortSignal.timeout(this.config.timeout_seconds * 1000)])
    const options = { signal: within, timeout: this.config.timeout_seconds * 1000 }
    await client.connect(transport, options)
    this.dead = false
    const tools: Listed[] = []
    const seen = new Set<string>()
    let cursor: string | undefined
    for (let pages = 0; ; pages++) {
      if (pages === MAX_LIST_PAGES) {
        this.warn(`MCP server ${this.name} listed its tools over more than ${MAX_LIST_PAGES} pages; the rest are left out`)
        break
      }
      const page = await client.listTools(cursor ? { cursor } : {}, options)
      tools.push(...(page.tools as Listed[]).slice(0, keep + 1 - tools.length))
      cursor = page.nextCursor
      // No cursor, a cursor seen before (a loop), or enough tools to know some are left out: done.
      if (!cursor || seen.has(cursor) || tools.length > keep) break
      seen.add(cursor)
    }
    return tools
  }

  get pid(): number | null {
    return this.transport?.pid ?? null
  }

  /** The last line the server wrote to stderr, to say why it failed. */
  lastStderrLine(): string {
    return this.stderr.trim().split('\n').at(-1)?.trim() ?? ''
  }

  async call(tool: string, args: Record<string, unknown>, signal: AbortSignal): Promise<ToolOutcome> {
    if (this.dead || this.client === null) {
      if (this.restarts >= 1)
        return failure(`the MCP server ${this.name} died and was already restarted once; its tools are unavailable for the rest of this run`)
      this.restarts++
      this.warn(`MCP server ${this.name} died${this.lastStderrLine() ? ` (${this.lastStderrLine()})` : ''}; starting it again`)
      try {
        await this.close()
        this.closing = false
        await this.start(this.keep, signal)
        this.warn(`MCP server ${this.name} started again (pid ${this.pid ?? 'unknown'})`)
      } catch (err) {
        return failure(`the MCP server ${this.name} died and could not be started again: ${(err as Error).message}`)
      }
    }
    try {
      // The arguments leave for a third-party process: ctxagent's secrets never go with them.
      const result = await (this.client as Client).callTool({ name: tool, arguments: maskValue(args, maskCredentials) }, undefined, {
        timeout: this.config.timeout_seconds * 1000,
        signal,
      })
      const whole = contentText(result.content)
      if (whole.length > this.maxChars)
        this.warn(
          `MCP: the result of ${this.name}__${tool} is ${grouped(whole.length)} characters; the model gets the first ${grouped(this.maxChars)} (mcp.max_result_chars)`,
        )
      const text = cutResult(whole, this.maxChars)
      if (result.isError === true)
        return { output: `Error: ${text || 'the tool reported an error'}`, status: 'error', error: firstLine(text) || 'the tool reported an error' }
      return { output: text, status: 'success', error: null }
    } catch (err) {
      if (signal.aborted) return { output: '[aborted]', status: 'error', error: 'aborted', aborted: true }
      return failure(`${this.name}__${tool} failed: ${(err as Error).message}`)
    }
  }

  async close(): Promise<void> {
    this.closing = true
    const client = this.client
    this.client = null
    this.transport = null
    await client?.close().catch(() => undefined)
    const proxy = this.proxy
    this.proxy = null
    await proxy?.close()
  }
}

/** Text of an MCP result: text parts as they are, other parts described. */
function contentText(content: unknown): string {
  if (!Array.isArray(content)) return ''
  return content
    .map((part: { type?: string; text?: string; mimeType?: string; resource?: { uri?: string; text?: string } }) => {
      if (part.type === 'text') return part.text ?? ''
      if (part.type === 'resource') return part.resource?.text ?? `[resource ${part.resource?.uri ?? ''}]`
      return `[${part.type ?? 'content'}${part.mimeType ? ` ${part.mimeType}` : ''} omitted]`
    })
    .join('\n')
}

/** A result longer than `max` characters: its start (masked before it is cut), and a note saying what was left out. */
function cutResult(text: string, max: number): string {
  if (text.length <= max) return text
  return `${maskedHead(text, max)}\n[cut: the MCP result was ${grouped(text.length)} characters; only the first ${grouped(max)} are kept (mcp.max_result_chars)]`
}

function failure(message: string): ToolOutcome {
  return { output: `Error: ${message}`, status: 'error', error: message }
}

function firstLine(text: string): string {
  return (text.split('\n')[0] ?? '').slice(0, 300)
}

/** The configured MCP servers of one run, and their tools. */
export class McpServers {
  private constructor(private readonly servers: McpServer[]) {}

  /**
   * Starts every enabled server (in parallel). One that fails to start is a warning
   * naming it and the last line of its stderr; the task runs without its tools. At
   * most `mcp.max_tools` tools are kept, the first by name; the others are named in
   * one warning. `signal` (the task's stop) ends the start-up at once: every server is
   * closed, and the caller sees the stop. With `sandbox` (a run's), each server runs
   * in run_command's sandbox unless its own sandbox: none.
   */
  static async start(
    config: Config['mcp'],
    warn: (message: string) => void,
    signal: AbortSignal,
    sandbox: McpSandbox | null = null,
  ): Promise<{ servers: McpServers; tools: Tool[] }> {
    const tools: Tool[] = []
    const started: McpServer[] = []
    const entries = Object.entries(config.servers).filter(([, server]) => server.enabled)
    const offered = new Map<string, number>()
    await Promise.all(
      entries.map(async ([name, server]) => {
        const instance = new McpServer(name, server, warn, config.max_result_chars, sandbox)
        instance.keep = config.max_tools
        try {
          const listed = await instance.start(config.max_tools, signal)
          started.push(instance)
          offered.set(name, listed.length)
          for (const tool of listed) tools.push(toTool(instance, tool))
        } catch (err) {
          await instance.close()
          if (signal.aborted) return
          const why = instance.lastStderrLine()
          warn(`MCP server ${name} did not start (${(err as Error).message}${why ? `; its stderr said: ${why}` : ''}); the task runs without its tools`)
        }
      }),
    )
    const servers = new McpServers(started)
    if (signal.aborted) {
      await servers.close()
      return { servers, tools: [] }
    }
    const oversized = tools.filter((t) => schemaChars(t.spec.function.parameters) > MAX_SCHEMA_CHARS).map((t) => t.name)
    if (oversized.length > 0) {
      warn(
        `MCP: left out ${oversized.length} tool(s) whose input schema is over ${grouped(MAX_SCHEMA_CHARS)} characters (it would go into every request): ${sampleOf(oversized, 10)}`,
      )
      tools.splice(0, tools.length, ...tools.filter((t) => !oversized.includes(t.name)))
    }
    tools.sort((a, b) => (a.name < b.name ? -1 : 1))
    const more = [...offered].filter(([, n]) => n > config.max_tools).map(([name]) => name)
    if (tools.length > config.max_tools || more.length > 0) {
      const dropped = tools.slice(config.max_tools).map((t) => t.name)
      warn(
        `MCP: ${tools.length}${more.length > 0 ? '+' : ''} tools offered, ${config.max_tools} kept (mcp.max_tools); left out: ${sampleOf(dropped, 10)}${more.length > 0 ? `${dropped.length > 0 ? ', ' : ''}and whatever else ${more.join(', ')} offers past its first ${config.max_tools + 1}` : ''}`,
      )
    }
    return { servers, tools: tools.slice(0, config.max_tools) }
  }

  /** Process ids of the running servers (for tests and the log). */
  pids(): Record<string, number | null> {
    return Object.fromEntries(this.servers.map((s) => [s.name, s.pid]))
  }

  async close(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.close()))
  }
}

/** Characters of a schema as JSON; one too deep to write at all counts as too long. */
function schemaChars(schema: unknown): number {
  try {
    return JSON.stringify(schema ?? {}).length
  } catch {
    return Number.POSITIVE_INFINITY
  }
}

function toTool(server: McpServer, listed: Listed): Tool {
  const name = mcpToolName(server.name, listed.name)
  const schema = listed.inputSchema && typeof listed.inputSchema === 'object' ? listed.inputSchema : { type: 'object' }
  let check: ValidateFunction | null = null
  try {
    check = ajv.compile(schema)
  } catch {
    // A schema ajv cannot compile: the server validates the arguments itself.
  }
  return {
    name,
    spec: {
      type: 'function',
      function: {
        name,
        description: clip(typeof listed.description === 'string' ? listed.description : `${listed.name} (MCP server ${server.name})`, MAX_DESCRIPTION),
        parameters: schema,
      },
    },
    async validate(args) {
      if (args === null || typeof args !== 'object' || Array.isArray(args))
        return { ok: false, error: `the arguments of ${name} must be a JSON object; expected ${JSON.stringify(schema)}` }
      const copy = structuredClone(args) as Record<string, unknown>
      if (check === null || check(copy)) return { ok: true, args: copy }
      const e = check.errors?.[0]
      return {
        ok: false,
        error: `argument '${e?.instancePath.replace(/^\//, '') || '(all)'}' ${e?.message ?? 'is invalid'}; the arguments of ${name} are ${JSON.stringify(schema)}`,
      }
    },
    run: (args, ctx) => server.call(listed.name, args, ctx.signal),
  }
}

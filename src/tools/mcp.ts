import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { Ajv } from 'ajv'
import type { ValidateFunction } from 'ajv'
import type { Config } from '../config/schema.js'
import { maskCredentials, maskValue } from '../storage/format/mask.js'
import type { Tool, ToolOutcome } from './types.js'

export type McpServerConfig = Config['mcp']['servers'][string]

const ajv = new Ajv({ coerceTypes: true, useDefaults: true, strict: false, allErrors: false })
const STDERR_KEEP = 4096

/** `<server>__<tool>`, with characters outside [A-Za-z0-9_-] as `_`, at most 64 characters (SPEC §13.3). */
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
  private closing = false
  private dead = false

  constructor(
    readonly name: string,
    private readonly config: McpServerConfig,
    private readonly warn: (message: string) => void,
  ) {}

  /** Starts the server and lists its tools (every page). */
  async start(): Promise<Listed[]> {
    const transport = new StdioClientTransport({
      command: this.config.command,
      args: this.config.args,
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
    await client.connect(transport, { timeout: this.config.timeout_seconds * 1000 })
    this.client = client
    this.transport = transport
    this.dead = false
    const tools: Listed[] = []
    let cursor: string | undefined
    do {
      const page = await client.listTools(cursor ? { cursor } : {}, { timeout: this.config.timeout_seconds * 1000 })
      tools.push(...(page.tools as Listed[]))
      cursor = page.nextCursor
    } while (cursor)
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
      if (this.restarts >= 1) return failure(`the MCP server ${this.name} died and was already restarted once; its tools are unavailable for the rest of this run`)
      this.restarts++
      this.warn(`MCP server ${this.name} died${this.lastStderrLine() ? ` (${this.lastStderrLine()})` : ''}; starting it again`)
      try {
        await this.close()
        this.closing = false
        await this.start()
        this.warn(`MCP server ${this.name} started again (pid ${this.pid ?? 'unknown'})`)
      } catch (err) {
        return failure(`the MCP server ${this.name} died and could not be started again: ${(err as Error).message}`)
      }
    }
    try {
      // The arguments leave for a third-party process: ctxagent's secrets never go with them.
      const result = await (this.client as Client).callTool({ name: tool, arguments: maskValue(args, maskCredentials) }, undefined, { timeout: this.config.timeout_seconds * 1000, signal })
      const text = contentText(result.content)
      if (result.isError === true) return { output: `Error: ${text || 'the tool reported an error'}`, status: 'error', error: firstLine(text) || 'the tool reported an error' }
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
   * naming it and the last line of its stderr; the task runs without its tools.
   */
  static async start(config: Config['mcp'], warn: (message: string) => void): Promise<{ servers: McpServers; tools: Tool[] }> {
    const tools: Tool[] = []
    const started: McpServer[] = []
    const entries = Object.entries(config.servers).filter(([, server]) => server.enabled)
    await Promise.all(
      entries.map(async ([name, server]) => {
        const instance = new McpServer(name, server, warn)
        try {
          const listed = await instance.start()
          started.push(instance)
          for (const tool of listed) tools.push(toTool(instance, tool))
        } catch (err) {
          const why = instance.lastStderrLine()
          warn(`MCP server ${name} did not start (${(err as Error).message}${why ? `; its stderr said: ${why}` : ''}); the task runs without its tools`)
          await instance.close()
        }
      }),
    )
    return { servers: new McpServers(started), tools: tools.sort((a, b) => (a.name < b.name ? -1 : 1)) }
  }

  /** Process ids of the running servers (for tests and the log). */
  pids(): Record<string, number | null> {
    return Object.fromEntries(this.servers.map((s) => [s.name, s.pid]))
  }

  async close(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.close()))
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
    spec: { type: 'function', function: { name, description: listed.description ?? `${listed.name} (MCP server ${server.name})`, parameters: schema } },
    validate(args) {
      if (args === null || typeof args !== 'object' || Array.isArray(args)) return { ok: false, error: `the arguments of ${name} must be a JSON object; expected ${JSON.stringify(schema)}` }
      const copy = structuredClone(args) as Record<string, unknown>
      if (check === null || check(copy)) return { ok: true, args: copy }
      const e = check.errors?.[0]
      return { ok: false, error: `argument '${e?.instancePath.replace(/^\//, '') || '(all)'}' ${e?.message ?? 'is invalid'}; the arguments of ${name} are ${JSON.stringify(schema)}` }
    },
    run: (args, ctx) => server.call(listed.name, args, ctx.signal),
  }
}

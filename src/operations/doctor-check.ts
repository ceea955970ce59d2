import type { Config } from '../config/schema.js'
import type { Layout } from '../storage/fs/layout.js'
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

import type { Config } from '../config/schema.js'
import type { LlmClient, ProviderWait } from '../llm/client.js'
import { requireLlmClient } from '../llm/providers.js'
import { ReplayClient } from '../llm/replay.js'
import type { Channel } from '../sources/types.js'
import type { TaskEnv } from '../storage/task/env.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { ToolRegistry } from '../tools/registry.js'
import type { McpSandbox } from '../tools/sandbox/mcp-launch.js'
import type { RunLog } from './log.js'
import { RemoteLink, statusText } from './remote.js'
import type { RunEnv, RunStart } from './run-start.js'
import type { SpendGuard } from './spend-guard.js'
import { spendGuard } from './spend-setup.js'
import { noteWait, retryWaitNote } from './waits.js'

// What a task talks to besides its files: the LLM (behind the spend guard), the MCP servers, the issue or request it came from.

/** The task's LLM client: every request of the task checked first, for cost caps and a usage limit on its API key (docs/running.md#budgets); a replay is not. */
export async function taskClient(
  run: RunEnv,
  handle: TaskHandle,
  resumed: boolean,
  log: RunLog,
): Promise<{ made: LlmClient; guard: SpendGuard | null; client: LlmClient }> {
  const { env, config, settings } = run
  // Every wait before a retry is said and recorded (docs/running.md#waits).
  const made = await createClient(config, env, handle, resumed, (wait) => noteWait(handle, log, retryWaitNote(wait)))
  const guard =
    made instanceof ReplayClient
      ? null
      : spendGuard({ config, settings, index: env.index, now: env.now, fleetJob: run.fleetJob === true }, handle, made.model, log)
  return { made, guard, client: guard === null ? made : guard.wrap(made) }
}

async function createClient(config: Config, env: TaskEnv, handle: TaskHandle, resumed: boolean, onWait: (wait: ProviderWait) => void): Promise<LlmClient> {
  const llm = config.llm
  if (llm.provider === 'replay') {
    // A resumed replay continues after the assistant messages this task already played.
    return ReplayClient.open(llm.replay.from as string, env.layout, llm.replay.context_length, resumed ? (handle.state.turns ?? 0) : 0)
  }
  return requireLlmClient(config, onWait)
}

/** The issue or request a task came from: its status comment posted (or found again), its seen comments kept in state. */
export async function openRemote(start: RunStart, handle: TaskHandle, config: Config, log: RunLog, stop: AbortSignal): Promise<RemoteLink> {
  const detection =
    start.kind === 'new'
      ? { last_comment_ids: start.seen ?? [], last_check_timestamp: new Date().toISOString(), status_comment_id: null }
      : handle.state.comment_detection
  const link = new RemoteLink(start.channel as Channel, handle.uuid, log, config.comments.min_interval_seconds * 1000, detection, stop)
  await link.status(statusText(handle, start.kind === 'new' ? 'started' : 'resumed'))
  // The status comment's id and the seen comments are state from now on.
  await handle.update({ comment_detection: link.detection() })
  return link
}

/** Starts the configured MCP servers and adds their tools; the SDK is loaded only when there are servers. */
export async function startMcp(
  config: Config,
  tools: ToolRegistry,
  log: RunLog,
  signal: AbortSignal,
  sandbox: McpSandbox,
): Promise<{ close(): Promise<void> } | null> {
  if (!Object.values(config.mcp.servers).some((s) => s.enabled)) return null
  const { McpServers } = await import('../tools/mcp.js')
  // A stop during start-up ends it (servers closed); the loop then ends the task as the stop says.
  const started = await McpServers.start(config.mcp, (m) => log.warn(m), signal, sandbox)
  let added = 0
  for (const tool of started.tools) {
    if (tools.resolve(tool.name)?.name === tool.name) log.warn(`MCP: two tools are named ${tool.name}; the second is left out`)
    else {
      tools.add(tool)
      added++
    }
  }
  if (!signal.aborted) log.info(`MCP: ${added} tool(s) from ${Object.keys(started.servers.pids()).length} server(s)`, { mcp_pids: started.servers.pids() })
  return started.servers
}

import { dirname, isAbsolute } from 'node:path'
import { cacheDirectory } from '../config/config-cache.js'
import { configCandidates } from '../config/locate.js'
import type { Config } from '../config/schema.js'
import { UsageError } from '../errors.js'
import { planSandbox } from '../tools/sandbox.js'
import { workspaceUnwritable } from '../tools/sandbox/identity.js'
import type { McpSandbox } from '../tools/sandbox/mcp-launch.js'
import type { SandboxPlan } from '../tools/sandbox.js'
import { realPathOf } from '../tools/workspace.js'

/**
 * The places no tool and no command may reach, as real paths: the task tree, the config
 * file in force, every place ctxagent looks for one (the ctxagent directories of
 * ~/.config, or XDG_CONFIG_HOME, and /etc), and ctxagent's cache directory (a config's
 * validation, Node's compiled code), whether or not they exist yet: nothing a tool can
 * write may ever be read as configuration (docs/contract.md §8).
 */
export function hiddenPaths(base: string, configFile: string | null, env: NodeJS.ProcessEnv = process.env): string[] {
  const candidates = configCandidates(env).map((file) => dirname(file))
  // CTXAGENT_HIDDEN: more places (absolute paths, ':'-separated), e.g. an eval's suite with its hidden tests (docs/eval.md#what-the-agent-never-sees).
  const more = (env.CTXAGENT_HIDDEN ?? '').split(':').filter((p) => isAbsolute(p))
  return [...new Set([base, ...(configFile === null ? [] : [configFile]), ...candidates, cacheDirectory(env), ...more].map(realPathOf))]
}

/**
 * How run_command will run. With a shell offered and tools.sandbox: bwrap, bubblewrap
 * must pass its self-check and the sandbox identity must be able to write the
 * workspace, or the run is refused before the task exists: a shell without a sandbox
 * is only ever the operator's explicit choice (tools.sandbox: none).
 */
export function shellSandbox(config: Config, allowShell: boolean, hidden: readonly string[], workspace: string): SandboxPlan {
  if (!allowShell) return { kind: 'none' }
  const real = realPathOf(workspace)
  const planned = planSandbox(config.tools, hidden, real)
  if (!planned.ok)
    throw new UsageError(
      `run_command needs a sandbox, and bubblewrap does not work here: ${planned.why}`,
      'install bubblewrap (apt-get install bubblewrap), or set tools.sandbox: none in the config to run commands without a sandbox',
    )
  if (planned.plan.kind === 'none') return planned.plan
  const why = workspaceUnwritable(planned.plan.identity, real)
  if (why !== null) throw new UsageError(why, 'chown it to the user commands should run as, or set tools.sandbox_user')
  return planned.plan
}

/**
 * What the run's MCP servers are sandboxed with (each unless its sandbox: none):
 * run_command's settings, workspace and hidden places; `network` is told of each
 * connection through a server's egress proxy.
 */
export function mcpSandbox(config: Config, workspace: string, hidden: readonly string[], network?: McpSandbox['network']): McpSandbox {
  return { tools: config.tools, workspace: realPathOf(workspace), hidden, ...(network !== undefined ? { network } : {}) }
}

import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { fleetDatabaseUrl } from '../command-env.js'
import { resolve } from 'node:path'
import { runDoctor } from '../operations/doctor.js'
import { hiddenPaths, mcpSandbox } from '../run/sandbox-setup.js'
import { resolveWorkspace } from '../run/settings.js'
import type { Check } from '../operations/doctor-check.js'
import { isLoopback } from '../serve/auth.js'
import { serveToken } from '../command-kit/serve-token.js'
import { wrapWords } from '../text.js'
import { environmentChecks } from '../workspace/environment/check.js'
import { durationArg, withEnv } from '../command-kit/shared.js'

interface DoctorOptions {
  timeout: number
  workspace: string
}

export function doctorCommand(): Command {
  return new Command('doctor')
    .description(
      'check the setup, one line each: config file, task tree and free space, the LLM answering a tool call, each MCP server, the GitHub and GitLab tokens, the repository environments (--workspace: its own)',
    )
    .option('--timeout <duration>', 'how long each network check may take (default: 30s)', durationArg('--timeout'))
    .option('--workspace <dir>', 'start the MCP servers in the sandbox around this workspace, as a run there would (default: an empty one)')
    .addHelpText(
      'after',
      `
Examples:
  $ ctxagent doctor
  $ ctxagent doctor --config ci.yaml --json | jq '.checks[] | select(.status == "fail")'
Exit status: 0 when nothing failed (warnings allowed), 1 otherwise.`,
    )
    .action(withEnv(doctor))
}

async function doctor(ctx: CommandEnv, opts: Partial<DoctorOptions>): Promise<void> {
  const configFile = ctx.configSource === null ? null : resolve(process.cwd(), ctx.configSource)
  const hidden = hiddenPaths(ctx.layout.base, configFile)
  const workspace = opts.workspace === undefined ? undefined : resolveWorkspace(opts.workspace)
  const checks = await runDoctor({
    config: ctx.config,
    configSource: ctx.configSource,
    layout: ctx.layout,
    timeoutMs: opts.timeout ?? 30_000,
    databaseUrl: fleetDatabaseUrl(ctx),
    mcpSandbox: (dir) => mcpSandbox(ctx.config, dir, hidden),
    ...(workspace === undefined ? {} : { workspace }),
    serve: serveSetup(ctx),
  })
  // The repository's environment, read as a run in the workspace would read it (docs/environments.md).
  checks.push(...(await environmentChecks(ctx.config, workspace ?? null)))
  const failed = checks.filter((c) => c.status === 'fail').length
  if (ctx.json) ctx.io.json({ ok: failed === 0, checks })
  else ctx.io.out(checks.map((c) => line(ctx, c)).join('\n'))
  if (failed > 0) process.exitCode = 1
}

/** What doctor's serve line needs: whether a token is set (a CTXAGENT_SERVE_TOKEN too short is the problem), and the host's kind. */
function serveSetup(ctx: CommandEnv): { token: boolean; loopback: boolean; problem?: string } {
  const loopback = isLoopback(ctx.config.serve.host)
  try {
    return { token: serveToken(ctx) !== null, loopback }
  } catch (err) {
    return { token: false, loopback, problem: (err as Error).message }
  }
}

/** One check: `mark name: message (hint)`, wrapped at words under the mark's width on a terminal (a pipe gets one line a check, for grep). */
function line(ctx: CommandEnv, c: Check): string {
  const k = ctx.io.chalk
  const mark = c.status === 'ok' ? k.green('ok  ') : c.status === 'warn' ? k.yellow('warn') : c.status === 'fail' ? k.red('FAIL') : k.dim('--  ')
  const text = `${c.name}: ${c.message}${c.hint ? ` (${c.hint})` : ''}`
  if (!ctx.io.isTTY) return `${mark} ${text}`
  const width = Math.max(40, (ctx.io.stdout.columns ?? 80) - 1)
  return `${mark} ${wrapWords(`${'x'.repeat(4)} ${text}`, width, 5).slice(5)}`
}

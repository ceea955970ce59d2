import { spawnSync } from 'node:child_process'
import { realpathSync } from 'node:fs'
import { delimiter, isAbsolute, join, relative, sep } from 'node:path'
import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { CtxError } from '../errors.js'
import { packageRoot } from '../package-root.js'
import { withEnv } from '../command-kit/shared.js'

export function demoCommand(): Command {
  return new Command('demo')
    .description('replay a recorded coding session end to end (no LLM, no network, no key): compaction, pause and resume, then view and stats of the result')
    .action(withEnv(demo))
}

async function demo(ctx: CommandEnv): Promise<void> {
  const started = Date.now()
  const say = (text: string) => ctx.io.out(ctx.io.chalk.bold(text))
  say('ctxagent demo: replaying a recorded session (a bug hunt in a small invoicing library) with the tools running for real')
  const { runDemo } = await import('../run/demo.js')
  // --home keeps the task where the operator wants it; otherwise a temporary tree.
  const result = await runDemo({ home: ctx.baseSource === '--home' ? ctx.layout.base : null, log: process.stdout, user: ctx.osUser })
  if (result.second.status !== 'completed')
    throw new CtxError(`the demo task ended ${result.second.status}: ${result.second.error ?? ''}`, { hint: 'this is a bug in ctxagent; please report it' })
  const seconds = ((Date.now() - started) / 1000).toFixed(1)
  say(`\nreplayed ${result.turns} turns in ${seconds}s, paused by request after turn ${result.pausedAt} and resumed; the task is completed\n`)
  const me = invokedAs(ctx.env, process.cwd())
  say(`$ ${me} view ${result.uuid.slice(0, 8)}`)
  show(ctx, ['view', result.uuid, '--home', result.home])
  say(`\n$ ${me} stats`)
  show(ctx, ['stats', '--home', result.home])
  say('\nwhere things are')
  ctx.io.out(
    [
      `  the task directory:  ${join(result.home, 'completed', result.uuid)}`,
      `  the fixed project:   ${result.workspace}`,
      `  try:                 ${me} --home ${result.home} view ${result.uuid.slice(0, 8)} --summaries`,
      `                       ${me} --home ${result.home} view ${result.uuid.slice(0, 8)} --tools --limit 5`,
      `                       jq -r .role ${join(result.home, 'completed', result.uuid, 'messages.jsonl')} | sort | uniq -c`,
    ].join('\n'),
  )
}

/**
 * How the operator can run this ctxagent again from where the demo ran: `ctxagent` when
 * that name on PATH is this very program, else the launcher's path (`./bin/ctxagent` in
 * a fresh clone), so every command the demo suggests works as printed.
 */
export function invokedAs(env: NodeJS.ProcessEnv, cwd: string, argv1 = process.argv[1]): string {
  const fallback = join(packageRoot(), 'bin', 'ctxagent')
  const launcher = realOrNull(argv1 ?? fallback) ?? fallback
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (dir === '' || !isAbsolute(dir)) continue
    if (realOrNull(join(dir, 'ctxagent')) === launcher) return 'ctxagent'
  }
  const rel = relative(cwd, launcher)
  if (!rel.startsWith('..') && !isAbsolute(rel)) return `.${sep}${rel}`
  return launcher
}

function realOrNull(path: string): string | null {
  try {
    return realpathSync(path)
  } catch {
    return null
  }
}

/** Runs another ctxagent command as the operator would, its output passed through. */
function show(ctx: CommandEnv, args: string[]): void {
  const res = spawnSync(process.execPath, [join(packageRoot(), 'bin', 'ctxagent'), ...args, ...(ctx.io.color ? [] : ['--no-color'])], {
    stdio: ['ignore', 'inherit', 'inherit'],
  })
  if (res.status !== 0) throw new CtxError(`ctxagent ${args[0]} exited ${res.status ?? res.signal}`, { hint: 'this is a bug in ctxagent; please report it' })
}

import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { CtxError } from '../errors.js'
import { packageRoot } from '../package-root.js'
import { withEnv } from './shared.js'

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
  if (result.second.status !== 'completed') throw new CtxError(`the demo task ended ${result.second.status}: ${result.second.error ?? ''}`, { hint: 'this is a bug in ctxagent; please report it' })
  const seconds = ((Date.now() - started) / 1000).toFixed(1)
  say(`\nreplayed ${result.turns} turns in ${seconds}s, paused by request after turn ${result.pausedAt} and resumed; the task is completed\n`)
  say(`$ ctxagent view ${result.uuid.slice(0, 8)}`)
  show(ctx, ['view', result.uuid, '--home', result.home])
  say(`\n$ ctxagent stats`)
  show(ctx, ['stats', '--home', result.home])
  say('\nwhere things are')
  ctx.io.out(
    [
      `  the task directory:  ${join(result.home, 'completed', result.uuid)}`,
      `  the fixed project:   ${result.workspace}`,
      `  try:                 ctxagent --home ${result.home} view ${result.uuid.slice(0, 8)} --summaries`,
      `                       ctxagent --home ${result.home} view ${result.uuid.slice(0, 8)} --tools --limit 5`,
      `                       jq -r .role ${join(result.home, 'completed', result.uuid, 'messages.jsonl')} | sort | uniq -c`,
    ].join('\n'),
  )
}

/** Runs another ctxagent command as the operator would, its output passed through. */
function show(ctx: CommandEnv, args: string[]): void {
  const res = spawnSync(process.execPath, [join(packageRoot(), 'bin', 'ctxagent'), ...args, ...(ctx.io.color ? [] : ['--no-color'])], { stdio: ['ignore', 'inherit', 'inherit'] })
  if (res.status !== 0) throw new CtxError(`ctxagent ${args[0]} exited ${res.status ?? res.signal}`, { hint: 'this is a bug in ctxagent; please report it' })
}

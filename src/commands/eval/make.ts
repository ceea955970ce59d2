import { resolve } from 'node:path'
import type { Command } from 'commander'
import type { CommandEnv } from '../../command-env.js'
import { UsageError } from '../../errors.js'
import { makeSuite } from '../../eval/make-suite.js'
import type { MakeOutcome } from '../../eval/make-suite.js'
import type { Io } from '../../io.js'
import { hiddenPaths } from '../../run/sandbox-setup.js'
import { parseGithubRepo } from '../../sources/github.js'
import { parseGitlabProject } from '../../sources/gitlab.js'
import { table } from '../../render.js'
import { forTerminal } from '../../terminal-text.js'
import { environmentStore } from '../../workspace/environment/prepare.js'
import { dateFrom } from '../../command-kit/filter-args.js'
import { positiveIntArg, stopSignal, stoppedError, withEnv } from '../../command-kit/shared.js'

interface MakeOptions {
  github?: string
  gitlab?: string
  since?: Date
  limit?: number
  out?: string
}

const DEFAULT_LIMIT = 30

/** `eval make` (docs/eval.md#making-a-suite). */
export function addMake(command: Command): void {
  command
    .command('make')
    .description("make a suite from a repository's merged pull requests: each one's tests are the hidden check, the rest of its diff the solution")
    .option('--github <owner/repo>', 'the GitHub repository whose merged pull requests become tasks')
    .option('--gitlab <group/project>', 'the GitLab project whose merged merge requests become tasks')
    .option('--since <date>', 'only those merged on or after this date (2026-01-31, 30d, yesterday)', dateFrom)
    .option('--limit <n>', `at most this many merged changes, newest first (default: ${DEFAULT_LIMIT})`, positiveIntArg)
    .option('--out <dir>', 'the suite directory to write (made when absent; tasks already in it are kept)')
    .action(withEnv(make))
}

async function make(ctx: CommandEnv, opts: MakeOptions): Promise<void> {
  if ((opts.github === undefined) === (opts.gitlab === undefined)) throw new UsageError('give one forge', 'give --github owner/repo or --gitlab group/project')
  if (opts.out === undefined) throw new UsageError('no --out given', 'give --out DIR: the suite directory to write')
  const forge =
    opts.github !== undefined
      ? { kind: 'github' as const, repository: ((r) => `${r.owner}/${r.repo}`)(parseGithubRepo(opts.github)) }
      : { kind: 'gitlab' as const, project: parseGitlabProject(opts.gitlab as string) }
  const out = resolve(opts.out)
  // A stop ends the check being run (its sandbox with it); what was made stays in the suite (docs/eval.md#making-a-suite).
  const stop = stopSignal()
  const abort = new AbortController()
  void stop.stopped.then(() => abort.abort())
  let made: Awaited<ReturnType<typeof makeSuite>>
  try {
    made = await makeSuite({
      forge,
      since: opts.since ?? null,
      limit: opts.limit ?? DEFAULT_LIMIT,
      out,
      config: ctx.config,
      hidden: hiddenPaths(ctx.layout.base, ctx.configSource, ctx.env),
      store: environmentStore(ctx.config, ctx.layout.base),
      onChange: (o) => ctx.io.warn(o.ok ? `${o.from}: made ${o.task}` : `${o.from}: left out: ${o.why}`),
      signal: abort.signal,
    })
  } finally {
    stop.dispose()
  }
  if (made.stopped) {
    const kept = made.outcomes.filter((o) => o.ok).length
    throw stoppedError(
      stop.which(),
      `eval make stopped: ${kept} task(s) made, the change being checked and those after it not tried`,
      'run it again: tasks already in the suite are kept, the others are tried',
    )
  }
  if (ctx.json)
    ctx.io.json({
      suite: made.suite,
      made: made.outcomes.flatMap((o) => (o.ok ? [{ task: o.task, from: o.from, url: o.url, commit: o.commit, check: o.check, tests: o.tests }] : [])),
      left_out: made.outcomes.flatMap((o) => (o.ok ? [] : [{ from: o.from, url: o.url, why: o.why }])),
    })
  else ctx.io.out(renderMade(made.outcomes, made.suite, ctx.io))
}

function renderMade(outcomes: readonly MakeOutcome[], suite: string, io: Io): string {
  const rows = outcomes.map((o) => [
    o.from,
    o.ok ? io.chalk.green(o.task) : io.chalk.red('left out'),
    o.ok ? `check: ${forTerminal(o.check)}` : forTerminal(o.why),
  ])
  const kept = outcomes.filter((o) => o.ok).length
  return `${table(io, ['change', 'task', 'why'], rows)}\n${kept} of ${outcomes.length} merged change(s) made into tasks in ${forTerminal(suite)}`
}

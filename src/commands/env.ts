import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { Command } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { CtxError, SETUP_FAILED_EXIT, UsageError } from '../errors.js'
import { cloneWorkspace } from '../workspace/clone.js'
import { hiddenPaths } from '../run/sandbox-setup.js'
import { resolveWorkspace } from '../run/settings.js'
import { giveWorkspace, sandboxIdentity } from '../tools/sandbox/identity.js'
import { environmentStore, prepareEnvironment } from '../workspace/environment/prepare.js'
import { withEnv } from '../command-kit/shared.js'
import { imageText } from '../storage/task/environment-view.js'

interface PrepareOptions {
  workspace?: string
  repo?: string
}

export function envCommand(): Command {
  return new Command('env').description("a repository's environment (docs/environments.md)").addCommand(
    new Command('prepare')
      .description("run the repository's setup now, unless its result is cached, to warm the cache (e.g. from cron after a lockfile changed)")
      .option('--workspace <dir>', 'a checkout of the repository (its default branch is read)')
      .option('--repo <url>', 'the repository, cloned for this and removed after')
      .addHelpText(
        'after',
        `
Examples:
  $ ctxagent env prepare --workspace ~/src/shop
  $ ctxagent env prepare --repo https://github.com/acme/shop.git --json
Exit status: 0 when the environment is ready (or there is none), 7 when setup failed.`,
      )
      .action(withEnv(prepare)),
  )
}

async function prepare(ctx: CommandEnv, opts: PrepareOptions): Promise<void> {
  if ((opts.workspace === undefined) === (opts.repo === undefined)) throw new UsageError('env prepare needs one of --workspace and --repo', 'give one')
  const configFile = ctx.configSource === null ? null : resolve(process.cwd(), ctx.configSource)
  const hidden = hiddenPaths(ctx.layout.base, configFile)
  let workspace: string
  // The clone (--repo) and the setup log live here until the command ends.
  const scratch = mkdtempSync(join(tmpdir(), 'ctxagent-env-'))
  if (opts.repo !== undefined) {
    workspace = join(scratch, 'repo')
    try {
      await cloneWorkspace({ url: opts.repo, dir: workspace })
      giveWorkspace(workspace, sandboxIdentity(ctx.config.tools, workspace))
    } catch (err) {
      rmSync(scratch, { recursive: true, force: true })
      throw new CtxError(`the repository could not be cloned: ${(err as Error).message}`, { hint: 'check the URL and the credentials' })
    }
  } else {
    try {
      workspace = resolveWorkspace(opts.workspace as string)
    } catch (err) {
      rmSync(scratch, { recursive: true, force: true })
      throw err
    }
  }
  try {
    const store = environmentStore(ctx.config, ctx.layout.base)
    const log = join(scratch, 'setup.log')
    const prepared = await prepareEnvironment({ config: ctx.config, workspace, repository: null, hidden, log, store, prepareOnly: true })
    if (ctx.json) ctx.io.json(prepared.kind === 'none' ? { status: 'none' } : prepared.record)
    else if (prepared.kind === 'none') ctx.io.out(`${opts.repo ?? workspace} has no environment`)
    else {
      const image = prepared.record.image !== undefined ? `; ${imageText(prepared.record.image)}` : ''
      ctx.io.out(`${prepared.record.status}: ${prepared.record.file ?? `environments.${prepared.record.operator}`}; cache ${prepared.record.cache}${image}`)
    }
    if (prepared.kind === 'failed')
      throw new CtxError(`setup failed: ${prepared.record.error}`, {
        exitCode: SETUP_FAILED_EXIT,
        hint: prepared.record.tail ? `its output ended: ${prepared.record.tail.trim().split('\n').slice(-3).join(' | ')}` : 'see docs/environments.md',
      })
  } finally {
    rmSync(scratch, { recursive: true, force: true })
  }
}

import { chmodSync, existsSync, mkdirSync, realpathSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../config/load.js'
import type { Config } from '../config/schema.js'
import { UsageError } from '../errors.js'
import { packageRoot } from '../package-root.js'
import { makePrivateDir } from '../storage/fs/files.js'
import { realPathOf } from '../tools/workspace.js'
import { hiddenPaths } from '../run/sandbox-setup.js'
import { evalId } from './store.js'
import type { EvalSpec, VariantSpec } from './store.js'
import { readSuite } from './suite.js'
import type { SuiteRead } from './suite.js'
import { checkVariants, configTexts } from './variants.js'

/** An eval ready to run: its spec, tasks, each variant's pricing, and where its workspaces go. */
export interface EvalPlan {
  spec: EvalSpec
  suite: SuiteRead
  pricing: Map<string, Config['pricing']>
  workRoot: string
  hidden: string[]
}

export interface PlanInput {
  suite: string
  variants: VariantSpec[]
  runs: number
  base: string
  config: Config
  configFile: string | null
  workDir: string | null
  env: NodeJS.ProcessEnv
  now: Date
}

/** Reads the suite and the variants' configs (one-line errors for what is wrong, nothing written). */
export function planEval(input: PlanInput): EvalPlan {
  if (!existsSync(input.suite) || !statSync(input.suite).isDirectory())
    throw new UsageError(`no suite directory ${input.suite}`, 'give a directory of tasks, each a directory with task.yaml and tests/ (docs/eval.md#a-suite)')
  const suitePath = realpathSync(input.suite)
  const suite = readSuite(suitePath)
  if (suite.tasks.length === 0)
    throw new UsageError(
      `the suite ${suitePath} has no usable task`,
      suite.problems.length > 0 ? `${suite.problems[0]?.name}: ${suite.problems[0]?.why}` : 'each task is a directory with task.yaml and tests/',
    )
  if (input.variants.length === 0) throw new UsageError('no variant given', 'give --variant NAME=config.yaml (once per variant; two for a paired comparison)')
  checkVariants(input.variants)
  const pricing = new Map(
    input.variants.map((v) => [
      v.name,
      v.config === null ? input.config.pricing : loadConfig({ flag: v.config, env: input.env, cwd: process.cwd() }).config.pricing,
    ]),
  )
  const id = evalId(suitePath, input.variants, input.runs, configTexts(input.variants))
  const spec: EvalSpec = {
    id,
    suite: suitePath,
    created_at: input.now.toISOString(),
    runs: input.runs,
    variants: input.variants,
    tasks: suite.tasks.map((t) => t.name),
  }
  const workRoot = input.workDir ?? join(tmpdir(), 'ctxagent-eval', id)
  // Judged before anything is made: either may not exist yet (a first eval in a new tree).
  if (inside(realPathOf(workRoot), realPathOf(input.base)))
    throw new UsageError(`--work-dir ${workRoot} is inside the task tree`, 'the sandbox hides the task tree from the agent; give a directory outside it')
  // A tree that does not exist yet is made as every command makes it (0700: docs/formats.md#masking-and-permissions), as `demo` makes its --home.
  makePrivateDir(input.base)
  mkdirSync(workRoot, { recursive: true, mode: 0o711 })
  // The sandbox's user (as root: another user) must reach the trials' workspaces below it.
  chmodSync(workRoot, (statSync(workRoot).mode & 0o777) | 0o011)
  // The suite (its tests and solutions) and every variant's config file are hidden from the agents, as the task tree is.
  const hidden = [...hiddenPaths(input.base, input.configFile, input.env), suitePath, ...input.variants.flatMap((v) => (v.config === null ? [] : [v.config]))]
  return { spec, suite, pricing, workRoot: realpathSync(workRoot), hidden }
}

/** The demo suite and its two recorded variants (docs/eval.md#the-demo): no key, no network. */
export function demoVariants(): { suite: string; variants: VariantSpec[] } {
  const root = join(packageRoot(), 'demo', 'eval')
  return {
    suite: join(root, 'suite'),
    variants: ['careful', 'hasty'].map((name) => ({ name, config: null, flags: [], replay: join(root, 'recordings', name) })),
  }
}

function inside(path: string, dir: string): boolean {
  return path === dir || path.startsWith(`${dir}/`)
}

// The eval tests' scripted suite (eval-run.test.ts, eval-enqueue.test.ts): a repository with two bugs,
// tasks on it with hidden checks, and a scripted LLM whose `good` model fixes both and `meh` one.
import { execFileSync } from 'node:child_process'
import { pidsHolding } from '../helpers/processes.js'
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { onTestFinished } from 'vitest'
import type { FakeLlm, RecordedRequest, Reply } from '../helpers/fake-llm.js'

export const HIDDEN_MARK = 'HIDDEN-CHECK-5e1f0c'
export const SOLUTION_MARK = 'SOLUTION-PATCH-a93d27'
const BUGGY = 'export const add = (a, b) => a - b\nexport const mul = (a, b) => a + b\n'

/** A repository with two bugs, and a suite of three tasks on it: add, mul, and one whose check already passes. */
export function makeSuite(): { dir: string; suite: string } {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-eval-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  const repo = join(dir, 'repo')
  mkdirSync(repo)
  writeFileSync(join(repo, 'calc.js'), BUGGY)
  const git = (...args: string[]) =>
    execFileSync('git', args, {
      cwd: repo,
      env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@x', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@x' },
    })
  git('init', '-q')
  git('add', '.')
  git('commit', '-qm', 'buggy')
  const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: repo, encoding: 'utf8' }).trim()
  // A later commit holds the fix: the agent must never see it (the workspace is an archive of `commit`).
  writeFileSync(join(repo, 'calc.js'), 'export const add = (a, b) => a + b\nexport const mul = (a, b) => a * b\n')
  git('commit', '-qam', `the fix ${SOLUTION_MARK}`)
  const suite = join(dir, 'suite')
  const task = (name: string, statement: string, assertion: string) => {
    mkdirSync(join(suite, name, 'tests'), { recursive: true })
    writeFileSync(join(suite, name, 'task.yaml'), `statement: ${JSON.stringify(statement)}\nrepo: ../../repo\ncommit: ${commit}\ncheck: node check.mjs\n`)
    writeFileSync(
      join(suite, name, 'tests', 'check.mjs'),
      `// ${HIDDEN_MARK}\nimport * as c from './calc.js'\nif (!(${assertion})) { console.log('wrong'); process.exit(1) }\n`,
    )
  }
  task('add', 'TASK-ADD: add() subtracts; make it add.', 'c.add(2, 3) === 5')
  task('mul', 'TASK-MUL: mul() adds; make it multiply.', 'c.mul(2, 3) === 6')
  task('already', 'TASK-ALREADY: nothing to do.', 'typeof c.add === "function"')
  writeFileSync(
    join(suite, 'add', 'solution.patch'),
    `# ${SOLUTION_MARK}\n--- a/calc.js\n+++ b/calc.js\n@@ -1,2 +1,2 @@\n-export const add = (a, b) => a - b\n+export const add = (a, b) => a + b\n export const mul = (a, b) => a + b\n`,
  )
  return { dir, suite }
}

const USAGE = { prompt_tokens: 1000, completion_tokens: 100, total_tokens: 1100 }

/** `good` fixes add and mul; `meh` fixes add only. Each reply costs 1000 prompt + 100 completion tokens. */
export function script(req: RecordedRequest): Reply {
  const text = req.body.messages.map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content))).join('\n')
  const turn = req.body.messages.filter((m) => m.role === 'assistant').length
  const task = text.includes('TASK-ADD') ? 'add' : text.includes('TASK-MUL') ? 'mul' : 'other'
  const fixes = req.body.model === 'good-model' || task === 'add'
  const fixed = task === 'add' ? BUGGY.replace('a - b', 'a + b') : BUGGY.replace('a + b\n', 'a * b\n')
  if (!req.body.tools) return { content: '## Original Task\nsummary', usage: USAGE }
  if (turn === 0) return { calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }], usage: USAGE }
  if (turn === 1 && fixes && task !== 'other') return { calls: [{ name: 'write_file', arguments: { path: 'calc.js', content: fixed } }], usage: USAGE }
  return { calls: [{ name: 'finish', arguments: { summary: 'done' } }], usage: USAGE }
}

export function setup(fake: FakeLlm): { home: string; config: string; work: string } {
  const home = mkdtempSync(join(tmpdir(), 'ctxagent-eval-home-'))
  const work = mkdtempSync(join(tmpdir(), 'ctxagent-eval-work-'))
  onTestFinished(() => {
    rmSync(home, { recursive: true, force: true })
    rmSync(work, { recursive: true, force: true })
  })
  fake.fallback = script
  const config = join(home, 'config.yaml')
  writeFileSync(config, fake.configYaml('pricing:\n  good-model: { prompt: 1, completion: 2 }\n  meh-model: { prompt: 1, completion: 2 }\n'))
  return { home, config, work }
}

export interface Report {
  variants: {
    name: string
    pass_at_1: number
    usd_per_task: number
    usd_per_solved: number | null
    trials: { task: string; passed: boolean; usd: number; status: string; uuid: string }[]
  }[]
  paired: { a: string; b: string; pass_diff: number; ci95: [number, number] }[]
  dir: string
}

/**
 * Makes task `name`'s check wait on a barrier (docs/eval.md#a-stop's tests): until `barrier/go` exists it sleeps, its
 * sleep's argument (`marker`) marking it among the host's processes; then it runs the task's own check.
 * The config must show the barrier to the sandbox (tools.sandbox_read_only).
 */
export function blockCheck(suite: string, name: string): { barrier: string; marker: string } {
  const barrier = mkdtempSync(join(tmpdir(), 'ctxagent-barrier-'))
  onTestFinished(() => rmSync(barrier, { recursive: true, force: true }))
  chmodSync(barrier, 0o755)
  const marker = `${4000 + Math.floor(Math.random() * 1000)}.${process.pid}`
  const yaml = join(suite, name, 'task.yaml')
  const check = `if [ -e ${barrier}/go ]; then node check.mjs; else sleep ${marker}; fi`
  writeFileSync(yaml, readFileSync(yaml, 'utf8').replace('check: node check.mjs', `check: ${JSON.stringify(check)}`))
  onTestFinished(() => {
    for (const pid of pidsHolding(`sleep ${marker}`)) process.kill(pid, 'SIGKILL')
  })
  return { barrier, marker }
}

import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import type { RecordedRequest, Reply } from '../helpers/fake-llm.js'
import { cliAsync } from '../helpers/run.js'

const BUGGY = 'export const add = (a, b) => a - b\n'
const HIDDEN_MARK = 'HARBOR-TESTS-41d2'
const SOLUTION_MARK = 'HARBOR-SOLVE-8e0b'

/** A repository with a bug, and a suite of one task in Harbor's layout on it, whose test.sh always exits 0: its verdict is the reward it writes. */
function harborSuite(): { dir: string; suite: string } {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-eval-harbor-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  const repo = join(dir, 'repo')
  mkdirSync(repo)
  writeFileSync(join(repo, 'calc.js'), BUGGY)
  const env = { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@x', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@x' }
  execFileSync('git', ['init', '-q'], { cwd: repo, env })
  execFileSync('git', ['add', '.'], { cwd: repo, env })
  execFileSync('git', ['commit', '-qm', 'buggy'], { cwd: repo, env })
  const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: repo, encoding: 'utf8' }).trim()
  const task = join(dir, 'suite', 'fix-add')
  mkdirSync(join(task, 'tests'), { recursive: true })
  mkdirSync(join(task, 'solution'))
  mkdirSync(join(task, 'environment'))
  writeFileSync(join(task, 'instruction.md'), '<!-- harbor-canary GUID 0a1b2c -->\nTASK-ADD: add() subtracts; make it add.\n')
  writeFileSync(
    join(task, 'task.toml'),
    [
      'version = "1.0"',
      '',
      '[metadata]',
      'author_name = "Op"',
      'tags = ["trivial",',
      '  "calc"]',
      '',
      '[verifier]',
      'timeout_sec = 60.0',
      'env = { CALC = "1" }',
      '',
      '[agent]',
      'timeout_sec = 120.0',
      '',
      '[environment]',
      'docker_image = "node:22"',
      '',
      '[ctxagent]',
      "repo = '../../repo'",
      `commit = "${commit}"  # the buggy one`,
      '',
    ].join('\n'),
  )
  writeFileSync(join(task, 'environment', 'Dockerfile'), 'FROM node:22\n')
  writeFileSync(
    join(task, 'tests', 'test.sh'),
    `#!/bin/bash\n# ${HIDDEN_MARK}\nmkdir -p /logs/verifier\nif node /tests/check.mjs; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\nexit 0\n`,
  )
  writeFileSync(
    join(task, 'tests', 'check.mjs'),
    `// ${HIDDEN_MARK}\nconst c = await import(process.cwd() + '/calc.js')\nif (c.add(2, 3) !== 5) { console.log('wrong'); process.exit(1) }\n`,
  )
  writeFileSync(join(task, 'solution', 'solve.sh'), `#!/bin/bash\n# ${SOLUTION_MARK}\nsed -i 's/a - b/a + b/' calc.js\n`)
  return { dir, suite: join(dir, 'suite') }
}

const USAGE = { prompt_tokens: 1000, completion_tokens: 100, total_tokens: 1100 }

/** `good` fixes add(); `bad` finishes without a change. */
function script(req: RecordedRequest): Reply {
  const turn = req.body.messages.filter((m) => m.role === 'assistant').length
  if (!req.body.tools) return { content: '## Original Task\nsummary', usage: USAGE }
  if (turn === 0) return { calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }], usage: USAGE }
  if (turn === 1 && req.body.model === 'good-model')
    return { calls: [{ name: 'write_file', arguments: { path: 'calc.js', content: BUGGY.replace('a - b', 'a + b') } }], usage: USAGE }
  return { calls: [{ name: 'finish', arguments: { summary: 'done' } }], usage: USAGE }
}

// Several ctxagent processes, git over HTTP and sandboxed checks: minutes on a busy 2-core machine, not the default minute.
const SLOW = 300_000

describe("eval on Harbor's task layout", () => {
  it(
    'a Harbor task (instruction.md, task.toml, tests/test.sh, solution/solve.sh) passes eval check and runs, judged by the reward test.sh writes',
    async () => {
      const { dir, suite } = harborSuite()
      const fake = await startFakeLlm()
      fake.fallback = script
      const home = join(dir, 'home')
      mkdirSync(home)
      const config = join(dir, 'config.yaml')
      writeFileSync(config, fake.configYaml())
      const checked = await cliAsync(['--home', home, '--config', config, '--json', 'eval', 'check', suite])
      expect(checked.stderr).toBe('')
      expect(checked.code).toBe(0)
      expect(JSON.parse(checked.stdout)).toEqual({ suite, tasks: [{ task: 'fix-add', ok: true, solution: true }] })
      const work = mkdtempSync(join(tmpdir(), 'ctxagent-eval-harbor-work-'))
      onTestFinished(() => rmSync(work, { recursive: true, force: true }))
      const res = await cliAsync(
        ['--home', home, '--config', config, '--json', 'eval', 'run', suite, '--variant', 'bad=model=bad-model', '--variant', 'good=model=good-model'].concat([
          '--work-dir',
          work,
        ]),
      )
      expect(res.code).toBe(0)
      const report = JSON.parse(res.stdout) as { variants: { name: string; trials: { task: string; passed: boolean; status: string }[] }[] }
      // test.sh exits 0 either way: only the reward tells the fixed trial from the other.
      expect(report.variants.map((v) => [v.name, v.trials.map((t) => [t.task, t.passed, t.status])])).toEqual([
        ['bad', [['fix-add', false, 'completed']]],
        ['good', [['fix-add', true, 'completed']]],
      ])
      // The statement is instruction.md without its canary line; no request holds the tests or the solution.
      const first = fake.requests.find((r) => r.raw.includes('TASK-ADD'))
      expect(first).toBeDefined()
      for (const r of fake.requests) {
        expect(r.raw.includes('harbor-canary')).toBe(false)
        expect(r.raw.includes(HIDDEN_MARK)).toBe(false)
        expect(r.raw.includes(SOLUTION_MARK)).toBe(false)
      }
    },
    SLOW,
  )
})

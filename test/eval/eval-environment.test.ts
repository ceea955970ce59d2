import { readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { startFakeLlm } from '../helpers/fake-llm.js'
import type { RecordedRequest, Reply } from '../helpers/fake-llm.js'
import { cliAsync } from '../helpers/run.js'
import { busyboxRoot, scratch } from '../workspace/image-fixture.js'
import { git, makeOrigin } from '../workspace/repo.js'
import { CALC_FIX, ENVIRONMENT, LEFTPAD, NEEDS_LEFTPAD, task, top } from './environment-suite.js'
import type { Checked } from './environment-suite.js'

/*
 * The repository's environment around eval's checks (docs/eval.md#checking-a-suite,
 * docs/eval.md#a-trial), through the real CLI: `eval check` prepares each starting tree as
 * a trial's task is prepared (setup from .ctxagent/environment.yml at the task's commit,
 * its cache, the image), and the hidden check runs in the environment's image as the
 * agent's commands do, with the host's /usr absent.
 */

// An image's system: busybox's shell, a tool only the image has, none of the host's files.
const IN_THE_IMAGE = [
  'set -e',
  'exe=$(readlink /proc/$$/exe)',
  '[ "$exe" = /bin/busybox ] || { echo "not in the image: $exe"; exit 1; }',
  'for f in /usr/bin/git /usr/bin/node /usr/lib/postgresql; do if [ -e "$f" ]; then echo "HOST FILE $f"; exit 1; fi; done',
  'image-tool',
  '. ./calc.sh',
  '[ "$(add 2 3)" = 5 ] || { echo "add 2 3 gave $(add 2 3)"; exit 1; }',
  'echo CHECK-PASSED',
  '',
].join('\n')
const SH_BUGGY = 'add() { echo $(($1 - $2)); }\n'
const SH_FIXED = 'add() { echo $(($1 + $2)); }\n'
const SH_FIX = `--- a/calc.sh\n+++ b/calc.sh\n@@ -1 +1 @@\n-${SH_BUGGY}+${SH_FIXED}`

/** A repository whose image is a busybox root the test builds (a directory image, readable by the sandbox's user). */
function imageRepo(): { repo: string; commit: string } {
  const rootfs = busyboxRoot(join(scratch('ctxagent-eval-image-'), 'rootfs'))
  const origin = makeOrigin({ 'calc.sh': SH_BUGGY, '.ctxagent/environment.yml': `image: ${rootfs}\n` })
  return { repo: origin.bare, commit: git(origin.bare, 'rev-parse', 'main').trim() }
}

describe('eval and the repository environment', () => {
  it("eval check prepares the environment of the task's commit: a check that needs what setup installs keeps its task; at a commit without the file it cannot pass", {
    timeout: 180_000,
  }, async () => {
    const dir = top('ctxagent-eval-env-')
    const origin = makeOrigin({ 'calc.js': 'export const add = (a, b) => a - b\n', ...LEFTPAD })
    const before = git(origin.bare, 'rev-parse', 'main').trim()
    origin.commit({ '.ctxagent/environment.yml': ENVIRONMENT }, 'the environment')
    const after = git(origin.bare, 'rev-parse', 'main').trim()
    const suite = join(dir, 'suite')
    const spec = { repo: origin.bare, check: 'node check.mjs', tests: { 'check.mjs': NEEDS_LEFTPAD }, solution: CALC_FIX }
    task(suite, 'with-environment', { ...spec, commit: after })
    task(suite, 'without-environment', { ...spec, commit: before })
    const home = join(dir, 'home')
    const res = await cliAsync(['--home', home, '--config', 'none', '--json', 'eval', 'check', suite])
    expect(res.code, res.stderr).toBe(1)
    const doc = JSON.parse(res.stdout) as Checked
    expect(doc.tasks).toEqual([
      { task: 'with-environment', ok: true, solution: true },
      {
        task: 'without-environment',
        ok: false,
        why: 'its check fails with solution.patch applied (exit 1: leftpad is not installed): the check or the solution is wrong',
      },
    ])
    // Setup ran once for its key, into the cache the trials' tasks use: the second attempt (with the solution) restored it.
    expect(readdirSync(join(home, 'environments')).length).toBeGreaterThan(0)
  })

  it('eval check leaves out a task whose environment cannot be prepared, with the reason', { timeout: 120_000 }, async () => {
    const dir = top('ctxagent-eval-env-')
    const origin = makeOrigin({
      'calc.js': 'export const add = (a, b) => a - b\n',
      '.ctxagent/environment.yml': 'setup: |\n  echo SETUP-BROKE\n  exit 3\ncache:\n  paths: [node_modules]\n',
    })
    const suite = join(dir, 'suite')
    task(suite, 'broken', {
      repo: origin.bare,
      commit: git(origin.bare, 'rev-parse', 'main').trim(),
      check: 'node check.mjs',
      tests: { 'check.mjs': NEEDS_LEFTPAD },
      solution: CALC_FIX,
    })
    const res = await cliAsync(['--home', join(dir, 'home'), '--config', 'none', '--json', 'eval', 'check', suite])
    expect(res.code, res.stderr).toBe(1)
    const [verdict] = (JSON.parse(res.stdout) as Checked).tasks
    expect(verdict).toMatchObject({ task: 'broken', ok: false })
    expect(verdict?.why).toMatch(/^its environment could not be prepared: .*\(SETUP-BROKE\)$/)
  })

  it("eval check runs the check and eval run the hidden check in the environment's image, with the host's /usr absent", { timeout: 240_000 }, async () => {
    const dir = top('ctxagent-eval-env-')
    const { repo, commit } = imageRepo()
    const suite = join(dir, 'suite')
    task(suite, 'image', { repo, commit, check: 'sh check.sh', tests: { 'check.sh': IN_THE_IMAGE }, solution: SH_FIX })
    const home = join(dir, 'home')
    const checked = await cliAsync(['--home', home, '--config', 'none', '--json', 'eval', 'check', suite])
    expect(checked.code, checked.stderr).toBe(0)
    expect((JSON.parse(checked.stdout) as Checked).tasks).toEqual([{ task: 'image', ok: true, solution: true }])

    // `good` writes the fix, `meh` finishes without it: both are judged in the image, and only the fix passes there.
    const fake = await startFakeLlm()
    fake.fallback = (req: RecordedRequest): Reply => {
      const turn = req.body.messages.filter((m) => m.role === 'assistant').length
      if (!req.body.tools) return { content: '## Original Task\nsummary' }
      if (turn === 0) return { calls: [{ name: 'read_file', arguments: { path: 'calc.sh' } }] }
      if (turn === 1 && req.body.model === 'good-model') return { calls: [{ name: 'write_file', arguments: { path: 'calc.sh', content: SH_FIXED } }] }
      return { calls: [{ name: 'finish', arguments: { summary: 'done' } }] }
    }
    const config = join(dir, 'config.yaml')
    writeFileSync(config, fake.configYaml())
    const work = join(dir, 'work')
    const res = await cliAsync([
      '--home',
      home,
      '--config',
      config,
      '--json',
      'eval',
      'run',
      suite,
      '--variant',
      'good=model=good-model',
      '--variant',
      'meh=model=meh-model',
      '--work-dir',
      work,
    ])
    expect(res.code, res.stderr).toBe(0)
    const report = JSON.parse(res.stdout) as { variants: { name: string; trials: { passed: boolean; status: string; check: { tail: string } | null }[] }[] }
    const trial = (name: string) => report.variants.find((v) => v.name === name)?.trials[0]
    expect(trial('good'), JSON.stringify(trial('good'))).toMatchObject({ passed: true, status: 'completed' })
    expect(trial('good')?.check?.tail).toContain('image-tool from the image')
    expect(trial('good')?.check?.tail).toContain('CHECK-PASSED')
    expect(trial('meh')).toMatchObject({ passed: false, status: 'completed' })
    expect(trial('meh')?.check?.tail).toContain('image-tool from the image')
    expect(trial('meh')?.check?.tail).toContain('add 2 3 gave -1')
  })
})

// The eval environment tests' suite parts (eval-environment.test.ts, eval-operator-environment.test.ts): task
// directories on a real repository, a vendored package that only an environment's setup installs, and a check
// that needs it.
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { onTestFinished } from 'vitest'

/** A directory for the test, searchable by the sandbox's user (who runs the checks in workspaces below it). */
export function top(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  chmodSync(dir, 0o711)
  return dir
}

/** A suite task on the repository `repo` at `commit`, its hidden files and its reference solution. */
export function task(
  suite: string,
  name: string,
  spec: { repo: string; commit: string; check: string; tests: Record<string, string>; solution: string },
): void {
  mkdirSync(join(suite, name, 'tests'), { recursive: true })
  writeFileSync(
    join(suite, name, 'task.yaml'),
    `statement: ${JSON.stringify(`TASK-${name}: fix the bug.`)}\nrepo: ${spec.repo}\ncommit: ${spec.commit}\ncheck: ${spec.check}\n`,
  )
  for (const [path, text] of Object.entries(spec.tests)) {
    mkdirSync(join(suite, name, 'tests', path, '..'), { recursive: true })
    writeFileSync(join(suite, name, 'tests', path), text)
  }
  writeFileSync(join(suite, name, 'solution.patch'), spec.solution)
}

export interface Checked {
  tasks: { task: string; ok: boolean; why?: string; solution?: boolean }[]
}

// A vendored package setup installs (a local file the setup copies, as `npm install ./vendor/…` would): the check imports it.
export const LEFTPAD = {
  'vendor/leftpad/package.json': '{ "name": "leftpad", "version": "1.0.0", "type": "module", "main": "index.js" }\n',
  'vendor/leftpad/index.js': "export default (s, n) => String(s).padStart(n, '0')\n",
}
/** The environment that installs it, as `.ctxagent/environment.yml` or (indented) an operator's `environments.<key>`. */
export const ENVIRONMENT = [
  'setup: |',
  '  mkdir -p node_modules',
  '  cp -r vendor/leftpad node_modules/leftpad',
  'cache:',
  '  paths: [node_modules]',
  '  key: [vendor/leftpad/package.json]',
  '',
].join('\n')
export const NEEDS_LEFTPAD = [
  'let pad',
  "try { ({ default: pad } = await import('leftpad')) } catch { console.log('leftpad is not installed'); process.exit(1) }",
  "const { add } = await import('./calc.js')",
  'const got = pad(add(2, 3), 3)',
  "if (got !== '005') { console.log('add gave', got); process.exit(1) }",
  "console.log('CHECK-PASSED')",
  '',
].join('\n')
export const CALC_BUGGY = 'export const add = (a, b) => a - b\n'
export const CALC_FIXED = 'export const add = (a, b) => a + b\n'
export const CALC_FIX = `--- a/calc.js\n+++ b/calc.js\n@@ -1 +1 @@\n-${CALC_BUGGY}+${CALC_FIXED}`

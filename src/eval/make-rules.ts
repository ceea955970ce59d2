import { parse as parseYaml } from 'yaml'
import { environmentSchema } from '../config/environment.js'
import { ENVIRONMENT_FILE } from '../workspace/environment/definition.js'

// The rules `eval make` follows to split a change and to judge it (docs/eval.md#making-a-suite).

const TEST_DIRS = new Set(['test', 'tests', '__tests__', 'spec', 'specs'])
const TEST_NAMES = [
  /\.(test|spec)\.[cm]?[jt]sx?$/, // calc.test.js, calc.spec.ts
  /^test_.+\.py$/, // test_calc.py
  /_test\.(py|go|rb|exs?)$/, // calc_test.go
  /_spec\.rb$/, // calc_spec.rb
  /Tests?\.(java|kt|cs|swift|scala)$/, // CalcTest.java
]

/** A test file: a directory step named test, tests, __tests__, spec or specs, or a name as the common test runners' own patterns. */
export function isTestPath(path: string): boolean {
  const steps = path.split('/')
  const name = steps.at(-1) ?? ''
  return steps.slice(0, -1).some((s) => TEST_DIRS.has(s)) || TEST_NAMES.some((p) => p.test(name))
}

/** The files checkCommandOf reads. */
export const CHECK_FILES = [
  ENVIRONMENT_FILE,
  'package.json',
  'go.mod',
  'Cargo.toml',
  'pyproject.toml',
  'setup.py',
  'setup.cfg',
  'pytest.ini',
  'tox.ini',
  'Makefile',
]

/**
 * The check command of a task made at a commit, from the files there (`read`: a file's text, or null):
 * the environment file's `test` key, else the one test command the repository's kind implies;
 * null when none does. A file that cannot be read as the rule needs gives no command.
 */
export function checkCommandOf(read: (path: string) => string | null): { command: string; from: string } | null {
  const environment = read(ENVIRONMENT_FILE)
  if (environment !== null) {
    const parsed = environmentSchema.safeParse(safe(() => parseYaml(environment) as unknown))
    if (parsed.success && parsed.data.test !== undefined) return { command: parsed.data.test, from: `${ENVIRONMENT_FILE} test` }
  }
  const pkg = read('package.json')
  if (pkg !== null) {
    const scripts = safe(() => (JSON.parse(pkg) as { scripts?: Record<string, unknown> }).scripts)
    if (typeof scripts?.test === 'string') return { command: 'npm test', from: 'package.json scripts.test' }
  }
  if (read('go.mod') !== null) return { command: 'go test ./...', from: 'go.mod' }
  if (read('Cargo.toml') !== null) return { command: 'cargo test --offline', from: 'Cargo.toml' }
  const python = ['pyproject.toml', 'setup.py', 'setup.cfg', 'pytest.ini', 'tox.ini'].find((f) => read(f) !== null)
  if (python !== undefined) return { command: 'python3 -m pytest', from: python }
  const makefile = read('Makefile')
  if (makefile !== null && /^test\s*:/m.test(makefile)) return { command: 'make test', from: 'Makefile test' }
  return null
}

function safe<T>(fn: () => T): T | null {
  try {
    return fn()
  } catch {
    return null
  }
}

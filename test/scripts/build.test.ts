import { execFileSync } from 'node:child_process'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { ROOT } from '../helpers/run.js'

/**
 * scripts/build.mjs --if-changed (what npm test, bench and torture run first) builds only when
 * what the build reads changed. Run here in a tree of its own whose tsc and bundler are
 * stand-ins that count their runs and write the outputs the script checks for.
 */
describe('scripts/build.mjs --if-changed', () => {
  const trees: string[] = []
  afterEach(() => {
    for (const t of trees.splice(0)) rmSync(t, { recursive: true, force: true })
  })

  function tree(): { root: string; build: (...args: string[]) => string; runs: () => number } {
    const root = mkdtempSync(join(tmpdir(), 'ctxagent-build-test-'))
    trees.push(root)
    const put = (path: string, text: string) => {
      mkdirSync(dirname(join(root, path)), { recursive: true })
      writeFileSync(join(root, path), text)
    }
    mkdirSync(join(root, 'scripts'))
    copyFileSync(join(ROOT, 'scripts', 'build.mjs'), join(root, 'scripts', 'build.mjs'))
    for (const f of ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json', 'node_modules/.package-lock.json']) put(f, '{}\n')
    put('src/cli.ts', 'export const a = 1\n')
    put('src/commands/run.ts', 'export const b = 2\n')
    // tsc: counts its runs and writes dist/; the bundler (run after it) writes bundle/ anew, as scripts/bundle.mjs does.
    put(
      'node_modules/typescript/bin/tsc',
      `const fs = require('node:fs'); fs.appendFileSync(${JSON.stringify(join(root, 'runs'))}, 'x'); fs.mkdirSync('dist', { recursive: true }); fs.writeFileSync('dist/cli.js', ''); if (fs.existsSync('fail')) process.exit(2)\n`,
    )
    put(
      'scripts/bundle.mjs',
      "import fs from 'node:fs'\nfs.rmSync('bundle', { recursive: true, force: true }); fs.mkdirSync('bundle/run', { recursive: true })\nfor (const f of ['bundle/start.js', 'bundle/cli.js', 'bundle/run/cli.js']) fs.writeFileSync(f, '')\n",
    )
    const build = (...args: string[]) =>
      execFileSync(process.execPath, [join(root, 'scripts', 'build.mjs'), ...args], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
    const runs = () => {
      try {
        return readFileSync(join(root, 'runs'), 'utf8').length
      } catch {
        return 0
      }
    }
    return { root, build, runs }
  }

  it('builds the first time, not again while nothing it reads changed, and again after a source or a library changed', () => {
    const t = tree()
    t.build('--if-changed')
    expect(t.runs()).toBe(1)
    t.build('--if-changed')
    expect(t.runs()).toBe(1)
    // The same bytes written again: still nothing to build.
    writeFileSync(join(t.root, 'src', 'cli.ts'), 'export const a = 1\n')
    t.build('--if-changed')
    expect(t.runs()).toBe(1)
    writeFileSync(join(t.root, 'src', 'commands', 'run.ts'), 'export const b = 3\n')
    t.build('--if-changed')
    expect(t.runs()).toBe(2)
    writeFileSync(join(t.root, 'node_modules', '.package-lock.json'), '{"another": "version"}\n')
    t.build('--if-changed')
    expect(t.runs()).toBe(3)
    writeFileSync(join(t.root, 'src', 'new.ts'), 'export const c = 4\n')
    t.build('--if-changed')
    expect(t.runs()).toBe(4)
    t.build('--if-changed')
    expect(t.runs()).toBe(4)
  })

  it('a build that failed leaves no stamp: its outputs are of no known state, so the next builds again', () => {
    const t = tree()
    t.build('--if-changed')
    writeFileSync(join(t.root, 'src', 'cli.ts'), 'export const a: number = "B"\n')
    writeFileSync(join(t.root, 'fail'), '')
    // tsc reported errors, having written dist/ all the same.
    expect(() => t.build('--if-changed')).toThrow()
    expect(t.runs()).toBe(2)
    rmSync(join(t.root, 'fail'))
    // The edit undone: the sources are those of the first build again, but dist/ is not.
    writeFileSync(join(t.root, 'src', 'cli.ts'), 'export const a = 1\n')
    t.build('--if-changed')
    expect(t.runs()).toBe(3)
  })

  it('builds when an output is missing, and always without --if-changed', () => {
    const t = tree()
    t.build()
    t.build('--if-changed')
    expect(t.runs()).toBe(1)
    rmSync(join(t.root, 'bundle', 'run', 'cli.js'))
    t.build('--if-changed')
    expect(t.runs()).toBe(2)
    t.build()
    expect(t.runs()).toBe(3)
  })
})

import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'

/**
 * The benchmarks load the build (dist/, tsc's output of src/) by path, out of the type
 * checker's sight: a source file moved or split leaves a bench importing a module the build
 * no longer has, and `npm run bench` fails only when someone runs it. Each such import is
 * read here and mapped back to its source (dist/x.js ← src/x.ts), which must exist and
 * export each name the bench takes from it.
 */
const ROOT = join(import.meta.dirname, '..', '..')
const BENCH = join(ROOT, 'bench')

interface DistImport {
  module: string
  /** The names taken from it (`import { a, b as c }`, `const { a, b: c } = await import(…)`); none when the bench keeps the module whole. */
  names: string[]
}

/** The dist/ modules a bench file names: `'../dist/a/b.js'` and `join(ROOT, 'dist', 'a', 'b.js')`, with the names it takes. */
function distImports(text: string): DistImport[] {
  const found: DistImport[] = []
  const names = (list: string | undefined) =>
    (list ?? '')
      .split(',')
      .map(
        (n) =>
          n
            .trim()
            .split(/\s+as\s+|\s*:\s*/)[0]
            ?.trim() ?? '',
      )
      .filter((n) => n !== '')
  for (const m of text.matchAll(/(?:import\s*\{([^}]*)\}\s*from\s*)?['"]\.\.\/dist\/([^'"]+\.js)['"]/g))
    found.push({ module: m[2] as string, names: names(m[1]) })
  for (const m of text.matchAll(/(?:const\s*\{([^}]*)\}\s*=\s*await\s+import\(\s*)?join\(\s*ROOT\s*,\s*'dist'((?:\s*,\s*'[^']+')+)\s*\)/g))
    found.push({ module: [...(m[2] as string).matchAll(/'([^']+)'/g)].map((p) => p[1]).join('/'), names: names(m[1]) })
  return found
}

/** Whether a TypeScript source exports `name` as a value (a function, class, const…; `export { … }` lists too). */
function exportsValue(source: string, name: string): boolean {
  const declared = new RegExp(`\\bexport\\s+(?:declare\\s+)?(?:async\\s+)?(?:function\\*?|class|const|let|var|enum)\\s+${name}\\b`)
  const listed = [...source.matchAll(/\bexport\s*\{([^}]*)\}/g)].some((m) =>
    (m[1] as string).split(',').some(
      (n) =>
        n
          .trim()
          .split(/\s+as\s+/)
          .at(-1)
          ?.trim() === name,
    ),
  )
  return declared.test(source) || listed
}

describe('the benchmarks', () => {
  const files = readdirSync(BENCH).filter((f) => f.endsWith('.mjs'))

  it('import only dist/ modules whose source exists, and only names it exports', () => {
    const missing: string[] = []
    let seen = 0
    let named = 0
    for (const file of files) {
      for (const { module, names } of distImports(readFileSync(join(BENCH, file), 'utf8'))) {
        seen++
        const source = join(ROOT, 'src', module.replace(/\.js$/, '.ts'))
        if (!existsSync(source)) {
          missing.push(`bench/${file}: dist/${module}`)
          continue
        }
        const text = readFileSync(source, 'utf8')
        for (const name of names) {
          named++
          if (!exportsValue(text, name)) missing.push(`bench/${file}: ${name} from dist/${module}`)
        }
      }
    }
    expect(missing).toEqual([])
    // The two forms above are how the benches name the build; a bench written another way is not checked.
    expect(seen).toBeGreaterThan(10)
    expect(named).toBeGreaterThan(10)
  })

  it('name dist/ or bundle/ only in the two forms read above (any other would go unchecked)', () => {
    const unread = files.flatMap((file) => {
      const text = readFileSync(join(BENCH, file), 'utf8')
      // A path segment dist or bundle in a string: '../dist/…', 'dist', "bundle/…", `${ROOT}/dist/…`.
      const mentions = [...text.matchAll(/['"`/]\s*(dist|bundle)\s*['"`/]/g)].length
      const read = distImports(text).length
      return mentions === read ? [] : [`bench/${file}: ${mentions} mention(s) of the build, ${read} read`]
    })
    expect(unread).toEqual([])
  })

  it('read both ways a bench names a module, and the names it takes', () => {
    expect(
      distImports(
        `import { a, b as c } from '../dist/context/prune.js'\nconst { JobQueue, x: y } = await import(join(ROOT, 'dist', 'fleet', 'jobs.js'))\nawait import(join(ROOT, 'dist', 'cli.js'))`,
      ),
    ).toEqual([
      { module: 'context/prune.js', names: ['a', 'b'] },
      { module: 'fleet/jobs.js', names: ['JobQueue', 'x'] },
      { module: 'cli.js', names: [] },
    ])
    expect(exportsValue('export class JobQueue {}\nexport { a as b }', 'JobQueue')).toBe(true)
    expect(exportsValue('export class JobQueue {}\nexport { a as b }', 'b')).toBe(true)
    expect(exportsValue('export interface JobQueue {}', 'JobQueue')).toBe(false)
  })
})
